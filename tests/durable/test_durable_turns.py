"""Long turns and graceful restarts: a durable message is handled once however long
its handler runs (kept in progress, up to the type's ``max_turn``), and messages a
stopping reader holds go back at once without counting as failed deliveries."""

from __future__ import annotations

import asyncio
import logging

import pytest
from _util import own_broker, until_it_works
from test_durable import Entry, Progress

from actorbus import Actor, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.testing import eventually

# ack_wait far shorter than the handlers below: without in-progress acks each
# of their messages would be delivered again while it is being handled.
SHORT = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=1.0)


class Slow(Actor):
    """Each message takes ``seconds``; counts every start of its handler."""

    type_name = "slow"
    durable = True

    def __init__(self, starts: list[int], done: Progress, seconds: float) -> None:
        self.starts = starts
        self.done = done
        self.seconds = seconds

    @handler
    async def work(self, e: Entry) -> None:
        self.starts.append(e.n)
        await asyncio.sleep(self.seconds)
        self.done.add(e.n)


async def _queue_settled(system, address: str) -> None:
    async def settled() -> bool:
        stats = await system.queue_stats(address)
        return stats.pending == 0 and stats.in_flight == 0

    await eventually(settled, what=f"{address}'s queue settled", timeout=15.0)


@pytest.mark.parametrize("lazily", [False, True], ids=["spawned", "registered"])
async def test_a_handler_slower_than_ack_wait_runs_once(make_system, lazily: bool) -> None:
    system = await make_system(durable=SHORT)
    starts: list[int] = []
    done = Progress()
    kwargs = {"starts": starts, "done": done, "seconds": 3.5}  # 3.5 x ack_wait
    if lazily:
        await system.register(Slow, **kwargs)
    else:  # two replicas share the address's queue: the idle one would take a redelivery
        await system.spawn(Slow, "a", replicas=2, **kwargs)
    for n in range(2):
        await system.tell("slow/a", Entry(n=n), durable=True)
    await done.reached(2)
    await _queue_settled(system, "slow" if lazily else "slow/a")
    assert starts == [0, 1]
    assert await system.dead_letters("slow/a") == []


class Hangs(Actor):
    """Hangs on its first message until ``max_turn`` ends the turn; then succeeds."""

    type_name = "hangs"
    durable = True
    max_turn = 0.5

    def __init__(self, starts: list[int], done: Progress) -> None:
        self.starts = starts
        self.done = done

    @handler
    async def work(self, e: Entry) -> None:
        self.starts.append(e.n)
        if len(self.starts) == 1:
            await asyncio.Event().wait()  # never set: a hung model call
        self.done.add(e.n)


async def test_a_turn_past_max_turn_is_treated_as_hung_and_retried(
    make_system, caplog: pytest.LogCaptureFixture
) -> None:
    system = await make_system(durable=SHORT)
    starts: list[int] = []
    done = Progress()
    await system.spawn(Hangs, "a", starts=starts, done=done)
    with caplog.at_level(logging.WARNING, logger="actorbus.durable"):
        await system.tell("hangs/a", Entry(n=7), durable=True)
        await done.reached(1)
    assert starts == [7, 7]
    hung = [r.getMessage() for r in caplog.records if "max_turn" in r.getMessage()]
    assert len(hung) == 1, hung
    assert "hangs/a" in hung[0], hung
    assert "treated as hung" in hung[0], hung


class Quick(Actor):
    """A lazily hosted durable type whose handler takes a little while."""

    type_name = "quick"
    durable = True

    def __init__(self, seen: list[int], done: Progress) -> None:
        self.seen = seen
        self.done = done

    @handler
    async def work(self, e: Entry) -> None:
        self.seen.append(e.n)
        await asyncio.sleep(0.02)
        self.done.add(e.n)


async def test_a_backlog_waiting_longer_than_ack_wait_is_handled_once_each(make_system) -> None:
    """150 messages for one key take 3 s: most wait in the reader longer than ack_wait."""
    sender = await make_system(durable=SHORT)
    for n in range(150):
        await sender.tell("quick/k", Entry(n=n), durable=True)
    seen: list[int] = []
    done = Progress()
    host = await make_system(durable=SHORT)
    await host.register(Quick, seen=seen, done=done)
    await done.reached(150)
    await _queue_settled(sender, "quick")
    assert seen == list(range(150))
    assert await sender.dead_letters("quick/k") == []


async def test_graceful_restarts_hand_messages_back_without_counting_them(make_system) -> None:
    """Eight hosts in turn each handle a few messages of one key's backlog and close:
    what each held goes back at once, uncounted; nothing is dead-lettered or repeated."""
    sender = await make_system(durable=SHORT)
    for n in range(200):
        await sender.tell("quick/k", Entry(n=n), durable=True)
    seen: list[int] = []
    done = Progress()
    for _ in range(8):
        host = await make_system(durable=SHORT)
        await host.register(Quick, seen=seen, done=done)
        await done.reached(min(200, len(done.seen) + 5))
        await host.close(timeout=2.0)
    host = await make_system(durable=SHORT)
    await host.register(Quick, seen=seen, done=done)
    await done.reached(200)
    await _queue_settled(sender, "quick")
    assert sorted(set(seen)) == list(range(200))
    assert len(seen) == 200, [n for n in set(seen) if seen.count(n) > 1]
    assert done.seen == list(range(200))
    assert await sender.dead_letters("quick/k") == []


async def test_a_stopping_spawned_reader_hands_its_message_back_at_once(make_system) -> None:
    """A handler still running when its host closes is cancelled and its message goes
    back now: the next host has it in well under ``ack_wait``."""
    patient = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=30.0)
    sender = await make_system(durable=patient)
    starts: list[int] = []
    done = Progress()
    first = await make_system(durable=patient)
    await first.spawn(Slow, "b", starts=starts, done=done, seconds=60.0)
    await sender.tell("slow/b", Entry(n=1), durable=True)
    await eventually(lambda: starts == [1], what="the first host started the handler")
    await first.close(timeout=0.5)
    second = await make_system(durable=patient)
    started = asyncio.get_running_loop().time()
    await second.spawn(Slow, "b", starts=starts, done=done, seconds=0.0)
    await done.reached(1)
    assert asyncio.get_running_loop().time() - started < 10.0
    assert starts == [1, 1]
    assert await sender.dead_letters("slow/b") == []


@pytest.mark.parametrize("lazily", [False, True], ids=["spawned", "registered"])
async def test_a_deleted_consumer_is_made_again(make_system, raw_nc, lazily: bool, caplog) -> None:
    """An operator's ``nats consumer rm`` (or a broker that lost it): the reader makes
    its consumer again and the address receives what is sent afterwards. What is
    said is that it was made again; the fetch that failed meanwhile is not a warning
    of its own (such blinks come with every new consumer on a cluster)."""
    from actorbus.bus.jetstream import consumer_name, stream_name, type_consumer_name
    from actorbus.bus.subjects import Address

    system = await make_system(durable=SHORT)
    starts: list[int] = []
    done = Progress()
    kwargs = {"starts": starts, "done": done, "seconds": 0.0}
    if lazily:
        await system.register(Slow, **kwargs)
        consumer = type_consumer_name("slow")
    else:
        await system.spawn(Slow, "c", **kwargs)
        consumer = consumer_name(Address.parse("slow/c"))
    await system.tell("slow/c", Entry(n=0), durable=True)
    await done.reached(1)
    caplog.set_level(logging.DEBUG, logger="actorbus.durable")
    await raw_nc.jetstream().delete_consumer(stream_name(system.namespace, "slow"), consumer)
    await system.tell("slow/c", Entry(n=1), durable=True)
    await done.reached(2)
    assert starts == [0, 1]
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "actorbus.durable"]
    assert any(level == logging.WARNING and "gone" in text for level, text in said), said
    assert any(level == logging.DEBUG and "fetch failed" in text for level, text in said), said
    assert not any(level >= logging.WARNING and "fetch" in text for level, text in said), said


async def test_readers_and_senders_carry_on_after_the_broker_returns_on_a_fresh_store(
    tmp_path, ns: str
) -> None:
    """The broker restarts on an empty store (same port): the durable streams,
    buckets and consumers are made again, without restarting the actor's process."""
    async with own_broker(tmp_path) as broker:
        system = await broker.system(ns, durable=SHORT)
        starts: list[int] = []
        done = Progress()
        await system.spawn(Slow, "f", starts=starts, done=done, seconds=0.0)
        await system.tell("slow/f", Entry(n=0), durable=True)
        await done.reached(1)
        broker.on_a_fresh_store()
        await until_it_works(
            lambda: system.tell("slow/f", Entry(n=1), durable=True, timeout=2.0),
            what="a durable send to the fresh store",
        )
        await done.reached(2)
        assert starts == [0, 1]
        # A process that only sends makes the stream again too.
        broker.on_a_fresh_store()
        sender = await broker.system(ns, durable=SHORT)
        await sender.durable_ready("slow")
        broker.on_a_fresh_store()
        await until_it_works(
            lambda: sender.tell("slow/g", Entry(n=9), durable=True, timeout=2.0),
            what="a sender's send to the fresh store",
        )
        assert (await sender.queue_stats("slow/g")).pending == 1
