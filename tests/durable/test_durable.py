"""Durable delivery: stored before the send returns, delivered at least once (also to
an actor that was not running), acked after success, retried, dead-lettered."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from pydantic import BaseModel

from actorbus import Actor, ActorBusError, InvalidAddressError, handler
from actorbus.actors.sending import SendOptions
from actorbus.bus.jetstream import DurableSettings, dlq_stream_name
from actorbus.testing import eventually

FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=5.0)
WAIT = 10.0


class Entry(BaseModel):
    n: int


class Progress:
    """What a ledger handled, and a way to wait until it handled n entries."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def add(self, n: int) -> None:
        self.seen.append(n)
        for count, future in self._waiters:
            if len(self.seen) >= count and not future.done():
                future.set_result(None)

    async def reached(self, count: int, timeout: float = WAIT) -> None:
        if len(self.seen) >= count:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((count, future))
        await asyncio.wait_for(future, timeout)


class Ledger(Actor):
    """Records what it handled; fails on demand to exercise retries."""

    type_name = "ledger"
    durable = True

    def __init__(self, progress: Progress, fail: dict[int, int]) -> None:
        self.progress = progress
        self.fail = fail  # n -> how many more times to fail (-1: always)

    @handler
    async def add(self, e: Entry) -> None:
        left = self.fail.get(e.n, 0)
        if left:
            self.fail[e.n] = left - 1 if left > 0 else left
            raise RuntimeError(f"entry {e.n} is not welcome yet")
        self.progress.add(e.n)


async def spawn_ledger(
    system: Any, key: str, fail: dict[int, int] | None = None, cls: type[Ledger] = Ledger
) -> Progress:
    progress = Progress()
    await system.spawn(cls, key, progress=progress, fail=fail if fail is not None else {})
    return progress


async def test_messages_sent_while_the_actor_is_down_arrive_in_order(make_system) -> None:
    system = await make_system(durable=FAST)
    for n in range(300):
        await system.tell("ledger/offline", Entry(n=n), durable=True)
    progress = await spawn_ledger(system, "offline")
    await progress.reached(300)
    assert progress.seen == list(range(300))


async def test_a_failing_message_is_retried_until_it_succeeds_and_order_holds(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    progress = await spawn_ledger(system, "retry", fail={1: 2})
    for n in range(3):
        await system.tell("ledger/retry", Entry(n=n), durable=True)
    await progress.reached(3)
    assert progress.seen == [0, 1, 2]


async def test_poison_goes_to_dead_letters_after_its_attempts_and_blocks_nothing(
    make_system, ns: str
) -> None:
    system = await make_system(durable=FAST)
    progress = await spawn_ledger(system, "poison", fail={1: -1})
    for n in range(3):
        await system.tell("ledger/poison", Entry(n=n), durable=True)
    await progress.reached(2)
    assert progress.seen == [0, 2]
    record = await dead_letter(system, ns, "ledger/poison")
    assert record["attempts"] == FAST.max_deliver
    assert record["code"] == "E_HANDLER"
    assert "not welcome" in record["reason"]
    original = msgpack.unpackb(record["original"])
    assert original["content"] == {"n": 1}


class PatientLedger(Ledger):
    """Its own retry schedule: five retries, whatever the system's backoff."""

    type_name = "patient-ledger"
    retry_backoff = (0.05, 0.05, 0.05, 0.05, 0.05)


async def test_a_type_sets_its_own_retry_backoff(make_system, ns: str) -> None:
    system = await make_system(durable=FAST)  # the system's: three retries
    progress = await spawn_ledger(system, "p", fail={1: 4, 2: -1}, cls=PatientLedger)
    for n in range(4):
        await system.tell("patient-ledger/p", Entry(n=n), durable=True)
    await progress.reached(3)
    assert progress.seen == [0, 1, 3]  # 1 failed four times and got through on its fifth
    record = await dead_letter(system, ns, "patient-ledger/p")
    assert record["attempts"] == 6 != FAST.max_deliver  # the type's 5 retries + 1


async def test_a_payload_that_cannot_validate_is_dead_lettered_at_once(
    make_system, ns: str
) -> None:
    system = await make_system(durable=FAST)
    progress = await spawn_ledger(system, "invalid")
    await system.tell("ledger/invalid", {"n": "not a number"}, intent="Entry", durable=True)
    await system.tell("ledger/invalid", Entry(n=7), durable=True)
    await progress.reached(1)
    assert progress.seen == [7]
    record = await dead_letter(system, ns, "ledger/invalid")
    assert record["attempts"] == 1
    assert record["code"] == "E_VALIDATION"


async def test_a_repeated_message_id_is_stored_once(make_system) -> None:
    system = await make_system(durable=FAST)
    await system.durable_ready("ledger")
    out = system.sender.encode("ledger/dedup", Entry(n=1), SendOptions(), durable=True)
    for _ in range(3):  # a sender retrying after a lost publish-ack
        await system.runtime.mux.request(
            system.runtime.subjects.durable(_addr("ledger/dedup")), out.body, out.headers, 5
        )
    await system.tell("ledger/dedup", Entry(n=2), durable=True)
    progress = await spawn_ledger(system, "dedup")
    await progress.reached(2)
    assert progress.seen == [1, 2]


async def test_an_expired_message_is_dropped_not_delivered_late(make_system) -> None:
    system = await make_system(durable=FAST)
    await system.tell("ledger/ttl", Entry(n=1), durable=True, ttl_ms=1)
    await asyncio.sleep(0.01)  # let the 1 ms ttl pass: the point of this test is time
    await system.tell("ledger/ttl", Entry(n=2), durable=True)
    progress = await spawn_ledger(system, "ttl")
    await progress.reached(1)
    assert progress.seen == [2]
    inbox = next(iter(system.hosting.inboxes.values()))
    assert inbox.expired == 1
    assert (await system.queue_stats("ledger/ttl")).expired == 1  # shared by every process


async def test_a_message_older_than_the_default_ttl_is_dropped_and_counted(make_system) -> None:
    system = await make_system(durable=DurableSettings(backoff=(0.05,), max_age=0.2))
    await system.tell("ledger/old", Entry(n=1), durable=True)
    await asyncio.sleep(0.3)  # older than max_age: the point of this test is time
    await system.tell("ledger/old", Entry(n=2), durable=True)
    progress = await spawn_ledger(system, "old")
    await progress.reached(1)
    assert progress.seen == [2]
    assert (await system.queue_stats("ledger/old")).expired == 1


async def test_durable_sends_need_a_keyed_address(system) -> None:
    with pytest.raises(InvalidAddressError, match="type/key"):
        await system.tell("ledger", Entry(n=1), durable=True)


async def test_durable_needs_jetstream(tmp_path) -> None:
    from actorbus import ActorSystem
    from actorbus.bus.server import EmbeddedServer, ServerConfig

    with EmbeddedServer(ServerConfig(jetstream=False)) as server:
        system = await ActorSystem.connect(server.url)
        try:
            with pytest.raises(ActorBusError, match="needs JetStream"):
                await system.tell("ledger/x", Entry(n=1), durable=True)
        finally:
            await system.close()


def _addr(text: str) -> Any:
    from actorbus.bus.subjects import Address

    return Address.parse(text)


async def dead_letter(system: Any, ns: str, address: str) -> dict[str, Any]:
    msg = await system.runtime.js.get_last_msg(
        dlq_stream_name(ns), system.runtime.subjects.dead_letter(_addr(address))
    )
    record: dict[str, Any] = msgpack.unpackb(msg.data)
    return record


class OnceLedger(Ledger):
    type_name = "once-ledger"
    idempotent = True


async def test_an_idempotency_key_runs_the_handler_once_even_across_restarts(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    progress = await spawn_ledger(system, "k", cls=OnceLedger)
    await system.tell("once-ledger/k", Entry(n=1), durable=True, idempotency_key="pay-1")
    await system.tell("once-ledger/k", Entry(n=1), durable=True, idempotency_key="pay-1")
    await system.tell("once-ledger/k", Entry(n=2), durable=True, idempotency_key="pay-2")
    await progress.reached(2)
    await system.stop_actor("once-ledger/k")
    # a new instance (say, after a crash) gets the same key again, then a new one
    await system.tell("once-ledger/k", Entry(n=1), durable=True, idempotency_key="pay-1")
    await system.tell("once-ledger/k", Entry(n=3), durable=True, idempotency_key="pay-3")
    again = await spawn_ledger(system, "k", cls=OnceLedger)
    await again.reached(1)
    assert progress.seen + again.seen == [1, 2, 3]


async def test_dead_letters_can_be_listed_inspected_replayed_and_dropped(make_system) -> None:
    system = await make_system(durable=FAST)
    fail = {1: -1, 2: -1}
    progress = await spawn_ledger(system, "dlq", fail=fail)
    for n in (1, 2, 3):
        await system.tell("ledger/dlq", Entry(n=n), durable=True)
    await progress.reached(1)  # 3 got through; 1 and 2 are on their way to the dead letters
    letters = await wait_for_dead_letters(system, "ledger/dlq", 2)
    assert [letter.envelope().content for letter in letters] == [{"n": 1}, {"n": 2}]
    assert all(letter.attempts == FAST.max_deliver for letter in letters)
    assert (await system.dead_letters()) == letters  # all addresses: the same two

    fail.clear()  # the actor is fixed: a replay now succeeds
    await system.replay_dead_letter(letters[0].seq)
    await system.drop_dead_letter(letters[1].seq)
    assert await system.dead_letters("ledger/dlq") == []
    await system.tell("ledger/dlq", Entry(n=4), durable=True)  # behind the replay
    await progress.reached(3)
    assert progress.seen == [3, 1, 4]
    with pytest.raises(ActorBusError, match="no dead letter"):
        await system.drop_dead_letter(letters[1].seq)


async def test_queue_stats_show_depth_while_the_actor_is_away(make_system) -> None:
    system = await make_system(durable=FAST)
    progress = await spawn_ledger(system, "depth", fail={0: 1})  # retried once
    await system.tell("ledger/depth", Entry(n=0), durable=True)
    await progress.reached(1)

    async def acked() -> Any:  # the handler is done; its ack may still be on its way
        stats = await system.queue_stats("ledger/depth")
        return stats if stats.in_flight == 0 else None

    stats = await eventually(acked, what="the retried entry acked")
    assert stats.reading
    assert stats.redeliveries == 1  # the retry, although nothing is in flight now
    assert stats.redelivered == 0
    await system.stop_actor("ledger/depth")
    await eventually(
        lambda: _not_reading(system, "ledger/depth"), what="no reader (its last pull expired)"
    )
    for n in range(1, 6):
        await system.tell("ledger/depth", Entry(n=n), durable=True)

    async def all_pending() -> Any:  # the server counts a stored message for its
        stats = await system.queue_stats("ledger/depth")  # consumers a moment later
        return stats if stats.pending == 5 or stats.in_flight else None

    stats = await eventually(all_pending, what="five entries pending")
    assert (stats.pending, stats.in_flight) == (5, 0)
    assert stats.delivered == 2
    assert stats.redeliveries == 1
    assert (await system.queue_stats("ledger/never")).pending == 0


async def _not_reading(system: Any, address: str) -> bool:
    return not (await system.queue_stats(address)).reading


async def wait_for_dead_letters(system: Any, address: str, count: int) -> list[Any]:
    async def enough() -> list[Any] | None:
        letters: list[Any] = await system.dead_letters(address)
        return letters if len(letters) >= count else None

    letters: list[Any] = await eventually(enough, what=f"{count} dead letters of {address}")
    assert len(letters) == count, letters
    return letters


async def test_history_reads_an_actors_messages_from_a_sequence_or_a_time(make_system) -> None:
    import datetime as dt

    system = await make_system(durable=FAST)
    for n in range(3):
        await system.tell("ledger/h", Entry(n=n), durable=True)
    middle = dt.datetime.now(dt.UTC)
    for n in range(3, 5):
        await system.tell("ledger/h", Entry(n=n), durable=True)
    history = [e async for e in system.history(address="ledger/h")]
    assert [e.content for e in history] == [{"n": n} for n in range(5)]
    assert all(e.intent == "Entry" and e.dst == "ledger/h" for e in history)
    first = [e async for e in system.history(address="ledger/h", since_seq=1)]
    assert len(first) == 5
    later = [e.content["n"] async for e in system.history(address="ledger/h", since=middle)]
    assert later == [3, 4]
    assert [e async for e in system.history(address="ledger/nobody")] == []


async def test_history_of_a_session_spans_actors(make_system) -> None:
    system = await make_system(durable=FAST)
    await system.tell("ledger/a", Entry(n=1), durable=True, session_id="s1")
    await system.tell("ledger/b", Entry(n=2), durable=True, session_id="s2")
    await system.tell("ledger/b", Entry(n=3), durable=True, session_id="s1")
    session = [e async for e in system.history(session_id="s1")]
    assert [(e.dst, e.content["n"]) for e in session] == [("ledger/a", 1), ("ledger/b", 3)]


async def test_topics_are_kept_only_when_asked(make_system) -> None:
    kept = await make_system(durable=DurableSettings(keep_topics=True))
    live: asyncio.Queue[Any] = asyncio.Queue()

    async def listen(env: Any) -> None:
        await live.put(env.content["n"])

    await kept.subscribe("news.*", listen)
    for n in range(3):
        await kept.publish("news.eu", Entry(n=n))
    # subscribers still get them live, stored or not
    assert [await asyncio.wait_for(live.get(), WAIT) for _ in range(3)] == [0, 1, 2]
    await kept.publish("other.x", Entry(n=9))
    news = [e.content["n"] async for e in kept.history(topic="news.*")]
    assert news == [0, 1, 2]


async def test_topic_history_without_keeping_topics_is_a_clear_error(system) -> None:
    with pytest.raises(ActorBusError, match="keep_topics"):
        [e async for e in system.history(topic="news.*")]
    with pytest.raises(ValueError, match="exactly one"):
        [e async for e in system.history()]


async def test_rerun_sends_history_to_a_new_actor_in_order(make_system) -> None:
    system = await make_system(durable=FAST)
    for n in range(4):
        await system.tell("ledger/v1", Entry(n=n), durable=True, session_id="s")
    progress = await spawn_ledger(system, "v2")
    sent = await system.rerun(system.history(address="ledger/v1"), "ledger/v2")
    assert sent == 4
    await progress.reached(4)
    assert progress.seen == [0, 1, 2, 3]


class WideLedger(Ledger):
    """Opts out of strict order: up to 4 durable messages at once."""

    type_name = "wide-ledger"
    concurrency = 4

    @handler
    async def add(self, e: Entry) -> None:
        self.progress.add(e.n)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.wait_for(self.gate.wait(), WAIT)
        finally:
            self.running -= 1

    async def on_start(self) -> None:
        self.running = self.peak = 0
        self.gate = asyncio.Event()
        WIDE.append(self)


WIDE: list[WideLedger] = []


async def test_an_actor_with_concurrency_takes_that_many_durable_messages_at_once(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    for n in range(8):
        await system.tell("wide-ledger/w", Entry(n=n), durable=True)
    progress = await spawn_ledger(system, "w", cls=WideLedger)
    await progress.reached(4)  # four are running, held at the gate
    actor = WIDE[-1]
    stats = await system.queue_stats("wide-ledger/w")
    assert (actor.running, stats.in_flight) == (4, 4)
    actor.gate.set()
    await progress.reached(8)
    assert sorted(progress.seen) == list(range(8))
    assert actor.peak == 4


async def test_history_and_dead_letters_read_messages_of_either_encoding(make_system) -> None:
    """Stored messages are decoded through the pipeline in the encoding their headers
    name: a JSON system's messages show in history and in its dead letters."""
    from actorbus import Encoding

    json_system = await make_system(durable=FAST, encoding=Encoding.JSON)
    msgpack_system = await make_system(durable=FAST)
    await json_system.tell("ledger/enc", Entry(n=1), durable=True)
    await msgpack_system.tell("ledger/enc", Entry(n=2), durable=True)
    history = [e.content async for e in msgpack_system.history(address="ledger/enc")]
    assert history == [{"n": 1}, {"n": 2}]
    progress = await spawn_ledger(json_system, "enc-dead", fail={3: -1})
    await json_system.tell("ledger/enc-dead", Entry(n=3), durable=True)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not (letters := await json_system.dead_letters("ledger/enc-dead")):
        assert loop.time() < deadline
        await asyncio.sleep(0.05)
    assert letters[0].envelope().content == {"n": 3}
    assert progress.seen == []


async def test_a_queue_made_by_someone_else_to_lose_messages_is_refused(
    make_system, raw_nc: Any
) -> None:
    """Any member may make a type's queue (a send to a type no host started yet is
    stored for it). One made ahead with a message limit, or republishing its
    messages elsewhere, is refused by every sender and host, naming the setting."""
    from nats.js.api import RePublish, StreamConfig

    from actorbus import ActorBusError
    from actorbus.bus.jetstream import stream_name

    system = await make_system(durable=FAST)
    ns = system.namespace
    js = raw_nc.jetstream()
    await js.add_stream(
        StreamConfig(name=stream_name(ns, "ledger"), subjects=[f"{ns}.d.ledger.*"], max_msgs=1)
    )
    with pytest.raises(ActorBusError, match="max_msgs 1, not -1"):
        await system.tell("ledger/lossy", Entry(n=1), durable=True)
    await js.delete_stream(stream_name(ns, "ledger"))
    copy = RePublish(src=">", dest="spy.>")
    await js.add_stream(
        StreamConfig(name=stream_name(ns, "ledger"), subjects=[f"{ns}.d.ledger.*"], republish=copy)
    )
    other = await make_system(durable=FAST)
    with pytest.raises(ActorBusError, match="republish"):
        await other.tell("ledger/copied", Entry(n=1), durable=True)
    # A queue made by a sender (before any host) is taken by the next sender as it is.
    await js.delete_stream(stream_name(ns, "ledger"))
    await system.tell("ledger/fine", Entry(n=1), durable=True)
    third = await make_system(durable=FAST)
    await third.tell("ledger/fine", Entry(n=2), durable=True)
    progress = await spawn_ledger(third, "fine")
    await progress.reached(2)


async def test_a_restore_that_fails_leaves_the_durable_stores_in_use(
    system: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something thought a stream gone (a node died) and asked to make the stores
    again, while the cluster was still electing: the stores in use must stay
    usable, or every reader fails with "not made yet" until a later restore (a
    failover test lost messages that way)."""
    import nats.js.errors

    from actorbus.actors import durable_streams

    durable = system.runtime.durable
    stores = await durable.ready()

    async def electing(*_: Any) -> Any:
        raise nats.js.errors.ServiceUnavailableError()

    monkeypatch.setattr(durable_streams, "ensure_streams", electing)
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await durable.restore()
    assert durable.stores is stores
