"""A ``tools/call`` of the MCP edge as a gateway task: checked, started, settled,
and for a client that sent a progress token, answered as an event stream of
``notifications/progress`` (one per item the actor streams) and then the result.
Arguments a tool's schema refuses are a result the model reads (SEP-1303)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from opentelemetry import trace

from actorbus.codecs.tasks import ArtifactUpdate, Message, Task, TaskState, parts_from_content
from actorbus.services.gateway.agents import (
    Event,
    LiveTask,
    TaskNotContinuableError,
    UnknownTaskError,
)
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.edges.http import SSE_HEADERS
from actorbus.services.gateway.edges.mcp_prompts import LOG_LEVELS
from actorbus.services.gateway.edges.mcp_tools import (
    BadArguments,
    bad_arguments,
    task_result,
    tools_of,
)
from actorbus.services.gateway.edges.mcp_wire import (
    CONTEXT_ID_META,
    INVALID_PARAMS,
    LOG,
    PROGRESS,
    SERVER_INFO_META,
    TASK_ID_META,
    Call,
    McpError,
    server_info,
    sse_message,
)

log = logging.getLogger("actorbus.gateway.mcp")


class ToolCalls:
    """The MCP edge's tool calls, as tasks of the gateway's ``core``."""

    def __init__(self, core: GatewayCore) -> None:
        self.core = core

    async def call(self, call: Call) -> dict[str, Any]:
        """The call's result, once its task settled (a JSON answer)."""
        try:
            live, _ = await self._start_call(call, watch=False)
        except BadArguments as e:
            return bad_arguments(str(call.params.get("name")), e)
        return task_result(await self._settle(call, live))

    async def call_with_progress(
        self, request: web.Request, call: Call, token: str | int
    ) -> web.StreamResponse:
        """A ``tools/call`` whose client sent a progress token: an event stream of
        ``notifications/progress``, one per item the actor streams (its text as the
        ``message``), then the result."""
        response = web.StreamResponse(headers=SSE_HEADERS)
        try:
            live, events = await self._start_call(call, watch=True)
        except BadArguments as e:  # answered at once, on the stream the client asked for
            refused = stamped(bad_arguments(str(call.params.get("name")), e), call.modern)
            await response.prepare(request)
            await response.write(sse_message({"jsonrpc": "2.0", "id": call.id, "result": refused}))
            await response.write_eof()
            return response
        assert events is not None
        await response.prepare(request)
        progress = 0
        try:
            async for event in events:
                if not isinstance(event, ArtifactUpdate):
                    continue
                progress += 1
                text = "".join(str(p.value) for p in event.artifact.parts if p.kind == "text")
                note = {"progressToken": token, "progress": progress, "message": text}
                notification = {"jsonrpc": "2.0", "method": PROGRESS, "params": note}
                await response.write(sse_message(notification))
            task = await self._settle(call, live)
            if task.status.state in (TaskState.FAILED, TaskState.REJECTED):
                await self._log(response, call, "error", task)
            result = stamped(task_result(task), call.modern)
            await response.write(sse_message({"jsonrpc": "2.0", "id": call.id, "result": result}))
            await response.write_eof()
        except ConnectionError:
            log.debug("the MCP client of call %s went away (the task goes on)", call.id)
        return response

    async def _log(self, response: web.StreamResponse, call: Call, level: str, task: Task) -> None:
        """A ``notifications/message`` about ``task`` on the call's stream, if the
        session asked to hear ``level`` (``logging/setLevel``)."""
        wanted = call.session.log_level if call.session is not None else None
        if wanted is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
            return
        status = task.status.message
        text = " ".join(str(p.value) for p in status.parts if p.kind == "text") if status else ""
        params = {"level": level, "logger": "actorbus.gateway", "data": text or task.status.state}
        await response.write(sse_message({"jsonrpc": "2.0", "method": LOG, "params": params}))

    async def _settle(self, call: Call, live: LiveTask) -> Task:
        try:
            return await self.core.wait_settled(live)
        finally:
            if call.session is not None:
                call.session.running.pop(call.id, None)

    async def _start_call(
        self, call: Call, *, watch: bool
    ) -> tuple[LiveTask, AsyncIterator[Event] | None]:
        """Check the call and start its task (with its events when ``watch``);
        McpError for what the protocol refuses, BadArguments for arguments the
        tool's schema refuses (a result the model reads, SEP-1303)."""
        name = call.params.get("name")
        if not isinstance(name, str):
            raise McpError(INVALID_PARAMS, "`params.name` must be a string")
        arguments = call.params.get("arguments")
        if arguments is None:
            arguments = {}
        tool = next((t for t in tools_of(await self.core.agents()) if t.name == name), None)
        if tool is None:
            raise McpError(INVALID_PARAMS, f"Unknown tool: {name}")
        trace.get_current_span().set_attribute("actorbus.gateway.agent", tool.agent.name)
        content = tool.content(arguments)
        meta = call.params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        task_id = meta.get(TASK_ID_META)
        context_id = meta.get(CONTEXT_ID_META)
        if task_id is not None and not isinstance(task_id, str):
            raise McpError(INVALID_PARAMS, f"`_meta[{TASK_ID_META!r}]` must be a string")
        if context_id is not None and not isinstance(context_id, str):
            raise McpError(INVALID_PARAMS, f"`_meta[{CONTEXT_ID_META!r}]` must be a string")
        if context_id is None and task_id is None and call.session is not None:
            context_id = call.session.id  # one MCP session, one conversation
        message = Message(
            message_id=uuid.uuid4().hex,
            role="user",
            parts=parts_from_content(content),
            task_id=task_id,
            context_id=context_id,
        )
        try:
            live, events = await self.core.submit(
                tool.agent,
                message,
                protocol="mcp",
                intent=tool.intent,
                content=content,
                stream=False,
                watch=watch,
                # ids are the session's (taken once there); a stateless call's id
                # is its Idempotency-Key header
                request_id=None if call.session is None else f"mcp:{call.session.id}:{call.id}",
            )
        except (UnknownTaskError, TaskNotContinuableError) as e:
            raise McpError(INVALID_PARAMS, str(e)) from None
        if call.session is not None:
            call.session.running[call.id] = live.task.id
        return live, events


def stamped(result: dict[str, Any], modern: bool) -> dict[str, Any]:
    """``result`` as its revision wants it: 2026-07-28 results carry their
    ``resultType`` and the server's stamp in ``_meta``."""
    if modern:
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        result["_meta"] = {**(meta if isinstance(meta, dict) else {})}
        result["_meta"].setdefault(SERVER_INFO_META, server_info())
    return result
