"""An MCP server's tools as an agent's tools, through the official ``mcp`` client,
over both transports: stdio (the server a child process) and streamable HTTP
(the server the official SDK's own, in a process of its own)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
from _util import child_env, terminate

from actorbus import ActorSystem
from actorbus.agents import Agent, AgentTask, OpenAIModel
from actorbus.agents.mcp_tools import McpTools
from actorbus.testing.scripted_model import ScriptedModel, calls, say

SERVER = str(Path(__file__).resolve().parents[1] / "_mcp_server.py")


class NoteTaker(Agent):
    server: ClassVar[ScriptedModel]

    @staticmethod
    def model() -> OpenAIModel:  # type: ignore[override]
        return OpenAIModel("scripted-1", api_key="test", base_url=NoteTaker.server.openai_url)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    """The SDK's MCP server over streamable HTTP, in a process of its own."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        SERVER,
        str(port),
        env=child_env(),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)  # polling a port: no event to wait on
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await terminate(proc)


async def run_with(system: ActorSystem, scripted: ScriptedModel, source: McpTools) -> list[str]:
    class Notes(NoteTaker):
        type_name = f"notes-{len(scripted.requests)}"
        tools = (source,)

    NoteTaker.server = scripted
    await system.register(Notes)
    scripted.script(
        calls(("notes_add_note", {"text": "buy milk"}), ("notes_explode", {"reason": "why"})),
        calls(("notes_list_notes", {})),
        say("Noted."),
    )
    try:
        answer = await system.ask(f"{Notes.type_name}/n", AgentTask(prompt="note it"), timeout=30)
    finally:
        await source.close()
    assert answer.text == "Noted."
    assert sorted(scripted.requests[0].tool_names) == [
        "notes_add_note",
        "notes_explode",
        "notes_list_notes",
    ]
    return [m["content"] for r in scripted.requests[1:] for m in r.messages if m["role"] == "tool"]


async def test_the_tools_of_an_mcp_server_over_stdio(
    system: ActorSystem, scripted_model: ScriptedModel
) -> None:
    source = McpTools(command=sys.executable, args=[SERVER], prefix="notes")
    results = await run_with(system, scripted_model, source)
    assert results[:2] == [
        "noted (1 in all)",
        "error: notes_explode failed: McpToolError: Error executing tool explode",
    ]
    assert results[-1] == "buy milk"


async def test_the_tools_of_an_mcp_server_over_streamable_http(
    system: ActorSystem, scripted_model: ScriptedModel, http_server: str
) -> None:
    source = McpTools(url=http_server, prefix="notes")
    results = await run_with(system, scripted_model, source)
    assert results[0] == "noted (1 in all)"
    assert results[-1] == "buy milk"


async def test_a_server_that_cannot_be_reached_offers_no_tools(
    system: ActorSystem, scripted_model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    class Lonely(NoteTaker):
        tools = (McpTools(url=f"http://127.0.0.1:{free_port()}/mcp", start_timeout=5),)

    NoteTaker.server = scripted_model
    await system.register(Lonely)
    scripted_model.script(say("I have no tools today."))
    answer = await system.ask("lonely/l", AgentTask(prompt="hi"), timeout=30)
    assert answer.text == "I have no tools today."
    assert scripted_model.requests[0].tool_names == []
    assert any("cannot list its tools" in r.getMessage() for r in caplog.records)
