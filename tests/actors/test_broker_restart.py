"""A broker that comes back on a fresh store (its JetStream data gone, same port):
every connected process makes again what it relied on (streams, consumers,
buckets, registry records, credentials) and serves again within seconds,
without a restart of its own."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from _util import own_broker, until_it_works
from pydantic import BaseModel

from actorbus import Actor, ActorBusError, ActorSystem, handler
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.testing import eventually

FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=2.0, start_timeout=20.0)


class ClerkNote(BaseModel):
    n: int


class Clerk(Actor):
    """Answers asks and keeps durable notes, lazily hosted for any key."""

    durable = True

    def __init__(self, notes: list[int], noted: asyncio.Event) -> None:
        self.notes = notes
        self.noted = noted

    @handler(durable=False)
    async def hello(self, text: str) -> str:
        return f"{self.key}: {text}"

    @handler
    async def note(self, n: ClerkNote) -> None:
        self.notes.append(n.n)
        self.noted.set()


async def test_processes_serve_again_after_the_broker_returns_on_a_fresh_store(
    tmp_path: Path, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with own_broker(tmp_path) as broker:
        host = await broker.system(ns, durable=FAST)
        caller = await broker.system(ns, durable=FAST)
        notes: list[int] = []
        noted = asyncio.Event()
        await host.register(Clerk, notes=notes, noted=noted)
        await host.directory.announced()
        assert await caller.ask("clerk/a", "hi", timeout=5) == "a: hi"
        await caller.tell("clerk/a", ClerkNote(n=1), durable=True)
        await asyncio.wait_for(noted.wait(), 10)

        broker.on_a_fresh_store()

        async def asked() -> bool:
            try:
                return await caller.ask("clerk/b", "again", timeout=2) == "b: again"
            except ActorBusError:
                return False

        await eventually(asked, what="an ask sealed and answered again", timeout=20)
        newcomer = await broker.system(ns, durable=FAST)
        assert await newcomer.ask("clerk/c", "new", timeout=5) == "c: new"

        async def listed() -> bool:
            return any(listing.name == "clerk" for listing in await newcomer.discover())

        await eventually(listed, what="the host's type registered again", timeout=10)
        noted.clear()

        await until_it_works(
            lambda: caller.tell("clerk/a", ClerkNote(n=2), durable=True, timeout=2),
            what="a durable send stored again",
        )
        await asyncio.wait_for(noted.wait(), 20)
        assert notes == [1, 2]
        crashed = [r.getMessage() for r in caplog.records if r.name == "actorbus.tasks"]
        assert not crashed, "a background task crashed (a lost store is no crash)"


async def test_the_gateway_says_what_is_wrong_and_lists_the_agents_again(
    tmp_path: Path, ns: str
) -> None:
    """Its /healthz lists the agents it can reach; on a fresh store it lists them
    again once their hosts registered again (it used to say ok and list none)."""
    import aiohttp
    from _gateway import running_gateway

    async with own_broker(tmp_path) as broker:
        host = await broker.system(ns, durable=FAST)
        await host.register(Clerk, notes=[], noted=asyncio.Event())
        async with (
            running_gateway(broker.url, ns, tmp_path / "gw.db", "clerk") as gw,
            aiohttp.ClientSession() as http,
        ):

            async def health() -> tuple[int, dict[str, object]]:
                async with http.get(f"{gw.http_url}/healthz") as resp:
                    return resp.status, await resp.json()

            assert await health() == (200, {"ok": True, "agents": 1})
            broker.on_a_fresh_store()

            async def healthy_again() -> bool:
                return await health() == (200, {"ok": True, "agents": 1})

            await eventually(healthy_again, what="the gateway listing the agent again", timeout=20)


async def closes_at_once(host: ActorSystem) -> None:
    """Once ``host`` saw its broker go, its close (given 10 s) is done within 3."""
    await eventually(lambda: not host.nc.is_connected, what="the host saw its broker go")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await host.close(timeout=10)
    assert loop.time() - started < 3.0


async def test_a_system_whose_broker_is_gone_closes_at_once(tmp_path: Path, ns: str) -> None:
    """Nobody to deregister from: closing does not wait on a broker that is away
    (it took 10 s, three deregistration attempts timing out)."""
    server = EmbeddedServer(ServerConfig(store_dir=tmp_path / "store"))
    server.start_sync()
    host = await ActorSystem.connect(
        server.url, namespace=ns, connect_options=ConnectOptions(reconnect_deadline=30.0)
    )
    try:
        await host.register(Clerk, notes=[], noted=asyncio.Event())
        await host.directory.announced()
    finally:
        server.stop_sync()
    await closes_at_once(host)


class Held(Actor):
    """A keyed type: each activation holds a claim record in the placement bucket."""

    type_name = "held"
    keyed = True

    @handler
    async def ping(self, _: dict) -> str:  # type: ignore[type-arg]
        return self.address


async def test_a_system_holding_keyed_actors_closes_at_once_when_its_broker_is_gone(
    tmp_path: Path, ns: str
) -> None:
    """Nobody to release the claims to: each release waited out its timeout, and
    the close took 15 s (10 s of releases, 5 s for the liveness). The records
    left behind are taken over once the liveness runs out, as after a crash."""
    server = EmbeddedServer(ServerConfig(store_dir=tmp_path / "store"))
    server.start_sync()
    host = await ActorSystem.connect(
        server.url,
        namespace=ns,
        registry=False,
        connect_options=ConnectOptions(reconnect_deadline=30.0),
    )
    try:
        await host.register(Held)
        await asyncio.gather(*(host.ask(f"held/k{i}", {}) for i in range(50)))
        assert len(host.local_actors()) == 50
    finally:
        server.stop_sync()
    await closes_at_once(host)


async def test_a_registry_bucket_made_again_by_another_member_is_followed(
    tmp_path: Path, ns: str
) -> None:
    """The first member back makes the lost buckets again; the others must see that
    the bucket they find is a new one and register again (they took it for theirs,
    and their records stayed missing until the next renewal, or for good)."""
    import nats

    from actorbus.bus.service_records import ServiceRecords

    connections = []
    async with own_broker(tmp_path) as broker, contextlib.AsyncExitStack() as closing:
        for _ in range(2):
            nc = await nats.connect(broker.url, max_reconnect_attempts=-1, reconnect_time_wait=0.05)
            closing.push_async_callback(nc.close)
            connections.append(nc)
        first, second = [await ServiceRecords.open(nc.jetstream(), ns) for nc in connections]
        assert not await second.restore_if_lost()  # nothing lost yet
        broker.on_a_fresh_store()
        await eventually(
            lambda: all(nc.is_connected and nc.stats["reconnects"] for nc in connections),
            what="both reconnected",
        )

        async def made_again() -> bool:
            try:
                return await first.restore_if_lost()
            except Exception:  # JetStream of the new server still starting
                return False

        await eventually(made_again, what="the first member back made the buckets again")
        assert await second.restore_if_lost(), "the second took the new bucket for its own"
        assert not await second.restore_if_lost()
        await first.close()
        await second.close()
