"""Keyed (virtual) actors: at most one live instance of each type/key across
processes, found wherever a message arrives, passivated when idle, and activated
elsewhere when their process dies."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

import pytest
from _actors import Bump, Bumped, VCounter
from _util import WAIT, kv_keys, run_host

from actorbus import Actor, ActorBusError, handler
from actorbus.testing import eventually

pytestmark = pytest.mark.transports("nats", "local")

TTL = 1.0


class VolatileCounter(VCounter):
    """VCounter with its messages over core NATS: the in-process bus has no
    JetStream for durable ones, and placement is the same either way."""

    type_name = "vcounter"
    durable = False


async def keyed_systems(make_system: Any, n: int, transport: str = "nats") -> list[Any]:
    systems = [await make_system(activation_ttl=TTL) for _ in range(n)]
    for system in systems:
        await system.register(VCounter if transport == "nats" else VolatileCounter)
    return systems


async def test_one_instance_per_key_whichever_process_gets_the_message(
    make_system, transport: str
) -> None:
    systems = await keyed_systems(make_system, 3, transport)
    caller = await make_system()
    replies = [await caller.ask("vcounter/k", Bump(), returns=Bumped) for _ in range(30)]
    assert [r.total for r in replies] == list(range(1, 31))  # one state: one instance
    hosts = {r.system for r in replies}
    assert len(hosts) == 1
    assert sum("vcounter/k" in s.local_actors() for s in systems) == 1
    # the processes that do not host it forwarded their share to the one that does
    other = await caller.ask("vcounter/other", Bump(by=5), returns=Bumped)
    assert other.total == 5


async def test_tells_and_asks_from_every_host_reach_the_same_instance(
    make_system, transport: str
) -> None:
    a, b = await keyed_systems(make_system, 2, transport)
    await b.spawn(VCounter if transport == "nats" else VolatileCounter, "pinned")  # b holds it now
    for _ in range(10):
        await a.tell("vcounter/pinned", Bump(), durable=False)  # reaching a or b
    reply = await total_reaches(a, "vcounter/pinned", 10)  # none lost, none doubled
    assert reply.system == b.system_id
    assert "vcounter/pinned" not in a.local_actors()
    with pytest.raises(ActorBusError, match="already active"):
        await a.spawn(VCounter, "pinned")


@pytest.mark.transports("nats")
async def test_durable_messages_run_where_the_key_lives(make_system) -> None:
    reader, holder = await keyed_systems(make_system, 2)  # the first one reads the queue
    await holder.spawn(VCounter, "d")
    for _ in range(5):
        await reader.tell("vcounter/d", Bump())  # durable by the type's default
    reply = await total_reaches(reader, "vcounter/d", 5)
    assert reply.system == holder.system_id
    assert "vcounter/d" not in reader.local_actors()
    assert (await reader.queue_stats("vcounter")).pending == 0


async def total_reaches(system: Any, address: str, goal: int) -> Bumped:
    """Ask (adding nothing) until the counter shows ``goal``: the messages before
    were tells, which give no signal of their own. Fails past ``goal`` or 5 s."""

    async def poll() -> Bumped:
        while True:
            reply = await system.ask(address, Bump(by=0), returns=Bumped)
            assert reply.total <= goal, f"{reply.total} > {goal}: a message ran twice"
            if reply.total == goal:
                return reply
            await asyncio.sleep(0.02)  # a bounded poll of the actor's state

    return await asyncio.wait_for(poll(), 5)


class Sleepy(Actor):
    keyed = True
    idle_timeout = 0.2
    stopped: asyncio.Queue[str] = asyncio.Queue()

    @handler
    async def ping(self, q: dict) -> str:  # type: ignore[type-arg]
        return self.system.system_id

    async def on_stop(self) -> None:
        await Sleepy.stopped.put(self.address)


async def test_idle_instances_passivate_and_give_their_lease_back(make_system, monkeypatch) -> None:
    monkeypatch.setattr(Sleepy, "stopped", asyncio.Queue())  # this test's stops only
    a = await make_system(activation_ttl=TTL)
    await a.register(Sleepy)
    assert await a.ask("sleepy/z", {}) == a.system_id
    assert await asyncio.wait_for(Sleepy.stopped.get(), 5) == "sleepy/z"
    assert "sleepy/z" not in a.local_actors()
    assert not a.placement.holds("sleepy/z")
    b = await make_system(activation_ttl=TTL)
    await b.register(Sleepy)
    await b.spawn(Sleepy, "z")  # free again: another process may take it at once
    assert await a.ask("sleepy/z", {}) == b.system_id


class SlowToStop(Actor):
    """A lazily hosted type whose instances take a while to stop (a save, a
    release): a sweep must not stop them one after the other."""

    type_name = "slow-to-stop"
    idle_timeout = 0.2
    stopped = 0

    @handler
    async def ping(self, q: dict[str, Any]) -> None:
        return None

    async def on_stop(self) -> None:
        await asyncio.sleep(0.25)
        SlowToStop.stopped += 1


async def test_a_sweep_stops_idle_instances_side_by_side(make_system, monkeypatch) -> None:
    """200 instances each taking 0.25 s to stop: 50 s one after the other, well
    under the bound side by side (64 at a time: about a second)."""
    monkeypatch.setattr(SlowToStop, "stopped", 0)
    system = await make_system()
    await system.register(SlowToStop)
    await asyncio.gather(*(system.ask(f"slow-to-stop/k{n}", {}) for n in range(200)))
    await eventually(lambda: SlowToStop.stopped == 200, 10, "all 200 stopped")
    assert not system.local_actors()


async def test_when_the_hosting_process_dies_the_next_message_activates_it_elsewhere(
    make_system, nats_server: Any, ns: str
) -> None:
    caller = await make_system()
    async with run_host("_actors:VCounter", nats_server.url, ns, "*") as first:
        reply = await caller.ask("vcounter/k", Bump(), returns=Bumped)
        assert reply.pid == first.pid
        async with run_host("_actors:VCounter", nats_server.url, ns, "*") as second:
            await caller.ask("vcounter/k", Bump(), returns=Bumped)  # still in the first
            first.proc.send_signal(signal.SIGKILL)
            await first.proc.wait()
            killed = time.monotonic()
            reply = await caller.ask("vcounter/k", Bump(), returns=Bumped, timeout=10)
            took = time.monotonic() - killed
            assert reply.pid == second.pid
            assert reply.total == 1  # a fresh activation (state was in memory)
            assert took < 1.5 + 1.0  # the lease ttl of the hosts, plus a renewal period


class Many(Actor):
    """A keyed type whose instances say when one stops."""

    type_name = "many"
    keyed = True
    stops = 0

    @handler
    async def ping(self, q: dict[str, Any]) -> str:
        return self.system.system_id

    async def on_stop(self) -> None:
        Many.stops += 1


async def activate_many(system: Any, count: int) -> None:
    keys = iter(range(count))

    async def worker() -> None:
        for k in keys:
            await system.ask(f"many/k{k}", {}, timeout=10)

    await asyncio.gather(*(worker() for _ in range(40)))


async def test_a_process_keeps_more_keyed_actors_than_it_could_renew_one_by_one(
    make_system, monkeypatch
) -> None:
    """3,000 keyed actors with a 1 s ttl: renewing a lease per actor would take
    9,000 writes a second, which this machine cannot do (they were all lost within
    seconds). One liveness lease per process keeps every one of them."""
    monkeypatch.setattr(Many, "stops", 0)
    system = await make_system(activation_ttl=TTL)
    await system.register(Many)
    await activate_many(system, 3000)
    held = len(system.local_actors())
    assert held == 3000
    deadline = time.monotonic() + 4 * TTL  # four lifetimes of a lease
    while time.monotonic() < deadline:
        await asyncio.sleep(TTL / 4)  # watching over time is the point here
        assert Many.stops == 0, f"{Many.stops} keyed actors stopped"
    assert len(system.local_actors()) == 3000


class Dozing(Actor):
    type_name = "dozing"
    keyed = True
    idle_timeout = 0.2

    @handler
    async def ping(self, q: dict[str, Any]) -> None:
        return None


@pytest.mark.transports("nats")
async def test_passivated_keyed_actors_leave_nothing_to_refresh(make_system) -> None:
    """A held key is due for its record's refresh in half an hour; a released
    one's entry used to stay that long, and the memory of 20,000 passivated
    keyed actors with it (none went back to the system)."""
    system = await make_system(activation_ttl=TTL)
    await system.register(Dozing)
    await asyncio.gather(*(system.ask(f"dozing/k{n}", {}) for n in range(1_000)))
    await eventually(lambda: not system.local_actors(), WAIT, "all passivated")
    assert len(system.placement._due) <= 256  # what is left: no more than a batch


@pytest.mark.transports("nats")
async def test_a_process_that_held_no_key_for_a_while_is_still_alive_to_the_others(
    make_system, monkeypatch, caplog
) -> None:
    """Its keyed actors all passivated, a process stopped renewing its liveness,
    which expired: its next claims named a holder the others took for dead (so
    they could take its keys too), and its next renewal found the liveness gone
    and stopped every keyed actor it had just activated."""
    monkeypatch.setattr(Many, "stops", 0)
    system = await make_system(activation_ttl=TTL)
    for cls in (Dozing, Many):
        await system.register(cls)
    await system.ask("dozing/a", {})
    await eventually(lambda: not system.local_actors(), WAIT, "passivated")
    await asyncio.sleep(2 * TTL)  # nothing held for longer than the liveness ttl
    with caplog.at_level(logging.WARNING, logger="actorbus.placement"):
        assert await system.ask("many/k", {}) == system.system_id
        other = await make_system(activation_ttl=TTL)
        await other.register(Many)
        assert await other.ask("many/k", {}) == system.system_id  # forwarded, not taken
        await asyncio.sleep(TTL)  # a few renewals
    assert "many/k" in system.local_actors()
    assert Many.stops == 0
    assert not [r for r in caplog.records if "lapsed" in r.getMessage()]


@pytest.mark.transports("nats")
async def test_a_burst_of_new_keys_is_claimed_a_few_hundred_at_a_time(
    make_system, monkeypatch
) -> None:
    """2,000 first messages to new keys at once: every claim used to go to the
    server together, and on a slow machine their acks came after the client's
    timeout (a third of 50,000 refused with "could not place"). Past a bound the
    claims wait in the process, where no timer runs, and every key is placed."""
    monkeypatch.setattr(Many, "stops", 0)
    system = await make_system(activation_ttl=TTL)
    await system.register(Many)
    placement = system.hosting.virtual.placement
    table = await placement.table()
    claim, in_flight, most = table.claim, 0, 0

    async def counted(name: str) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await claim(name)
        finally:
            in_flight -= 1

    monkeypatch.setattr(table, "claim", counted)
    await asyncio.gather(*(system.tell(f"many/k{k}", {}) for k in range(2000)))
    await eventually(lambda: len(system.local_actors()) == 2000, 60, "2,000 keys placed")
    assert 0 < most <= 256, f"{most} claims in flight at once"


@pytest.mark.transports("nats")
async def test_a_slow_liveness_renewal_is_reported_before_it_lapses(
    make_system, monkeypatch, caplog
) -> None:
    """A broker slow to store (a busy disk) delays each renewal's ack; past the
    ttl every keyed actor stops. The process says so while there is still time."""
    system = await make_system(activation_ttl=TTL)
    await system.register(Many)
    await system.ask("many/slow", {}, timeout=10)
    table = await system.hosting.virtual.placement.table()
    renew = table.renew

    async def slow_renew() -> None:
        await asyncio.sleep(TTL / 2)  # more than the third of the ttl between renewals
        await renew()

    monkeypatch.setattr(table, "renew", slow_renew)
    with caplog.at_level("WARNING", logger="actorbus.placement"):
        await eventually(
            lambda: any("liveness took" in r.getMessage() for r in caplog.records),
            10 * TTL,
            "a warning about the slow renewal",
        )
    said = next(r.getMessage() for r in caplog.records if "liveness took" in r.getMessage())
    assert f"of its {TTL:g}s ttl" in said
    assert "activation_ttl" in said
    assert "many/slow" in system.local_actors()  # slow, not lapsed: still hosted


@pytest.mark.transports("nats")
async def test_slow_record_refreshes_never_hold_up_the_liveness_renewal(
    make_system, monkeypatch, caplog
) -> None:
    """Rewriting the keys' records can take long under a burst of claims (every
    write waits for the disk); the liveness lease must still be renewed on time,
    or every keyed actor of the process stops."""
    system = await make_system(activation_ttl=TTL, placement_ttl=4 * TTL)
    await system.register(Many)
    await system.ask("many/busy", {}, timeout=10)
    table = await system.hosting.virtual.placement.table()
    refresh, refreshed = table.refresh, asyncio.Event()

    async def slow_refresh(name: str, revision: int) -> int | None:
        await asyncio.sleep(1.5 * TTL)  # longer than the ttl, within the record's
        outcome = await refresh(name, revision)
        refreshed.set()
        return outcome

    monkeypatch.setattr(table, "refresh", slow_refresh)
    with caplog.at_level("WARNING", logger="actorbus.placement"):
        await asyncio.wait_for(refreshed.wait(), 10 * TTL)  # due at half the record's ttl
        await asyncio.sleep(TTL)  # the point of this test is time: renewals went on
    assert not [r.getMessage() for r in caplog.records if "liveness" in r.getMessage()]
    assert "many/busy" in system.local_actors()
    assert await system.ask("many/busy", {}, timeout=10) == system.system_id


@pytest.mark.transports("nats")
async def test_a_process_whose_liveness_lapsed_stops_its_keyed_actors(
    make_system, raw_nc, ns: str, monkeypatch
) -> None:
    """Cut off for longer than the ttl (here: its liveness key removed, as the
    server's max_age would), any of its keys may be someone else's now: it stops
    every keyed instance at its next renewal, and the next message activates the
    key again (tests/bus/test_claims.py: who takes a dead holder's keys)."""
    from actorbus.actors.placement import hosts_bucket
    from actorbus.bus.leases import lease_key

    monkeypatch.setattr(Many, "stops", 0)
    a = await make_system(activation_ttl=TTL)
    await a.register(Many)
    for key in ("x", "y"):
        assert await a.ask(f"many/{key}", {}) == a.system_id
    hosts = await raw_nc.jetstream().key_value(hosts_bucket(ns))
    await hosts.delete(lease_key("host", a.system_id))
    await eventually(lambda: not a.local_actors(), WAIT, "a stopped its keyed actors")
    assert Many.stops == 2
    assert await a.ask("many/x", {}) == a.system_id  # alive again, and the key is free


@pytest.mark.transports("nats")
async def test_closing_a_process_releases_every_key_it_held(make_system, raw_nc, ns: str) -> None:
    """Its records are released side by side at close, then its liveness: nothing
    is left for the next claimant of each key to take over."""
    from actorbus.actors.placement import placement_bucket

    system = await make_system(activation_ttl=TTL)
    await system.register(Many)
    await activate_many(system, 500)
    records = await raw_nc.jetstream().key_value(placement_bucket(ns))
    assert len(await kv_keys(records)) == 500
    await system.close()
    assert await kv_keys(records) == []


@pytest.mark.transports("nats")
async def test_a_live_process_keeps_its_records_past_their_ttl_and_one_lost_stops_its_actor(
    make_system, raw_nc, ns: str, monkeypatch
) -> None:
    """With ``placement_ttl`` 2 s, each record is written again at half of it, so
    all stay while their holder lives; one changed from outside was lost, and the
    instance it placed is stopped."""
    from actorbus.actors.placement import placement_bucket
    from actorbus.bus.kv_watch import current_entries

    monkeypatch.setattr(Many, "stops", 0)
    system = await make_system(activation_ttl=0.5, placement_ttl=2)
    await system.register(Many)
    await activate_many(system, 20)
    records = await raw_nc.jetstream().key_value(placement_bucket(ns))
    last = {e.key: e.revision for e in await current_entries(records)}
    assert len(last) == 20
    writes = dict.fromkeys(last, 0)

    async def each_written_twice() -> bool:
        for entry in await current_entries(records):
            if entry.revision != last[entry.key]:
                last[entry.key], writes[entry.key] = entry.revision, writes[entry.key] + 1
        assert len(last) == 20
        return min(writes.values()) >= 2

    await eventually(each_written_twice, 2 + 2 * WAIT, "every record written again twice")
    assert len(system.local_actors()) == 20
    assert Many.stops == 0
    lost = sorted(last)[0]
    await records.put(lost, b"someone-else")
    await eventually(lambda: len(system.local_actors()) == 19, 2 + WAIT, "the lost one stopped")
    assert Many.stops == 1


@pytest.mark.transports("nats")
async def test_the_records_of_a_killed_process_expire_with_their_ttl(
    make_system, nats_server: Any, raw_nc, ns: str
) -> None:
    """Keys that are never used again leave nothing behind: the records a
    SIGKILLed host held are gone once their ``placement_ttl`` passed."""
    from actorbus.actors.placement import placement_bucket

    caller = await make_system()
    env = {"ACTORBUS_TEST_PLACEMENT_TTL": "6"}  # the least its 1.5 s activation ttl allows
    async with run_host("_actors:VCounter", nats_server.url, ns, "*", env=env) as host:
        for key in ("a", "b", "c"):
            assert (await caller.ask(f"vcounter/{key}", Bump(), returns=Bumped)).pid == host.pid
        records = await raw_nc.jetstream().key_value(placement_bucket(ns))
        assert len(await kv_keys(records)) == 3
        host.proc.send_signal(signal.SIGKILL)
        await host.proc.wait()

        async def expired() -> bool:
            return await kv_keys(records) == []

        await eventually(expired, 6 + WAIT, "the records expired", 0.5)
