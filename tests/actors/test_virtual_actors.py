"""Keyed (virtual) actors: at most one live instance of each type/key across
processes, found wherever a message arrives, passivated when idle, and activated
elsewhere when their process dies."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest
from _actors import Bump, Bumped, VCounter
from _util import run_host

from actorbus import Actor, ActorBusError, handler

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
