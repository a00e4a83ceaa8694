"""A durable handler's sends are held until it succeeded: a failed attempt sends
nothing, and an idempotent handler's sends are recorded with its key so that a
redelivery after a crash sends them again, deduplicated, never twice."""

from __future__ import annotations

import asyncio
from typing import Any

from test_durable import FAST, Entry, Progress, spawn_ledger

from actorbus import Actor, SecuritySettings, handler
from actorbus.actors.outbox import Outbox
from actorbus.actors.sending import SendOptions
from actorbus.bus.jetstream import idempotency_entry
from actorbus.bus.subjects import Address


class Relay(Actor):
    """Forwards each entry to a ledger, failing after the send when told to."""

    type_name = "relay"
    durable = True
    idempotent = True

    def __init__(self, fail: dict[int, int], runs: list[int]) -> None:
        self.fail = fail
        self.runs = runs

    @handler
    async def add(self, e: Entry) -> None:
        self.runs.append(e.n)
        await self.tell("ledger/out", e, durable=True)
        if self.fail.get(e.n, 0):
            self.fail[e.n] -= 1
            raise RuntimeError("failed after sending")


async def stored(system: Any, address: str) -> list[int]:
    return [e.content["n"] async for e in system.history(address=address)]


async def test_a_failed_attempt_sends_nothing(make_system) -> None:
    system = await make_system(durable=FAST)
    runs: list[int] = []
    await system.spawn(Relay, "r", fail={1: 2}, runs=runs)
    progress = await spawn_ledger(system, "out")
    for n in range(3):
        await system.tell("relay/r", Entry(n=n), idempotency_key=f"e{n}")
    await progress.reached(3)
    assert runs == [0, 1, 1, 1, 2]  # entry 1 ran three times ...
    assert progress.seen == [0, 1, 2]  # ... and was forwarded once
    assert await stored(system, "ledger/out") == [0, 1, 2]


async def test_a_repeated_key_sends_its_recorded_messages_again_deduplicated(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    runs: list[int] = []
    await system.spawn(Relay, "r", fail={}, runs=runs)
    progress = await spawn_ledger(system, "out")
    await system.tell("relay/r", Entry(n=1), idempotency_key="same")
    await system.tell("relay/r", Entry(n=1), idempotency_key="same")  # a new id, same key
    await system.tell("relay/r", Entry(n=2), idempotency_key="other")
    await progress.reached(2)
    assert runs == [1, 2]
    assert await stored(system, "ledger/out") == [1, 2]


async def test_sends_recorded_before_a_crash_go_out_on_redelivery(make_system) -> None:
    """As if the process died after writing the key and before sending: the record
    is there, the forward is not; the redelivered message sends it, without a rerun."""
    system = await make_system(durable=FAST)
    await system.durable_ready("ledger")
    box = Outbox()
    forward = system.sender.encode("ledger/out", Entry(n=7), SendOptions(), durable=True)
    box.hold(system.runtime.subjects.durable(Address.parse("ledger/out")), forward, "ledger/out")
    record = box.record("earlier-attempt")
    assert record is not None
    await system.runtime.durable.stores.handled.put(
        idempotency_entry(Address.parse("relay/r"), "k7"), record
    )

    runs: list[int] = []
    await system.tell("relay/r", Entry(n=7), idempotency_key="k7", durable=True)
    await system.spawn(Relay, "r", fail={}, runs=runs)
    progress: Progress = await spawn_ledger(system, "out")
    await progress.reached(1)
    assert progress.seen == [7]
    assert runs == []  # not run again: the key was handled


async def test_sends_recorded_long_before_they_go_out_again_are_not_refused_as_stale(
    make_system,
) -> None:
    """After a crash the recorded sends go out when the message comes back:
    ``ack_wait`` or more after they were sealed, beyond the receiver's clock-skew
    limit. Each carries a fresh stamp signed by its sender's key (Ab-Resent), so
    it is taken, not refused and dead-lettered as a replay."""
    skew = SecuritySettings(skew_ms=300)
    system = await make_system(durable=FAST, security=skew)
    await system.durable_ready("ledger")
    progress: Progress = await spawn_ledger(system, "out")  # its key: the forward is sealed
    box = Outbox()
    session = await system.sender.session("ledger/out", queued=True)
    assert session is not None  # sealed to the ledger, as a handler's send is
    forward = system.sender.encode(
        "ledger/out", Entry(n=8), SendOptions(), durable=True, session=session
    )
    box.hold(system.runtime.subjects.durable(Address.parse("ledger/out")), forward, "ledger/out")
    record = box.record("earlier-attempt")
    assert record is not None
    await system.runtime.durable.stores.handled.put(
        idempotency_entry(Address.parse("relay/r"), "k8"), record
    )
    await asyncio.sleep(0.6)  # the crash's cost: the recorded send is older than the skew

    await system.tell("relay/r", Entry(n=8), idempotency_key="k8", durable=True)
    runs: list[int] = []
    await system.spawn(Relay, "r", fail={}, runs=runs)
    await progress.reached(1)
    assert progress.seen == [8]
    assert runs == []
    assert await system.dead_letters() == []
