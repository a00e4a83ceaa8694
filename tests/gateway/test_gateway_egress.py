"""Egress: actors calling an outside A2A agent (an official a2a-sdk server) as if it
were an actor, in 1.0 and 0.3, and the bridged flow a2a-sdk client -> gateway ->
actor -> egress -> a2a-sdk server -> back."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "a2a.server.routes",
    reason="a2a-sdk[http-server] is not installed (needed for an A2A server to call)",
)
pytest.importorskip("uvicorn", reason="uvicorn serves the a2a-sdk test server")

import uvicorn
from _gateway import running_gateway
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
from actorbus.bus.server import EmbeddedServer
from actorbus.codecs.a2a import TaskNotFoundError
from actorbus.codecs.errors import (
    AskTimeoutError,
    ConnectionLostError,
    RemoteError,
    StreamCancelledError,
)
from actorbus.services.gateway.egress import A2AEgress, A2AProxy


class RemoteState:
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()


class EchoExecutor(AgentExecutor):
    """The remote agent: "remote: <text>"; "words ..." streams the words; "fail"
    fails; "forever" streams until cancelled; "slow" waits for the test."""

    def __init__(self, state: RemoteState) -> None:
        self.state = state

    async def execute(self, context: Any, event_queue: Any) -> None:
        text = context.get_user_input()
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


@contextlib.asynccontextmanager
async def a2a_server(state: RemoteState) -> AsyncIterator[str]:
    """An a2a-sdk server (1.0 with 0.3 compat) on a loopback socket; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn serves: no race
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
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
    app = Starlette(
        routes=[
            *create_agent_card_routes(card),
            *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        ]
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield base
    finally:
        state.release.set()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, 5)
        sock.close()


@pytest.fixture
async def remote() -> AsyncIterator[tuple[str, RemoteState]]:
    state = RemoteState()
    async with a2a_server(state) as base:
        yield base, state


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_egress_send_stream_errors(remote: tuple[str, RemoteState], version: str) -> None:
    base, _ = remote
    async with A2AEgress(base, version=version, timeout=2.0) as egress:
        assert egress.version == version
        assert egress.card is not None
        assert egress.card["name"] == "remote-echo"
        assert await egress.health_check()
        assert await egress.send("hello") == "remote: hello"
        session = egress.session
        assert await egress.send("again", context_id="ctx-1") == "remote: again"
        assert egress.session is session  # one HTTP session, reused
        items = [item async for item in egress.stream("words a b c")]
        assert items == ["A", "B", "C"]
        with pytest.raises(RemoteError, match="remote says no"):
            await egress.send("fail")
        with pytest.raises(TaskNotFoundError):
            await egress.get_task("no-such-task")


async def test_egress_timeouts_unreachable_and_early_exit(
    remote: tuple[str, RemoteState],
) -> None:
    base, state = remote
    async with A2AEgress(base, timeout=0.3) as egress:
        with pytest.raises(AskTimeoutError):
            await egress.send("slow")
    async with A2AEgress(base, timeout=2.0) as egress:
        async with contextlib.aclosing(egress.stream("forever")) as ticks:  # type: ignore[type-var]
            assert await anext(ticks) == "tick 0"
        await asyncio.wait_for(state.cancelled.wait(), WAIT)  # leaving early canceled it
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    gone = A2AEgress(dead, timeout=1.0)
    try:
        assert not await gone.health_check()
        with pytest.raises(ConnectionLostError):
            await gone.send("anyone?")
    finally:
        await gone.cleanup()
    assert StreamCancelledError.code == "E_CANCELLED"


async def test_bridged_flow_sdk_client_gateway_actor_egress_sdk_server(
    remote: tuple[str, RemoteState],
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
) -> None:
    base, _ = remote
    system: ActorSystem = await make_system()

    class Relay(A2AProxy):
        """Relays to the remote a2a-sdk agent."""

        type_name = "gw-relay"

    await system.spawn(Relay, "1", url=base)
    # an actor calls the outside agent as if it were an actor
    assert await system.ask("gw-relay/1", "direct") == "remote: direct"
    items = [i async for i in system.stream("gw-relay/1", "words x y", intent="stream-text")]
    assert items == ["X", "Y"]
    async with running_gateway(nats_server.url, ns, tmp_path / "gw.db", "gw-relay") as gw:
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
