"""The in-process bus (``bus/local.py``): routing as nats-server routes, the
client behaviour above the wire kept, key-value buckets with compare-and-set and
time to live, and what it does not offer refused with the server's own errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from _util import barrier
from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig

from actorbus import Actor, ActorBusError, ActorSystem, NoRespondersError, handler
from actorbus.bus.client import encode_headers
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.leases import LeaseBucket
from actorbus.bus.local import LocalBus, LocalConnection
from actorbus.bus.subjects import subject_matches
from actorbus.security.settings import SecuritySettings
from actorbus.testing import eventually

PATTERNS = ["a.b.c", "a.*.c", "a.>", "*.b.*", ">", "a.*", "a.b.c.>", "*"]
SUBJECTS = ["a.b.c", "a.x.c", "a.b", "a", "a.b.c.d", "x.b.y", "b"]


async def test_subjects_match_as_the_server_matches_them(nats_server: Any) -> None:
    """Every pattern against every subject, on a real nats-server and here."""
    nc = await nats.connect(nats_server.url)
    got: dict[str, set[str]] = {p: set() for p in PATTERNS}
    try:
        for pattern in PATTERNS:

            async def note(msg: Msg, pattern: str = pattern) -> None:
                got[pattern].add(msg.subject)

            await nc.subscribe(pattern, cb=note)
        for subject in SUBJECTS:
            await nc.publish(subject, b"")
        await barrier(nc)
    finally:
        await nc.close()
    for pattern in PATTERNS:
        mine = {s for s in SUBJECTS if subject_matches(pattern, s)}
        assert mine == got[pattern] & set(SUBJECTS), pattern  # (the barrier aside)


Open = Callable[..., Awaitable[LocalConnection]]


@pytest.fixture
async def opened() -> AsyncIterator[Open]:
    """``await opened(bus, name)``: a connection on ``bus``, closed after the test."""
    made: list[LocalConnection] = []

    async def open_(bus: LocalBus, name: str = "t") -> LocalConnection:
        made.append(await LocalConnection.open(bus, ConnectOptions(name=name)))
        return made[-1]

    yield open_
    for conn in made:
        await conn.close(2.0)


async def test_queue_groups_share_and_plain_subscribers_each_get_one(opened: Open) -> None:
    bus = LocalBus()
    a, b, watcher = await opened(bus, "a"), await opened(bus, "b"), await opened(bus, "w")
    seen: dict[str, int] = {"a": 0, "b": 0, "w": 0}

    def counter(name: str) -> Any:
        async def cb(msg: Msg) -> None:
            seen[name] += 1

        return cb

    await a.nc.subscribe("work", queue="q", cb=counter("a"))
    await b.nc.subscribe("work", queue="q", cb=counter("b"))
    await watcher.nc.subscribe("work", cb=counter("w"))
    for _ in range(200):
        await a.nc.publish("work", b"x")
    for conn in (a, b, watcher):
        await conn.nc.flush()
    assert seen["a"] + seen["b"] == 200  # each message to one member of the group
    assert min(seen["a"], seen["b"]) > 0
    assert seen["w"] == 200  # and to every plain subscriber


async def test_headers_replies_and_no_responders_as_nats_py_sees_them(opened: Open) -> None:
    bus = LocalBus()
    server, client = await opened(bus), await opened(bus)

    async def answer(msg: Msg) -> None:
        assert msg.headers is not None
        await msg.respond(msg.data.upper() + msg.headers["X-Tag"].encode())

    await server.nc.subscribe("svc", cb=answer)
    reply = await client.nc.request("svc", b"hi", headers={"X-Tag": "!"}, timeout=2)
    assert reply.data == b"HI!"
    block = encode_headers({"Ab-Intent": "x"})
    got: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def keep(msg: Msg) -> None:
        got.set_result(msg)

    await server.nc.subscribe("raw", cb=keep)
    await client.nc.publish("raw", b"", headers=block)
    assert (await asyncio.wait_for(got, 2)).headers == {"Ab-Intent": "x"}
    with pytest.raises(nats.errors.NoRespondersError):
        await client.nc.request("nobody", b"", timeout=2)
    with pytest.raises(nats.errors.MaxPayloadError):
        await client.nc.publish("svc", b"x" * (bus.max_payload + 1))


async def test_a_full_subscription_drops_and_reports_a_slow_consumer(opened: Open) -> None:
    bus = LocalBus()
    conn = await opened(bus)
    reports: list[nats.errors.SlowConsumerError] = []

    async def report(err: nats.errors.SlowConsumerError) -> None:
        reports.append(err)

    conn.on_slow_consumer.append(report)
    gate = asyncio.Event()
    handled: list[bytes] = []

    async def slow(msg: Msg) -> None:
        await gate.wait()
        handled.append(msg.data)

    await conn.nc.subscribe("s", cb=slow, pending_msgs_limit=5)
    for n in range(50):
        await conn.nc.publish("s", str(n).encode())
    await conn.nc.flush()
    assert len(reports) >= 50 - 5 - 1  # past the limit (and the one in hand): dropped
    gate.set()
    await eventually(lambda: len(handled) + len(reports) == 50, what="every message taken")
    assert handled == sorted(handled, key=int)  # what was kept, in order


async def test_a_publisher_never_runs_a_receivers_code(opened: Open) -> None:
    """Delivery goes through the receiver's own reader, as off a socket: publish
    returns before any callback ran, and flush() returns after."""
    bus = LocalBus()
    conn = await opened(bus)
    ran = asyncio.Event()

    async def cb(msg: Msg) -> None:
        ran.set()

    sub = await conn.nc.subscribe("x", cb=cb)
    await conn.nc.publish("x", b"")
    assert not ran.is_set()
    assert sub.pending_msgs == 0  # not even read yet
    await conn.nc.flush()
    assert sub.pending_msgs + ran.is_set() == 1  # read: queued for its callback, or run
    await asyncio.wait_for(ran.wait(), 2)


async def test_close_is_bounded_and_final(opened: Open) -> None:
    bus = LocalBus()
    conn = await opened(bus)
    stuck = asyncio.Event()

    async def hang(msg: Msg) -> None:
        await stuck.wait()

    await conn.nc.subscribe("h", cb=hang)
    await conn.nc.publish("h", b"")
    await conn.nc.flush()
    started = time.monotonic()
    await conn.close(0.5)
    assert time.monotonic() - started < 3
    assert conn.nc.is_closed
    with pytest.raises(nats.errors.ConnectionClosedError):
        await conn.nc.publish("h", b"")


async def test_key_value_buckets_compare_and_set_and_expire(opened: Open) -> None:
    bus = LocalBus()
    js = (await opened(bus)).nc.jetstream()
    kv = await js.create_key_value(KeyValueConfig(bucket="b", ttl=0.2))
    rev = await kv.create("k", b"1")
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError):
        await kv.create("k", b"2")
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError):
        await kv.update("k", b"2", last=rev + 5)
    rev = await kv.update("k", b"2", last=rev)
    assert (await kv.get("k")).value == b"2"
    same = await js.key_value("b")  # another handle on the same bucket
    assert (await same.get("k")).revision == rev
    assert (await same.status()).ttl == 0.2

    async def expired() -> bool:
        try:
            await kv.get("k")
        except nats.js.errors.KeyNotFoundError:
            return True
        return False

    await eventually(expired, what="the entry gone after its ttl")
    await kv.create("k", b"3")  # and free to create again
    await kv.put("a.b", b"4")
    assert sorted(await kv.keys()) == ["a.b", "k"]
    with pytest.raises(nats.js.errors.BucketNotFoundError):
        await js.key_value("absent")


async def test_a_watch_gives_the_values_then_the_changes_as_nats_py_does(opened: Open) -> None:
    js = (await opened(LocalBus())).nc.jetstream()
    kv = await js.create_key_value(KeyValueConfig(bucket="w"))
    await kv.put("t.1", b"a")
    await kv.put("u.1", b"x")  # not watched
    watcher = await kv.watch("t.>")
    first = await watcher.updates(timeout=1)
    assert (first.key, first.value, first.delta) == ("t.1", b"a", 0)
    assert await watcher.updates(timeout=1) is None  # the current values are all in
    await kv.put("t.2", b"b")
    await kv.delete("t.1")
    await kv.put("u.2", b"y")
    changed = await watcher.updates(timeout=1)
    deleted = await watcher.updates(timeout=1)
    assert (changed.key, changed.value, changed.operation) == ("t.2", b"b", None)
    assert (deleted.key, deleted.operation) == ("t.1", "DEL")
    await watcher.stop()
    assert [e async for e in watcher] == []  # stopped: the iteration ends


async def test_leases_work_across_the_systems_of_one_bus(opened: Open) -> None:
    bus = LocalBus()
    one, two = (await opened(bus)).nc.jetstream(), (await opened(bus)).nc.jetstream()
    first = await LeaseBucket.open(one, "leases", 5.0)
    second = await LeaseBucket.open(two, "leases", 5.0)
    lease = await first.acquire("k", "one")
    assert lease is not None
    assert await second.acquire("k", "two") is None
    assert await second.holder("k") == "one"
    assert await first.release(lease)
    assert await second.acquire("k", "two") is not None


async def test_what_needs_a_server_is_refused_with_a_typed_error() -> None:
    async with ActorSystem.in_process() as system:
        with pytest.raises(ActorBusError, match="durable delivery needs JetStream"):
            await system.tell("someone/1", {"x": 1}, durable=True)
        with pytest.raises(ActorBusError, match="needs JetStream"):
            await system.dead_letters()
    with pytest.raises(ValueError, match="no security stage"):
        await ActorSystem.in_process(security=SecuritySettings())


class Shout(Actor):
    @handler
    async def shout(self, text: str) -> str:
        return text.upper()


async def test_systems_on_one_bus_see_each_other_and_on_two_do_not() -> None:
    bus = LocalBus()
    async with ActorSystem.in_process(bus) as host, ActorSystem.in_process(bus) as caller:
        await host.spawn(Shout, "1")
        assert await caller.ask("shout/1", "hi") == "HI"
        async with ActorSystem.in_process() as elsewhere:
            with pytest.raises(NoRespondersError):
                await elsewhere.ask("shout/1", "hi", timeout=1)
