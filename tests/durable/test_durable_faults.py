"""Durable delivery under failure: a broker killed with SIGKILL and restarted on its
store, and a long queue built up while the actor is away."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _util import own_broker
from test_durable import FAST, Entry, spawn_ledger

from actorbus import ConnectionLostError

WAIT = 60.0


async def test_every_message_whose_send_returned_survives_a_broker_sigkill(
    tmp_path: Any, ns: str
) -> None:
    async with own_broker(tmp_path) as broker:
        system = await broker.system(ns, durable=FAST)
        confirmed: list[int] = []
        for n in range(200):
            await system.tell("ledger/survivor", Entry(n=n), durable=True)
            confirmed.append(n)
        broker.kill_and_restart()  # no flush beyond sync_interval: always
        # the client reconnects on its own; a durable send proves the link is back
        deadline = time.monotonic() + WAIT
        while True:
            try:
                await system.tell("ledger/survivor", Entry(n=200), durable=True, timeout=1)
                break
            except (ConnectionLostError, TimeoutError):
                assert time.monotonic() < deadline, "no reconnect after the broker restart"
                await asyncio.sleep(0.1)  # bounded retry while the client reconnects
        confirmed.append(200)
        progress = await spawn_ledger(system, "survivor")
        await progress.reached(len(confirmed), timeout=WAIT)
        assert progress.seen[: len(confirmed)] == confirmed


async def test_ten_thousand_messages_sent_while_the_actor_is_down_arrive_in_order(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    for n in range(10_000):
        await system.tell("ledger/backlog", Entry(n=n), durable=True)
    progress = await spawn_ledger(system, "backlog")
    await progress.reached(10_000, timeout=WAIT)  # one at a time: ~1,000/s on a slow disk
    assert progress.seen == list(range(10_000))


async def test_an_actor_process_killed_mid_stream_handles_every_message(
    make_system, nats_server: Any, ns: str
) -> None:
    """5,000 durable messages; the process hosting the actor is SIGKILLed partway and
    started again. Every message is handled, and every effect it sends through
    actorbus (a durable tell to a sink) is stored exactly once: none twice. Only the
    handler run itself may repeat for the one message in flight at the kill."""
    import signal

    from _actors import Tick
    from _util import run_host

    system = await make_system(durable=FAST)
    counts: dict[int, int] = {}
    reached: dict[int, asyncio.Event] = {1000: asyncio.Event(), 5000: asyncio.Event()}

    async def handled(msg: Any) -> None:
        n = int(msg.data)
        counts[n] = counts.get(n, 0) + 1
        for goal, event in reached.items():
            if len(counts) >= goal:
                event.set()

    await system.nc.subscribe(f"{ns}.test.handled", cb=handled)
    await system.nc.flush()
    total = 5000
    async with run_host("_actors:Tally", nats_server.url, ns, "k", ack_wait=1.0) as host:
        for n in range(total):
            await system.tell("tally/k", Tick(n=n), durable=True, idempotency_key=f"tick-{n}")
        await asyncio.wait_for(reached[1000].wait(), WAIT)
        host.proc.send_signal(signal.SIGKILL)
        await host.proc.wait()
    handled_at_kill = len(counts)
    assert handled_at_kill < total, "the kill came too late to prove anything"
    async with run_host("_actors:Tally", nats_server.url, ns, "k", ack_wait=1.0):
        await asyncio.wait_for(reached[5000].wait(), WAIT)
    assert sorted(counts) == list(range(total))
    twice = [n for n, c in counts.items() if c > 1]
    assert len(twice) <= 1, f"handled more than once: {twice}"
    effects = [e.content["n"] async for e in system.history(address="sink/k")]
    assert effects == list(range(total)), "an effect was lost, repeated or reordered"


async def test_the_reading_host_of_a_lazy_type_killed_mid_stream_loses_nothing(
    make_system, nats_server: Any, ns: str
) -> None:
    """Two processes host a durable type lazily; the one reading its queue is
    SIGKILLed partway. The other takes over within the reader lease's ttl; every
    message is handled and every effect stored exactly once."""
    import signal

    from _actors import Tick
    from _util import run_host

    system = await make_system(durable=FAST)
    seen: set[int] = set()
    reached = {500: asyncio.Event(), 2000: asyncio.Event()}

    async def handled(msg: Any) -> None:
        seen.add(int(msg.data))
        for goal, event in reached.items():
            if len(seen) >= goal:
                event.set()

    await system.nc.subscribe(f"{ns}.test.handled", cb=handled)
    await system.nc.flush()
    total, keys = 2000, 4
    # The second host starts after the first took the reader lease, so it waits.
    async with (
        run_host("_actors:Tally", nats_server.url, ns, "*", ack_wait=1.0) as reader,
        run_host("_actors:Tally", nats_server.url, ns, "*", ack_wait=1.0),
    ):
        for n in range(total):
            await system.tell(
                f"tally/k{n % keys}", Tick(n=n), durable=True, idempotency_key=f"t{n}"
            )
        await asyncio.wait_for(reached[500].wait(), WAIT)
        reader.proc.send_signal(signal.SIGKILL)
        await reader.proc.wait()
        assert len(seen) < total, "the kill came too late to prove anything"
        await asyncio.wait_for(reached[2000].wait(), WAIT + 5)
    effects = [e.content["n"] async for e in system.history(address="sink/k")]
    assert sorted(effects) == list(range(total)), "an effect was lost or repeated"
