"""Egress: actors calling an outside A2A agent (an official a2a-sdk server) as if it
were an actor, in 1.0 and 0.3, and the bridged flow a2a-sdk client -> gateway ->
actor -> egress -> a2a-sdk server -> back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "a2a.server.routes",
    reason="a2a-sdk[http-server] is not installed (needed for an A2A server to call)",
)
pytest.importorskip("uvicorn", reason="uvicorn serves the a2a-sdk test server")

from _gateway import asgi_server, check_egress, check_relay, check_unreachable, running_gateway
from _util import WAIT
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers.proto_helpers import (
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import Role, SendMessageRequest, TaskState
from starlette.applications import Starlette

from actorbus import ActorSystem
from actorbus.codecs.a2a import TaskNotFoundError
from actorbus.codecs.errors import (
    AskTimeoutError,
    RemoteError,
    StreamCancelledError,
)
from actorbus.services.gateway.egress import A2AEgress, A2AProxy


class A2ARelay(A2AProxy):
    """Relays to the remote a2a-sdk agent."""

    type_name = "gw-relay"


class RemoteState:
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.contexts: list[str] = []  # each message's A2A context, in order


class EchoExecutor(AgentExecutor):
    """The remote agent: "remote: <text>"; "words ..." streams the words; "fail"
    fails; "forever" streams until cancelled; "slow" waits for the test."""

    def __init__(self, state: RemoteState) -> None:
        self.state = state

    async def execute(self, context: Any, event_queue: Any) -> None:
        text = context.get_user_input()
        self.state.contexts.append(context.context_id)
        if context.current_task is None:  # a new task: the SDK wants the Task first
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        if text == "fail":
            await updater.failed(new_text_message("remote says no", role=Role.ROLE_AGENT))
            return
        if text == "slow":
            await self.state.release.wait()
        if text.startswith("words "):
            for word in text.split()[1:]:
                await updater.add_artifact([new_text_part(word.upper())])
        elif text == "forever":
            i = 0
            while not self.state.cancelled.is_set():
                await updater.add_artifact([new_text_part(f"tick {i}")])
                i += 1
                await asyncio.sleep(0.02)  # a producer pacing itself
            return
        else:
            await updater.add_artifact([new_text_part(f"remote: {text}")])
        await updater.complete()

    async def cancel(self, context: Any, event_queue: Any) -> None:
        self.state.cancelled.set()
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def a2a_app(state: RemoteState, base: str) -> Starlette:
    """An a2a-sdk server (1.0 with 0.3 compat) whose card says it is at ``base``."""
    card = parse_agent_card(
        {
            "name": "remote-echo",
            "description": "an a2a-sdk agent",
            "version": "1.0.0",
            "supportedInterfaces": [
                {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            ],
            "capabilities": {"streaming": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "echo", "description": "echo", "tags": ["echo"]}],
        }
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(state), task_store=InMemoryTaskStore(), agent_card=card
    )
    return Starlette(
        routes=[
            *create_agent_card_routes(card),
            *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        ]
    )


@pytest.fixture
async def remote() -> AsyncIterator[tuple[str, RemoteState]]:
    state = RemoteState()
    async with asgi_server(lambda base: a2a_app(state, base), state.release) as base:
        yield base, state


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_egress_send_stream_errors(remote: tuple[str, RemoteState], version: str) -> None:
    base, _ = remote
    async with A2AEgress(base, version=version, timeout=2.0) as egress:
        assert egress.version == version
        assert egress.card is not None
        assert egress.card["name"] == "remote-echo"
        await check_egress(egress, context_id="ctx-1")
        with pytest.raises(RemoteError, match="remote says no"):
            await egress.send("fail")
        with pytest.raises(TaskNotFoundError):
            await egress.get_task("no-such-task")


async def test_egress_timeouts_unreachable_and_early_exit(
    remote: tuple[str, RemoteState],
) -> None:
    base, state = remote
    async with A2AEgress(base, timeout=WAIT) as egress:
        egress.timeout = 0.3  # for a task that never ends, once the card was read
        with pytest.raises(AskTimeoutError):
            await egress.send("slow")
    async with A2AEgress(base, timeout=2.0) as egress:
        async with contextlib.aclosing(egress.stream("forever")) as ticks:  # type: ignore[type-var]
            assert await anext(ticks) == "tick 0"
        await asyncio.wait_for(state.cancelled.wait(), WAIT)  # leaving early canceled it
    await check_unreachable(lambda dead: A2AEgress(dead, timeout=1.0))
    assert StreamCancelledError.code == "E_CANCELLED"


async def test_bridged_flow_a2a_sdk_client_gateway_actor_egress_sdk_server(
    remote: tuple[str, RemoteState], system: ActorSystem, tmp_path: Path
) -> None:
    base, _ = remote
    await check_relay(system, A2ARelay, url=base)
    async with running_gateway(system.url, system.namespace, tmp_path / "gw.db", "gw-relay") as gw:
        client = await create_client(
            f"{gw.http_url}/a2a/gw-relay", client_config=ClientConfig(streaming=False)
        )
        try:
            events = [
                e
                async for e in client.send_message(
                    SendMessageRequest(
                        message=new_text_message("over the bridge", role=Role.ROLE_USER)
                    )
                )
            ]
        finally:
            await client.close()
        # actorbus to actorbus over A2A: egress -> gateway -> relay -> egress -> a2a-sdk
        async with A2AEgress(f"{gw.http_url}/a2a/gw-relay", version="0.3") as loop:
            assert loop.version == "0.3"
            assert await loop.send("round trip") == "remote: round trip"
            assert [i async for i in loop.stream("streamed")] == ["remote: streamed"]
    task = events[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["remote: over the bridge"]


async def test_an_outside_a2a_agent_is_an_agents_tool(
    remote: tuple[str, RemoteState], system: ActorSystem, scripted_model: Any
) -> None:
    """Its card names and describes the tool; the model's prompt goes over A2A and
    the answer comes back as the tool's result, a failed task as an error."""
    from actorbus.agents import Agent, AgentTask, OpenAIModel
    from actorbus.agents.a2a_tools import A2ATool
    from actorbus.testing.scripted_model import call, say

    base, state = remote
    outside = A2ATool(base)

    class Asker(Agent):
        tools = (outside,)
        model = OpenAIModel("scripted-1", api_key="test", base_url=scripted_model.openai_url)

    await system.register(Asker)
    scripted_model.script(
        call("ask_remote-echo", prompt="hello out there"),
        call("ask_remote-echo", prompt="fail"),
        say("done"),
    )
    try:
        answer = await system.ask("asker/a", AgentTask(prompt="go"), timeout=WAIT * 4)
        assert answer.text == "done"
        first = scripted_model.requests[0].body["tools"][0]["function"]
        assert first["name"] == "ask_remote-echo"
        assert first["description"] == "an a2a-sdk agent (skills: echo)"
        results = [r.messages[-1]["content"] for r in scripted_model.requests[1:]]
        assert results[0] == "remote: hello out there"
        assert results[1].startswith("error: ask_remote-echo failed: RemoteError")
        assert "remote says no" in results[1]

        # One conversation is one A2A context there, across runs; another is another.
        scripted_model.script(call("ask_remote-echo", prompt="again"), say("done"))
        scripted_model.script(call("ask_remote-echo", prompt="other"), say("done"))
        await system.ask("asker/a", AgentTask(prompt="go on"), timeout=WAIT * 4)
        await system.ask("asker/b", AgentTask(prompt="go"), timeout=WAIT * 4)
    finally:
        await outside.close()
    one, two, again, other = state.contexts
    assert one == two == again != other
