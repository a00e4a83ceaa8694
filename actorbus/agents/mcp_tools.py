"""The tools of an MCP server, through the official ``mcp`` client.

:class:`McpTools` is a tool source: at each run it lists the server's tools
(their names, descriptions and input schemas as the server gives them) and
offers them to the model; a call goes to the server, and a result with
``isError`` goes back to the model as an error it can read. Two transports, the
ones the MCP specification defines: stdio (the server is a child process,
``command`` and ``args``) and streamable HTTP (``url``).

One session per source per process, opened on first use and kept: a stdio
server is started once, not per call. The SDK's transports are anyio context
managers that must be left by the task that entered them, so a task of its own
holds the session open; if the session breaks (the server exited) the next use
opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from actorbus.agents.messages import ToolSpec
from actorbus.agents.tools import Tool, ToolContext, tool_name
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.errors import ActorBusError
from actorbus.extras import require

log = logging.getLogger("actorbus.agents")


class McpToolError(ActorBusError):
    """An MCP server answered a tool call with ``isError``, or could not be reached."""

    code = "E_TOOL"


class McpTools:
    """The tools of one MCP server (stdio: ``command``/``args``; HTTP: ``url``).

    ``prefix`` goes before each tool's name (two servers may both have a
    ``search``); ``tools`` keeps only those names; ``timeout`` bounds a call."""

    def __init__(
        self,
        *,
        command: str | None = None,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        url: str | None = None,
        headers: dict[str, str] | None = None,
        prefix: str = "",
        tools: Sequence[str] | None = None,
        timeout: float | None = None,
        start_timeout: float = 20.0,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("McpTools needs either command= (stdio) or url= (streamable HTTP)")
        self.command, self.args, self.env = command, list(args), env
        self.url, self.headers = url, headers
        self.prefix = prefix
        self.only = set(tools) if tools is not None else None
        self.timeout = timeout
        self.start_timeout = start_timeout
        self._session: asyncio.Future[Any] | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    @property
    def where(self) -> str:
        return self.url or " ".join([self.command or "", *self.args])

    async def tools(self, agent: Any) -> Sequence[Tool]:
        """The server's tools now (a server that cannot be reached offers none,
        and says why in the log: the run goes on with the other tools)."""
        try:
            session = await self.session()
            listed = await session.list_tools()
        except Exception as exc:
            log.warning("MCP server %s: cannot list its tools: %r", self.where, exc)
            await self._reset()
            return []
        found: list[Tool] = []
        for t in listed.tools:
            if self.only is not None and t.name not in self.only:
                continue
            spec = ToolSpec(
                name=tool_name(f"{self.prefix}_{t.name}" if self.prefix else t.name),
                description=t.description or "",
                parameters=dict(t.input_schema or {"type": "object", "properties": {}}),
            )
            found.append(McpTool(self, t.name, spec))
        return found

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        session = await self.session()
        try:
            result = await session.call_tool(name, arguments, read_timeout_seconds=self.timeout)
        except Exception as exc:
            await self._reset()
            raise McpToolError(f"MCP server {self.where}: {name}: {exc}") from exc
        text = "\n".join(getattr(c, "text", "") or "" for c in result.content)
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content)
        if result.is_error:
            raise McpToolError(text or f"{name} failed")
        return text

    async def session(self) -> Any:
        """The open session (opened now if there is none)."""
        if self._session is None or (self._session.done() and self._session.exception()):
            await self._reset()
            self._session = asyncio.get_running_loop().create_future()
            self._closing = asyncio.Event()
            self._holder = supervise(f"MCP session with {self.where}", self._hold, logger=log)
        async with asyncio.timeout(self.start_timeout):
            return await asyncio.shield(self._session)

    async def close(self) -> None:
        """End the session (a stdio server exits)."""
        self._closing.set()
        holder, self._holder = self._holder, None
        if holder is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(holder), 5.0)
            await stop_task(holder, what=f"MCP session with {self.where}")
        self._session = None

    async def _reset(self) -> None:
        if self._holder is not None:
            await self.close()
        self._session = None

    async def _hold(self) -> None:
        mcp = require("mcp", "agents", "MCP tools")
        ready = self._session
        assert ready is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.url is not None:
                    from mcp.client.streamable_http import streamable_http_client

                    http = None
                    if self.headers:
                        import httpx2

                        http = await stack.enter_async_context(
                            httpx2.AsyncClient(headers=self.headers)
                        )
                    read, write = await stack.enter_async_context(
                        streamable_http_client(self.url, http_client=http)
                    )
                else:
                    from mcp.client.stdio import StdioServerParameters, stdio_client

                    params = StdioServerParameters(
                        command=self.command or "", args=self.args, env=self.env
                    )
                    read, write = await stack.enter_async_context(stdio_client(params))
                session = await stack.enter_async_context(mcp.ClientSession(read, write))
                await session.initialize()
                if not ready.done():
                    ready.set_result(session)
                await self._closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(
                    McpToolError(f"MCP server {self.where} cannot be reached: {exc!r}")
                )
            else:
                log.warning("MCP session with %s ended: %r", self.where, exc)
            self._session = None


class McpTool:
    """One tool of an MCP server."""

    def __init__(self, source: McpTools, name: str, spec: ToolSpec) -> None:
        self.source = source
        self.name = name
        self.spec = spec
        self.timeout = source.timeout

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return await self.source.call(self.name, arguments)

    def __repr__(self) -> str:
        return f"<MCP tool {self.spec.name} of {self.source.where}>"
