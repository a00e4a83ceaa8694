"""Interop with the official MCP SDK (``mcp`` 2.x) client over streamable HTTP, in both
protocol revisions it speaks: 2025-11-25 (``ClientSession.initialize()``: handshake and
session) and 2026-07-28 (``ClientSession.discover()``: stateless), plus ``Client``'s
automatic negotiation. Initialize, list tools, call a tool (success, actor error as
``isError``, bad arguments as ``isError`` results, unknown tools as errors), continue
a task that asked for input, list and read the agents as resources, progress of a
streaming actor, prompts, resource templates and logging."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest

pytest.importorskip(
    "mcp.client.streamable_http",
    reason="the official MCP SDK is not installed (pip install 'mcp>=2.3,<3' for these tests)",
)

from _gateway import GatewayUnderTest
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import RequestParamsMeta
from test_gateway_mcp import AGENTS, host_mcp_agents

from actorbus.services.gateway import GatewayService

ERAS = ["2025-11-25", "2026-07-28"]


GATEWAY = GatewayUnderTest(agents=AGENTS, edges=("a2a", "mcp"), host=host_mcp_agents)


@asynccontextmanager
async def sdk_session(gw: GatewayService, era: str) -> AsyncIterator[ClientSession]:
    """An SDK session on the gateway, negotiated in ``era``."""
    async with (
        streamable_http_client(f"{gw.http_url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        if era == "2025-11-25":
            result = await session.initialize()
            assert result.protocol_version == era
            assert result.server_info.name == "actorbus-gateway"
            assert result.capabilities.tools is not None
        else:
            found = await session.discover()
            assert found.supported_versions == [era]
            assert found.capabilities.tools is not None
        assert session.protocol_version == era
        yield session


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_list_and_call(gw: GatewayService, era: str) -> None:
    async with sdk_session(gw, era) as session:
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert {"mcp-calc", "gw-echo.text", "gw-echo.dict", "gw-streamer"} <= set(tools)
        calc = tools["mcp-calc"]
        assert calc.title == "mcp-calc"
        assert calc.description is not None
        assert calc.description.startswith("Adds two integers")
        assert calc.input_schema["required"] == ["a", "b"]

        added = await session.call_tool("mcp-calc", {"a": 20, "b": 22})
        assert added.is_error is False
        assert added.structured_content == {"total": 42}
        assert text(added) == '{"total": 42}'

        shout = await session.call_tool("gw-echo.text", {"text": "hello sdk"})
        assert text(shout) == "HELLO SDK"
        words = await session.call_tool("gw-streamer", {"text": "one two"})
        assert [c.text for c in words.content] == ["ONETWO"]  # type: ignore[union-attr]  # one text

        # the agent fails: a result with isError, which the model can read
        failed = await session.call_tool("mcp-calc", {"a": -1, "b": 0})
        assert failed.is_error is True
        assert "negative numbers are not my thing" in text(failed)

        # bad arguments: a result the model reads (SEP-1303); unknown tools: an error
        bad = await session.call_tool("mcp-calc", {"a": "many", "b": 0})
        assert bad.is_error is True
        assert "arguments.a" in text(bad)
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("no-such-agent", {})
        assert unknown.value.code == -32602
        assert "Unknown tool" in unknown.value.message
        if era == "2025-11-25":
            await session.send_ping()

        # agents as resources (the UAP mapping's agent information)
        resources = await session.list_resources()
        uris = [str(r.uri) for r in resources.resources]
        assert "actorbus://agents/mcp-calc" in uris
        read = await session.read_resource("actorbus://agents/mcp-calc")
        info = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert info["tools"] == ["mcp-calc"]


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_input_required_continues(gw: GatewayService, era: str) -> None:
    async with sdk_session(gw, era) as session:
        await session.list_tools()
        asked = await session.call_tool("mcp-asker", {"text": "hi"})
        assert asked.is_error is False
        assert text(asked) == "who are you?"
        assert asked.meta is not None
        task = asked.meta["io.actorbus/task"]
        assert task["state"] == "input-required"
        done = await session.call_tool(
            "mcp-asker",
            {"text": "grace"},
            meta=cast(RequestParamsMeta, {"io.actorbus/taskId": task["id"]}),
        )
        assert text(done) == f"hello grace ({task['contextId']})"
        assert done.meta is not None
        assert done.meta["io.actorbus/task"]["state"] == "completed"


async def test_sdk_sessions_are_conversations(gw: GatewayService) -> None:
    """2025-11-25: one MCP session is one actorbus conversation, and closing the
    client deletes the session."""
    edge = next(e for e in gw._edges if e.name == "mcp")
    async with sdk_session(gw, "2025-11-25") as session:
        first = await session.call_tool("gw-echo.dict", {"n": 1})
        second = await session.call_tool("gw-echo.dict", {"n": 2})
        assert first.structured_content is not None
        assert second.structured_content is not None
        sid = first.structured_content["session"]
        assert second.structured_content["session"] == sid
        assert sid in edge._sessions  # type: ignore[attr-defined]
    assert sid not in edge._sessions  # type: ignore[attr-defined]


async def test_sdk_client_negotiates(gw: GatewayService) -> None:
    """``Client`` probes ``server/discover`` first and adopts 2026-07-28; ``mode="legacy"``
    does the handshake."""
    url = f"{gw.http_url}/mcp"
    async with Client(url) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None
        assert client.server_info.name == "actorbus-gateway"
        result = await client.call_tool("mcp-calc", {"a": 1, "b": 2})
        assert result.structured_content == {"total": 3}
    async with Client(url, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        names = [t.name for t in (await client.list_tools()).tools]
        assert "mcp-calc" in names
        result = await client.call_tool("gw-echo.text", {"text": "legacy"})
        assert text(result) == "LEGACY"


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_progress_of_a_streaming_actor(gw: GatewayService, era: str) -> None:
    """A call with a progress callback (the SDK sends a progress token) hears each
    item the actor streams as it comes, then gets the whole result."""
    heard: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    async with sdk_session(gw, era) as session:
        result = await session.call_tool(
            "gw-streamer", {"text": "alpha beta gamma"}, progress_callback=on_progress
        )
        assert not getattr(result, "is_error", False)
        assert text(result) == "ALPHABETAGAMMA"
        assert heard == [(1, "ALPHA"), (2, "BETA"), (3, "GAMMA")]
        # without a callback, no progress: one JSON answer, as before
        plain = await session.call_tool("gw-streamer", {"text": "one two"})
        assert text(plain) == "ONETWO"
        # arguments the schema refuses: the result, at once, on the stream
        bad = await session.call_tool("mcp-calc", {"a": "x", "b": 1}, progress_callback=on_progress)
        assert getattr(bad, "is_error", False) is True
        assert "arguments.a" in text(bad)
        assert len(heard) == 3


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")  # SEP-2577
async def test_sdk_prompts_templates_and_logging(gw: GatewayService) -> None:
    """An actor's prompt templates are MCP prompts; the agents' resources have a
    template; a session that asked for errors hears a failed call's."""
    logged: list[Any] = []

    async def on_log(params: Any) -> None:
        logged.append(params)

    async with (
        streamable_http_client(f"{gw.http_url}/mcp") as (read, write),
        ClientSession(read, write, logging_callback=on_log) as session,
    ):
        await session.initialize()
        prompts = {p.name: p for p in (await session.list_prompts()).prompts}
        assert [a.name for a in prompts["mcp-calc.sum"].arguments or ()] == ["a", "b", "audience"]
        got = await session.get_prompt("mcp-calc.sum", {"a": "2", "b": "3", "audience": "a child"})
        [message] = got.messages
        assert message.role == "user"
        assert getattr(message.content, "text", "") == (
            "Add 2 and 3, then explain the result to a child."
        )
        with pytest.raises(MCPError, match="needs the argument"):
            await session.get_prompt("mcp-calc.sum", {"a": "2"})
        with pytest.raises(MCPError, match="Unknown prompt"):
            await session.get_prompt("mcp-calc.nothing", {})

        [template] = (await session.list_resource_templates()).resource_templates
        assert template.uri_template == "actorbus://agents/{name}"

        await session.set_logging_level("error")

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            pass

        failed = await session.call_tool(
            "mcp-calc", {"a": -1, "b": 1}, progress_callback=on_progress
        )
        assert getattr(failed, "is_error", False) is True
    assert [entry.level for entry in logged] == ["error"]
    assert "negative numbers" in str(logged[0].data)
