"""Interop with the official acp-sdk 1.0.3: its client against the gateway's ACP
edge (sync, async, stream, await/resume, cancel, events, sessions); ACP egress
against an acp-sdk *server*; and the bridge acp-sdk client -> gateway -> actor ->
egress -> acp-sdk server -> back.

acp-sdk's server module annotates with ``uvicorn.config.LoopSetupType``, which
uvicorn 0.36 removed, so it cannot even be imported next to a current uvicorn.
The test gives uvicorn that name back (an alias of ``str``, used in annotations
only) before importing it, and serves ``create_app`` with uvicorn itself; the
SDK's own ``Server.serve`` is not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp_sdk.client", reason="acp-sdk is not installed (pip install acp-sdk)")
pytest.importorskip("uvicorn", reason="uvicorn serves the acp-sdk test server")

import uvicorn
import uvicorn.config
from _gateway import (
    RUN_STREAM_EVENTS,
    GatewayUnderTest,
    Probe,
    asgi_server,
    check_egress,
    check_relay,
    check_unreachable,
    running_gateway,
)
from _util import WAIT
from acp_sdk.client import Client
from acp_sdk.models import (
    ACPError,
    Message,
    MessageAwaitRequest,
    MessageAwaitResume,
    MessagePart,
    RunStatus,
)

from actorbus import ActorSystem
from actorbus.codecs.errors import (
    ActorNotFoundError,
    AskTimeoutError,
    RemoteError,
    UnsupportedError,
)
from actorbus.services.gateway import GatewayService
from actorbus.services.gateway.egress_acp import AcpEgress, AcpProxy, acp_session

if not hasattr(uvicorn.config, "LoopSetupType"):  # see the module docstring
    uvicorn.config.LoopSetupType = str  # type: ignore[attr-defined]

from acp_sdk.server import Context, agent as acp_agent, create_app

AGENTS = ("gw-echo", "gw-streamer")
EDGES = ("a2a", "acp")


GATEWAY = GatewayUnderTest(agents=AGENTS, edges=EDGES, ask_timeout=2.0)


def text(part: str) -> Message:
    return Message(role="user", parts=[MessagePart(content=part)])


def output(run: Any) -> list[str]:
    return [str(p.content) for m in run.output for p in m.parts]


async def initialized(egress: AcpEgress) -> None:
    """``initialize()``, then ``cleanup()`` whatever happened."""
    try:
        await egress.initialize()
    finally:
        await egress.cleanup()


# -- the acp-sdk client against the gateway ------------------------------------------------


async def test_sdk_client_sync_async_stream(gw: GatewayService) -> None:
    async with Client(base_url=f"{gw.http_url}/acp", timeout=WAIT) as client:
        await client.ping()
        names = [a.name async for a in client.agents()]
        assert set(AGENTS) <= set(names)
        manifest = await client.agent(name="gw-echo")
        assert manifest.metadata.capabilities is not None
        assert manifest.metadata.capabilities[0].name == "echo"

        run = await client.run_sync("hello", agent="gw-echo")
        assert run.status is RunStatus.COMPLETED
        assert output(run) == ["HELLO"]
        assert str(run.output[0]) == "HELLO"
        assert (await client.run_status(run_id=run.run_id)).status is RunStatus.COMPLETED
        kinds = [e.type async for e in client.run_events(run_id=run.run_id)]
        assert kinds[0] == "run.created"
        assert kinds[-1] == "run.completed"

        started = await client.run_async("later", agent="gw-echo")
        assert started.status in (RunStatus.CREATED, RunStatus.IN_PROGRESS)
        live = gw.core.live(started.run_id.hex)
        if live is not None:
            await asyncio.wait_for(gw.core.wait_settled(live), WAIT)
        assert output(await client.run_status(run_id=started.run_id)) == ["LATER"]

        events: list[Any] = [e async for e in client.run_stream("a b c", agent="gw-streamer")]
        assert [e.type for e in events] == RUN_STREAM_EVENTS
        assert [e.part.content for e in events if e.type == "message.part"] == ["A", "B", "C"]
        assert output(events[-1].run) == ["ABC"]  # the text items, one text

        with pytest.raises(ACPError) as info:
            await client.run_sync("x", agent="nobody")
        assert info.value.error.code == "not_found"
        failed = await client.run_sync("fail", agent="gw-echo")
        assert failed.status is RunStatus.FAILED
        assert failed.error is not None
        assert "asked to fail" in failed.error.message
        with pytest.raises(ACPError, match="asked to fail"):
            failed.raise_for_status()


async def test_sdk_client_await_resume_and_session(gw: GatewayService) -> None:
    async with Client(base_url=f"{gw.http_url}/acp", timeout=WAIT) as client:
        run = await client.run_sync("ask me", agent="gw-echo")
        assert run.status is RunStatus.AWAITING
        assert run.await_request is not None
        assert str(run.await_request.message) == "what is your name?"
        done = await client.run_resume_sync(
            MessageAwaitResume(message=text("bob")), run_id=run.run_id
        )
        assert done.status is RunStatus.COMPLETED
        assert output(done)[-1] == "HELLO BOB"

        events: list[Any] = [e async for e in client.run_stream("ask me", agent="gw-echo")]
        assert events[-1].type == "run.awaiting"
        resumed: list[Any] = [
            e
            async for e in client.run_resume_stream(
                MessageAwaitResume(message=text("ann")), run_id=events[-1].run.run_id
            )
        ]
        assert resumed[-1].type == "run.completed"
        assert output(resumed[-1].run)[-1] == "HELLO ANN"

        # a session: the SDK asks the server for it (404: new), then names it in each run
        async with client.session() as session:
            first = await session.run_sync("one", agent="gw-echo")
            second = await session.run_sync("two", agent="gw-echo")
            assert first.session_id == second.session_id
            got = await session.refresh_session()
            assert got.id == first.session_id
            assert len(got.history) == 4
            history = [str(m) async for m in got.load_history()]
            assert history == ["one", "ONE", "two", "TWO"]


async def test_sdk_client_cancel_reaches_the_actor(gw: GatewayService, probe: Probe) -> None:
    async with Client(base_url=f"{gw.http_url}/acp", timeout=WAIT) as client:
        run_id = None
        cancelled = None
        event: Any
        async for event in client.run_stream("forever", agent="gw-streamer"):
            if event.type == "run.created":
                run_id = event.run.run_id
            if event.type == "message.part" and cancelled is None:
                assert run_id is not None
                cancelled = await client.run_cancel(run_id=run_id)
            last = event
        assert cancelled is not None
        assert cancelled.status is RunStatus.CANCELLED
        assert last.type == "run.cancelled"
        await asyncio.wait_for(probe.cancelled.wait(), WAIT)
        assert run_id is not None
        with pytest.raises(ACPError):
            await client.run_cancel(run_id=run_id)


# -- egress against an acp-sdk server --------------------------------------------------


class AcpRelay(AcpProxy):
    """Relays to the remote acp-sdk agent."""

    type_name = "gw-acp-relay"


class RemoteState:
    def __init__(self) -> None:
        self.release = asyncio.Event()


def remote_agents(state: RemoteState) -> list[Any]:
    @acp_agent(name="echo", description="an acp-sdk agent")
    async def echo(input: list[Message], context: Context) -> AsyncGenerator[Any, Any]:
        said = "".join(str(m) for m in input)
        if said == "fail":
            raise ValueError("remote says no")
        if said == "slow":
            await state.release.wait()
        if said == "ask":
            answer = yield MessageAwaitRequest(message=text("who?"))
            said = f"hi {answer.message}"
        if said.startswith("words "):
            for word in said.split()[1:]:
                yield MessagePart(content=word.upper())
            return
        if said == "forever":
            i = 0
            while True:
                yield MessagePart(content=f"tick {i}")
                i += 1
                await asyncio.sleep(0.02)  # a producer pacing itself
        yield MessagePart(content=f"remote: {said}")

    @acp_agent(name="other")
    async def other(input: list[Message]) -> AsyncGenerator[str, None]:
        yield "other"

    return [echo, other]


@pytest.fixture
async def remote() -> AsyncIterator[tuple[str, RemoteState]]:
    """An acp-sdk server on a loopback socket: its base URL and its state."""
    state = RemoteState()

    def app(base: str) -> Any:
        return create_app(*remote_agents(state), enable_playground_cors=False)

    async with asgi_server(app, state.release, lifespan="on") as base:
        yield base, state


async def test_egress_against_the_sdk_server(remote: tuple[str, RemoteState]) -> None:
    base, _ = remote
    async with AcpEgress(base, agent="echo", timeout=2.0) as egress:
        assert egress.manifest is not None
        assert egress.manifest["description"] == "an acp-sdk agent"
        await check_egress(egress, session_id="s-1")
        with pytest.raises(RemoteError, match="remote says no"):
            await egress.send("fail")
        with pytest.raises(UnsupportedError, match="who"):
            await egress.send("ask")
        waiting = await egress.run("ask")
        assert waiting["status"] == "awaiting"
        done = await egress.resume(waiting["run_id"], "ann")
        assert done["status"] == "completed"
        assert done["output"][-1]["parts"][0]["content"] == "remote: hi ann"
        events = await egress.run_events(done["run_id"])
        assert events[-1]["type"] == "run.completed"
        with pytest.raises(ActorNotFoundError):
            await egress.get_run(str(uuid.uuid4()))
    with pytest.raises(UnsupportedError, match="2 agents"):  # which one?
        await initialized(AcpEgress(base))
    with pytest.raises(ActorNotFoundError):
        await initialized(AcpEgress(f"{base}/agents/nobody"))
    named = AcpEgress(f"{base}/agents/echo")
    try:
        assert named.agent == "echo"
        assert await named.send("by url") == "remote: by url"
    finally:
        await named.cleanup()


async def test_egress_timeouts_unreachable_and_early_exit(
    remote: tuple[str, RemoteState],
) -> None:
    base, _ = remote
    async with AcpEgress(base, agent="echo", timeout=WAIT) as egress:
        egress.timeout = 0.3  # for a run that never ends, once the manifest was read
        with pytest.raises(AskTimeoutError):
            await egress.send("slow")
    async with AcpEgress(base, agent="echo", timeout=2.0) as egress:
        async with contextlib.aclosing(egress.stream("forever")) as ticks:  # type: ignore[type-var]
            assert await anext(ticks) == "tick 0"
        # leaving early cancelled the remote run (the acp-sdk server marks it; it does
        # not stop the agent's own generator, which just is not resumed any more)
        assert egress.last_run_id is not None
        gone_run = await egress.get_run(egress.last_run_id)
        assert gone_run["status"] in ("cancelling", "cancelled")
    await check_unreachable(lambda dead: AcpEgress(dead, agent="echo", timeout=1.0))
    assert acp_session("s-1") == acp_session("s-1") != acp_session("s-2")
    fixed = str(uuid.uuid4())
    assert acp_session(fixed) == fixed


async def test_bridged_flow_acp_sdk_client_gateway_actor_egress_sdk_server(
    remote: tuple[str, RemoteState], system: ActorSystem, tmp_path: Path
) -> None:
    base, _ = remote
    await check_relay(system, AcpRelay, url=base, agent="echo")
    async with running_gateway(
        system.url, system.namespace, tmp_path / "gw.db", "gw-acp-relay", edges=EDGES
    ) as gw:
        async with Client(base_url=f"{gw.http_url}/acp", timeout=WAIT) as client:
            run = await client.run_sync("over the bridge", agent="gw-acp-relay")
        assert run.status is RunStatus.COMPLETED
        assert output(run) == ["remote: over the bridge"]
        # actorbus to actorbus over ACP: egress -> gateway -> relay -> egress -> acp-sdk
        async with AcpEgress(f"{gw.http_url}/acp/agents/gw-acp-relay") as loop:
            assert await loop.send("round trip") == "remote: round trip"
            assert [i async for i in loop.stream("streamed")] == ["remote: streamed"]
