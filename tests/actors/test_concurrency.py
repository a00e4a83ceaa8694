"""The concurrency promise: one message at a time in arrival order by default,
at most ``concurrency`` at once when the class says so."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _util import WAIT, barrier
from pydantic import BaseModel

from actorbus import Actor, handler

pytestmark = pytest.mark.transports("nats", "local")


class CcWork(BaseModel):
    seq: int
    steps: int = 3


class Journal:
    """Handler entry/exit events, in the order they happened."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.active = 0
        self.max_active = 0
        self.done: asyncio.Queue[int] = asyncio.Queue()

    def enter(self, seq: int) -> None:
        self.events.append(("enter", seq))
        self.active += 1
        self.max_active = max(self.max_active, self.active)

    def exit(self, seq: int) -> None:
        self.events.append(("exit", seq))
        self.active -= 1
        self.done.put_nowait(seq)


class Serial(Actor):
    type_name = "serial"

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    @handler
    async def work(self, w: CcWork) -> int:
        self.journal.enter(w.seq)
        for _ in range(w.steps):
            await asyncio.sleep(0)  # yield to the loop: room for another handler to sneak in
        await asyncio.sleep(0.001)
        self.journal.exit(w.seq)
        return w.seq


def assert_no_overlap(events: list[tuple[str, int]]) -> None:
    for i in range(0, len(events), 2):
        (k1, s1), (k2, s2) = events[i], events[i + 1]
        assert (k1, k2) == ("enter", "exit"), f"overlap at {i}: {events[i : i + 4]}"
        assert s1 == s2


async def test_tells_handled_one_at_a_time_in_arrival_order(system) -> None:
    journal = Journal()
    await system.spawn(Serial, "s", journal=journal)
    n = 50
    for i in range(n):
        await system.tell("serial/s", CcWork(seq=i))
    done = [await asyncio.wait_for(journal.done.get(), WAIT) for _ in range(n)]
    assert done == list(range(n))
    assert_no_overlap(journal.events)
    assert [s for k, s in journal.events if k == "enter"] == list(range(n))
    assert journal.max_active == 1


async def test_concurrent_asks_never_overlap(system, make_system) -> None:
    journal = Journal()
    await system.spawn(Serial, "s", journal=journal)
    await barrier(system)
    clients = [system, await make_system(), await make_system()]
    n = 60
    replies = await asyncio.gather(
        *(clients[i % 3].ask("serial/s", CcWork(seq=i), timeout=5) for i in range(n))
    )
    assert sorted(replies) == list(range(n))
    assert journal.max_active == 1
    assert_no_overlap(journal.events)


async def test_mixed_direct_anycast_and_topic_do_not_overlap(system) -> None:
    class Mixed(Actor):
        type_name = "cc-mixed"

        def __init__(self, journal: Journal) -> None:
            self.journal = journal

        @handler(topic="cc.work")
        async def work(self, w: CcWork) -> int:
            self.journal.enter(w.seq)
            await asyncio.sleep(0.001)
            self.journal.exit(w.seq)
            return w.seq

    journal = Journal()
    await system.spawn(Mixed, "m", journal=journal)
    calls: list[Any] = []
    for i in range(30):
        kind = i % 3
        if kind == 0:
            calls.append(system.ask("cc-mixed/m", CcWork(seq=i), timeout=5))
        elif kind == 1:
            calls.append(system.ask("cc-mixed", CcWork(seq=i), timeout=5))
        else:
            calls.append(system.publish("cc.work", CcWork(seq=i)))
    await asyncio.gather(*calls)
    for _ in range(30):
        await asyncio.wait_for(journal.done.get(), WAIT)
    assert journal.max_active == 1
    assert_no_overlap(journal.events)


class Gate:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.max_active = 0
        self.full = asyncio.Event()
        self.over = asyncio.Event()
        self.release = asyncio.Event()


class Wide(Actor):
    type_name = "wide"
    concurrency = 3

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    @handler
    async def work(self, w: CcWork) -> int:
        g = self.gate
        g.active += 1
        g.max_active = max(g.max_active, g.active)
        if g.active == g.limit:
            g.full.set()
        if g.active > g.limit:
            g.over.set()
        try:
            await g.release.wait()
        finally:
            g.active -= 1
        return w.seq


async def test_concurrency_three_allows_three_and_never_more(system) -> None:
    gate = Gate(limit=3)
    await system.spawn(Wide, "w", gate=gate)
    n = 12
    calls = asyncio.gather(*(system.ask("wide/w", CcWork(seq=i), timeout=5) for i in range(n)))
    try:
        await asyncio.wait_for(gate.full.wait(), WAIT)
        assert gate.active == 3
        # a fourth must not get in while the first three hold their slots
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(gate.over.wait(), 0.3)
        assert gate.active == 3
    finally:
        gate.release.set()
    replies = await asyncio.wait_for(calls, WAIT)
    assert sorted(replies) == list(range(n))
    assert gate.max_active == 3


async def test_concurrency_three_runs_in_parallel(system) -> None:
    """Three handlers that each wait for the other two can only finish if they overlap."""
    arrived = 0
    all_in = asyncio.Event()

    class Rendezvous(Actor):
        type_name = "rendezvous"
        concurrency = 3

        @handler
        async def meet(self, w: CcWork) -> int:
            nonlocal arrived
            arrived += 1
            if arrived == 3:
                all_in.set()
            await all_in.wait()
            return w.seq

    await system.spawn(Rendezvous, "r")
    replies = await asyncio.gather(
        *(system.ask("rendezvous/r", CcWork(seq=i), timeout=3) for i in range(3))
    )
    assert sorted(replies) == [0, 1, 2]


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(TypeError, match="concurrency"):

        class Zero(Actor):
            concurrency = 0


async def test_two_actors_run_independently(system) -> None:
    """One actor blocked in a handler does not hold up another actor."""
    release = asyncio.Event()
    entered = asyncio.Event()

    class Blocker(Actor):
        type_name = "blocker"

        @handler
        async def block(self, _: dict[str, Any]) -> str:
            entered.set()
            await release.wait()
            return "released"

    journal = Journal()
    await system.spawn(Blocker, "b")
    await system.spawn(Serial, "free", journal=journal)
    blocked = asyncio.ensure_future(system.ask("blocker/b", {}, timeout=5))
    try:
        await asyncio.wait_for(entered.wait(), WAIT)
        assert await system.ask("serial/free", CcWork(seq=1), timeout=2) == 1
    finally:
        release.set()
    assert await asyncio.wait_for(blocked, WAIT) == "released"


async def test_lazy_actor_keeps_arrival_order(system) -> None:
    journal = Journal()
    await system.register(Serial, journal=journal)
    n = 50
    for i in range(n):
        await system.tell("serial/lazy", CcWork(seq=i, steps=i % 4))
    done = [await asyncio.wait_for(journal.done.get(), WAIT) for _ in range(n)]
    assert done == list(range(n))
    assert_no_overlap(journal.events)
    assert journal.max_active == 1


async def test_lazy_keys_keep_their_own_order(system) -> None:
    journal = Journal()
    await system.register(Serial, journal=journal)
    n = 40
    for i in range(n):
        await system.tell(f"serial/k{i % 2}", CcWork(seq=i, steps=i % 3))
    done = [await asyncio.wait_for(journal.done.get(), WAIT) for _ in range(n)]
    assert sorted(done) == list(range(n))
    assert [s for s in done if s % 2 == 0] == list(range(0, n, 2))
    assert [s for s in done if s % 2 == 1] == list(range(1, n, 2))
