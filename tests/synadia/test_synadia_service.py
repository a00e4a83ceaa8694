"""actorbus actors as Synadia agents, seen by the official client (synadia-ai-agents).

A real nats-server (the session fixture); owner = the test's namespace, so
tests sharing the server never see each other's agents. Skipped when the
client package is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import pytest
from _util import child_env, terminate
from nats.aio.client import Client as NATS
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.codecs.errors import RemoteError, ValidationFailedError
from actorbus.codecs.synadia import ReplyStream, parse_heartbeat
from actorbus.services.synadia import (
    BridgeSettings,
    PromptSettings,
    SynadiaAgent,
    SynadiaBridge,
)

MakeSystem = Callable[..., Awaitable[ActorSystem]]

sdk = pytest.importorskip("synadia_ai.agents", reason="synadia-ai-agents is not installed")


class Question(BaseModel):
    text: str


class Answer(BaseModel):
    text: str


class Shout(Actor):
    """Shouts what it is told."""

    @handler
    async def shout(self, q: Question) -> Answer:
        return Answer(text=q.text.upper())


class Spell(Actor):
    """Spells a word, one letter at a time."""

    @handler
    async def spell(self, word: str):  # type: ignore[no-untyped-def]
        for letter in word:
            yield letter


class Broken(Actor):
    @handler
    async def fail(self, text: str) -> str:
        raise ValueError(f"cannot handle {text}")


class Huge(Actor):
    @handler
    async def grow(self, text: str) -> str:
        return text * 2_000_000


class Slow(Actor):
    """Answers once the test lets it (a keep-alive must come meanwhile)."""

    release: asyncio.Event | None = None

    @handler
    async def wait(self, text: str) -> str:
        assert Slow.release is not None
        await Slow.release.wait()
        return "done"


FAST = BridgeSettings(prompt=PromptSettings(keepalive_interval=0.05))


@contextlib.asynccontextmanager
async def bridged(
    system: ActorSystem, ns: str, *types: type[Actor]
) -> AsyncIterator[SynadiaBridge]:
    for t in types:
        await system.spawn(t, key="1")
    async with SynadiaBridge(system, list(types), owner=ns, settings=FAST) as bridge:
        yield bridge


async def found(client: Any, ns: str) -> dict[str, Any]:
    agents = await client.discover(stall=0.1, filter=sdk.DiscoverFilter(owner=ns))
    return {a.agent: a for a in agents}


async def test_sdk_client_discovers_and_prompts_actors(
    system: ActorSystem, ns: str, raw_nc: NATS
) -> None:
    async with bridged(system, ns, Shout, Spell, Broken):
        client = sdk.Agents(nc=raw_nc)
        try:
            agents = await found(client, ns)
            assert set(agents) == {"shout", "spell", "broken"}
            shout = agents["shout"]
            assert shout.metadata["actorbus_type"] == "shout"
            assert shout.prompt_subject == f"agents.prompt.shout.{ns}.default"
            assert shout.description == "Shouts what it is told."

            # plain reply: the ack, then one response (text -> Question.text)
            msgs = [m async for m in shout.prompt("hello")]
            assert isinstance(msgs[0], sdk.StatusChunk)
            assert msgs[0].status == "ack"
            texts = [m.text for m in msgs if isinstance(m, sdk.ResponseChunk)]
            assert [json.loads(t) for t in texts] == [{"text": "HELLO"}]

            # streamed reply: one response chunk per item, in order
            msgs = [m async for m in agents["spell"].prompt("nats")]
            assert [m.text for m in msgs if isinstance(m, sdk.ResponseChunk)] == list("nats")

            # an error: the error frame (handler error -> 500), then the end
            with pytest.raises(sdk.ProtocolError, match="service error 500: cannot handle x"):
                async for _ in agents["broken"].prompt("x"):
                    pass
            status = await shout.status()
            assert status.agent == "shout"
            assert status.instance_id == shout.instance_id
        finally:
            await client.close()


async def test_keepalive_status_chunks_while_the_actor_works(
    system: ActorSystem, ns: str, raw_nc: NATS
) -> None:
    Slow.release = asyncio.Event()
    async with bridged(system, ns, Slow):
        client = sdk.Agents(nc=raw_nc)
        try:
            [slow] = (await found(client, ns)).values()
            statuses, texts = 0, []
            async for msg in slow.prompt("go"):
                if isinstance(msg, sdk.StatusChunk):
                    statuses += 1
                    if statuses == 2:  # the leading ack and one keep-alive
                        Slow.release.set()
                else:
                    texts.append(msg.text)
            assert texts == ["done"]
        finally:
            await client.close()


async def raw_reply(nc: NATS, subject: str, body: bytes) -> list[Any]:
    """Every frame of one reply, read by the codec's ReplyStream (rules checked)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox)
    reader = ReplyStream()
    while not reader.ended:
        msg = await sub.next_msg(timeout=5)
        reader.feed(msg.data, msg.headers)
    await sub.unsubscribe()
    return [reader, *(e.kind for e in reader.events)]


async def test_raw_wire_plain_text_and_malformed_prompts(
    system: ActorSystem, ns: str, raw_nc: NATS
) -> None:
    async with bridged(system, ns, Spell):
        subject = f"agents.prompt.spell.{ns}.default"
        reader, *kinds = await raw_reply(raw_nc, subject, b"ok")  # plain-text shorthand
        assert kinds == ["status", "response", "response", "end"]
        assert reader.acked
        reader, *kinds = await raw_reply(raw_nc, subject, b"")  # empty: refused, no ack
        assert kinds == ["error", "end"]
        assert reader.failed is not None
        assert reader.failed.code == "E_DECODE"
        reader, *kinds = await raw_reply(raw_nc, subject, b'{"prompt": ""}')
        assert kinds == ["error", "end"]
    async with bridged(system, ns, Huge):  # a reply over max_payload: 413, then the end
        subject = f"agents.prompt.huge.{ns}.default"
        reader, *kinds = await raw_reply(raw_nc, subject, b"x")
        assert kinds == ["status", "error", "end"]
        assert reader.failed is not None
        assert reader.failed.code == "E_TOO_LARGE"


async def test_heartbeats_at_start_and_every_interval(
    system: ActorSystem, ns: str, raw_nc: NATS
) -> None:
    beats: asyncio.Queue[Any] = asyncio.Queue()

    async def on_beat(msg: Any) -> None:
        await beats.put((msg.subject, parse_heartbeat(msg.data)))

    await raw_nc.subscribe(f"agents.hb.*.{ns}.*", cb=on_beat)
    await raw_nc.flush()
    client = sdk.Agents(nc=raw_nc)
    await client.start_tracking()  # the client SDK's own heartbeat tracker
    await system.spawn(Shout, key="1")
    settings = BridgeSettings(heartbeat_interval=1)
    try:
        async with SynadiaBridge(system, [Shout], owner=ns, settings=settings) as bridge:
            agent = bridge.agents["shout"]
            subject, first = await asyncio.wait_for(beats.get(), 5)
            assert subject == f"agents.hb.shout.{ns}.default"
            assert first["instance_id"] == agent.instance_id
            assert first["interval_s"] == 1
            assert first["protocol_version"] == "0.3"
            assert first["endpoints"]["prompt"]["subject"] == f"agents.prompt.shout.{ns}.default"
            _, second = await asyncio.wait_for(beats.get(), 5)  # one interval later
            assert second["instance_id"] == agent.instance_id
            assert second["ts"] >= first["ts"]
            liveness = client.liveness(agent.instance_id)
            assert liveness is not None
            assert liveness.is_online
            assert await client.ping(agent.instance_id)
    finally:
        await client.close()


async def test_actorbus_egress_round_trip_keeps_types_and_errors(
    system: ActorSystem, ns: str
) -> None:
    """actorbus -> Synadia protocol -> actorbus: data and typed errors survive."""
    async with bridged(system, ns, Shout, Spell, Broken):
        shout = SynadiaAgent(system.nc, "shout", owner=ns)
        assert await shout.ask({"text": "hi"}) == {"text": "HI"}
        spell = SynadiaAgent(system.nc, "spell", owner=ns)
        assert [x async for x in spell.stream("abc")] == ["a", "b", "c"]
        assert await spell.ask("abc") == "abc"
        with pytest.raises(RemoteError, match="cannot handle y"):
            await SynadiaAgent(system.nc, "broken", owner=ns).ask("y")
        with pytest.raises(ValidationFailedError):  # E_VALIDATION crosses as 400 + body
            await shout.ask({"wrong": 1})


async def test_registry_wide_bridge_serves_every_announced_type(
    make_system: MakeSystem, ns: str
) -> None:
    host = await make_system()
    await host.spawn(Shout, key="1")
    await host.spawn(Spell, key="1")
    await host.directory.announced()
    bridge_system = await make_system()
    async with SynadiaBridge(bridge_system, settings=FAST) as bridge:
        assert set(bridge.agents) >= {"shout", "spell"}
        agent = SynadiaAgent(bridge_system.nc, "shout", owner=ns)
        assert await agent.ask("hey") == {"text": "HEY"}
        # a streaming handler known only from the registry: asked, then streamed
        spell = SynadiaAgent(bridge_system.nc, "spell", owner=ns)
        assert [x async for x in spell.stream("ab")] == ["a", "b"]


async def test_cli_serves_until_sigterm(
    nats_server: EmbeddedServer, system: ActorSystem, ns: str
) -> None:
    await system.spawn(Shout, key="1")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "actorbus.services.synadia",
        "--nats",
        nats_server.url,
        "--namespace",
        ns,
        "--agent",
        "shout",
        stdout=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while (
            line := (await asyncio.wait_for(proc.stdout.readline(), 15)).decode().strip()
        ) != "ready":
            assert line, f"exited early: {lines}"
            lines.append(line)
        assert lines == [f"agent shout agents.prompt.shout.{ns}.default"]
        nc = await nats.connect(nats_server.url)
        try:
            assert await SynadiaAgent(nc, "shout", owner=ns).ask("cli") == {"text": "CLI"}
        finally:
            await nc.close()
    finally:
        await terminate(proc)
    assert proc.returncode == 0
