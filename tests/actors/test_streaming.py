"""Streamed replies: order, end, errors midway, early exit cancels the producer, timeouts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _util import WAIT, barrier
from pydantic import BaseModel

from actorbus import (
    Actor,
    AskTimeoutError,
    NoRespondersError,
    RemoteError,
    ValidationFailedError,
    handler,
)
from actorbus.testing import eventually

pytestmark = pytest.mark.transports("nats", "local")


class StCount(BaseModel):
    n: int


class StItem(BaseModel):
    i: int


class StBig(BaseModel):
    n: int
    size: int


class StFailAfter(BaseModel):
    n: int
    typed: bool = False


class StForever(BaseModel):
    pass


class StHangAfter(BaseModel):
    n: int


async def drain(stream: AsyncIterator[Any], into: list[Any]) -> None:
    """Collect a stream's items into ``into`` (kept when the stream raises)."""
    async for item in stream:
        into.append(item)


class Probe:
    """In-process facts a streaming producer reports to the test."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.closed = asyncio.Event()
        self.produced = 0


class Streamer(Actor):
    type_name = "streamer"

    def __init__(self, probe: Probe | None = None) -> None:
        self.probe = probe or Probe()

    @handler
    async def count(self, req: StCount) -> AsyncIterator[StItem]:
        for i in range(req.n):
            yield StItem(i=i)

    @handler
    async def fail_after(self, req: StFailAfter) -> AsyncIterator[dict[str, int]]:
        for i in range(req.n):
            yield {"i": i}
        if req.typed:
            raise ValidationFailedError("item 3 is not valid")
        raise ValueError(f"broke after {req.n}")

    @handler
    async def forever(self, _: StForever) -> AsyncIterator[dict[str, int]]:
        self.probe.started.set()
        try:
            i = 0
            while True:
                yield {"i": i}
                self.probe.produced += 1
                i += 1
                await asyncio.sleep(0.005)  # a producer pacing itself, not synchronisation
        except asyncio.CancelledError:
            self.probe.cancelled.set()
            raise
        finally:
            self.probe.closed.set()

    @handler
    async def hang_after(self, req: StHangAfter) -> AsyncIterator[dict[str, int]]:
        try:
            for i in range(req.n):
                yield {"i": i}
            await asyncio.Event().wait()  # never set: the consumer must give up
        except asyncio.CancelledError:
            self.probe.cancelled.set()
            raise
        finally:
            self.probe.closed.set()

    @handler
    async def plain(self, q: dict[str, Any]) -> dict[str, Any]:
        return {"plain": True}


async def test_items_in_order_then_end(system) -> None:
    await system.spawn(Streamer, "s1")
    items = [item async for item in system.stream("streamer/s1", StCount(n=200), timeout=2)]
    assert items == [StItem(i=i) for i in range(200)]
    assert all(isinstance(item, StItem) for item in items)


async def test_empty_stream_ends(system) -> None:
    await system.spawn(Streamer, "s1")
    assert [x async for x in system.stream("streamer/s1", StCount(n=0), timeout=2)] == []


async def test_stream_through_ref_and_returns(system) -> None:
    ref = await system.spawn(Streamer, "s1")
    got: list[Any] = []
    with pytest.raises(RemoteError):
        await drain(ref.stream(StFailAfter(n=2), timeout=2, returns=StItem), got)
    assert got == [StItem(i=0), StItem(i=1)]


async def test_actor_serves_after_stream(system) -> None:
    await system.spawn(Streamer, "s1")
    for _ in range(3):
        assert len([x async for x in system.stream("streamer/s1", StCount(n=5), timeout=2)]) == 5
    assert await system.ask("streamer/s1", {}, timeout=2) == {"plain": True}


async def test_remote_error_midway_after_earlier_items(system) -> None:
    await system.spawn(Streamer, "s1")
    got: list[Any] = []
    with pytest.raises(RemoteError) as info:
        await drain(system.stream("streamer/s1", StFailAfter(n=3), timeout=2), got)
    assert got == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert info.value.remote_type == "ValueError"
    assert info.value.remote_message == "broke after 3"
    assert str(info.value) == "ValueError in streamer/s1: broke after 3"


async def test_typed_error_midway_keeps_its_type(system) -> None:
    await system.spawn(Streamer, "s1")
    got: list[Any] = []
    with pytest.raises(ValidationFailedError, match="item 3 is not valid"):
        await drain(system.stream("streamer/s1", StFailAfter(n=3, typed=True), timeout=2), got)
    assert len(got) == 3


async def test_break_early_cancels_producer(system) -> None:
    probe = Probe()
    await system.spawn(Streamer, "s1", probe=probe)
    got = []
    async with asyncio.timeout(WAIT):
        stream = system.stream("streamer/s1", StForever(), timeout=2)
        async for item in stream:
            got.append(item)
            if len(got) == 3:
                break
        await stream.aclose()  # what `async for` leaves to the garbage collector
    assert got == [{"i": 0}, {"i": 1}, {"i": 2}]
    await asyncio.wait_for(probe.closed.wait(), WAIT)
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)
    # the cell is free again: the next message is handled
    assert await system.ask("streamer/s1", {}, timeout=2) == {"plain": True}


async def test_a_consumer_cancelled_again_while_it_closes_still_stops_the_producer(
    system,
) -> None:
    """A task that leaves its stream because it is being cancelled, and is
    cancelled once more while the stream closes (a gateway cancelling a run that
    is already on its way out), still tells the producer to stop."""
    probe = Probe()
    await system.spawn(Streamer, "s1", probe=probe)
    got_one = asyncio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(system.stream("streamer/s1", StForever(), timeout=2)) as it:
            async for _ in it:
                got_one.set()
                await asyncio.Event().wait()  # suspended outside the generator

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_one.wait(), WAIT)
    task.cancel()
    for _ in range(6):  # the first cancel runs up to the stream's clean-up
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.wait_for(probe.closed.wait(), WAIT)
    assert await system.ask("streamer/s1", {}, timeout=2) == {"plain": True}


async def test_break_early_while_producer_is_waiting(system) -> None:
    probe = Probe()
    await system.spawn(Streamer, "s1", probe=probe)
    stream = system.stream("streamer/s1", StHangAfter(n=2), timeout=2)
    first = await anext(stream)
    assert first == {"i": 0}
    await stream.aclose()
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)
    assert probe.closed.is_set()
    assert await system.ask("streamer/s1", {}, timeout=2) == {"plain": True}


async def test_timeout_between_items(system) -> None:
    probe = Probe()
    await system.spawn(Streamer, "s1", probe=probe)
    got: list[Any] = []
    with pytest.raises(AskTimeoutError) as info:
        await drain(system.stream("streamer/s1", StHangAfter(n=2), timeout=0.3), got)
    assert got == [{"i": 0}, {"i": 1}]
    assert str(info.value) == (
        "stream from 'streamer/s1' (intent 'StHangAfter') sent nothing for 0.3s "
        "after item 2 (its producer may be gone)"
    )
    # giving up also cancels the producer
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)
    assert await system.ask("streamer/s1", {}, timeout=2) == {"plain": True}


async def test_a_stream_with_no_first_item_in_time_says_so(system) -> None:
    await system.spawn(Streamer, "s0")
    with pytest.raises(AskTimeoutError, match=r"^stream from 'streamer/s0' .* sent no item within"):
        await drain(system.stream("streamer/s0", StHangAfter(n=0), timeout=0.3), [])


async def test_stream_to_nobody(system) -> None:
    with pytest.raises(NoRespondersError, match="nobody/here"):
        await drain(system.stream("nobody/here", StCount(n=1), timeout=2), [])


async def test_two_streams_from_two_actors_interleave(system) -> None:
    await system.spawn(Streamer, "a")
    await system.spawn(Streamer, "b")

    async def collect(address: str, n: int) -> list[int]:
        return [x.i async for x in system.stream(address, StCount(n=n), timeout=2)]

    a, b = await asyncio.gather(collect("streamer/a", 50), collect("streamer/b", 70))
    assert a == list(range(50))
    assert b == list(range(70))


async def test_stream_from_other_system(system, make_system) -> None:
    probe = Probe()
    host = await make_system()
    await host.spawn(Streamer, "remote", probe=probe)
    items = [x async for x in system.stream("streamer/remote", StCount(n=10), timeout=2)]
    assert [x.i for x in items] == list(range(10))
    stream = system.stream("streamer/remote", StForever(), timeout=2)
    await anext(stream)
    await stream.aclose()
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)


class StSlowStart(BaseModel):
    pass


class SlowStarter(Actor):
    """A producer that needs a long time before its first item (a model warming up)."""

    type_name = "slow-starter"

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    @handler
    async def go(self, _: StSlowStart) -> AsyncIterator[dict[str, int]]:
        self.probe.started.set()
        try:
            await asyncio.Event().wait()  # never set: no first item ever comes
            yield {"i": 0}
        except asyncio.CancelledError:
            self.probe.cancelled.set()
            raise
        finally:
            self.probe.closed.set()

    @handler
    async def plain(self, q: dict[str, Any]) -> dict[str, Any]:
        return {"plain": True}


async def test_timeout_before_first_item_cancels_producer(system) -> None:
    """The consumer gave up before any frame arrived:
    the producer must still be cancelled, or it holds the actor forever."""
    probe = Probe()
    await system.spawn(SlowStarter, "s", probe=probe)
    with pytest.raises(AskTimeoutError):
        await drain(system.stream("slow-starter/s", StSlowStart(), timeout=0.3), [])
    assert probe.started.is_set()
    await asyncio.wait_for(probe.cancelled.wait(), 2.0)
    assert await system.ask("slow-starter/s", {}, timeout=2) == {"plain": True}


async def test_stream_handler_told_instead_of_streamed(system) -> None:
    await system.spawn(Streamer, "s1")
    await system.tell("streamer/s1", StCount(n=3))  # no reply inbox: dropped with a log line
    assert await system.ask("streamer/s1", {}, timeout=2) == {"plain": True}
    assert len([x async for x in system.stream("streamer/s1", StCount(n=3), timeout=2)]) == 3


async def test_lost_frame_is_a_protocol_error(system, raw_nc, ns: str) -> None:
    """A producer that skips a sequence number: the caller sees ProtocolError, never a
    silently shortened stream."""
    import msgpack

    from actorbus.codecs.errors import ProtocolError

    async def bad_producer(msg: Any) -> None:
        for seq in (1, 3):
            body = msgpack.packb({"id": f"r{seq}", "dst": "x", "intent": "dict", "content": {}})
            await raw_nc.publish(msg.reply, body, headers={"Ab-Seq": str(seq)})

    await raw_nc.subscribe(f"{ns}.a.fake-streamer.f", cb=bad_producer)
    await barrier(raw_nc)
    got: list[Any] = []
    with pytest.raises(ProtocolError, match="expected #2, got #3"):
        await drain(system.stream("fake-streamer/f", {}, timeout=2), got)
    assert got == [{}]


async def test_stream_cancelled_while_queued_never_starts(system) -> None:
    """The consumer gave up while the request waited behind another message: the
    producer must not start afterwards and stream into the void."""
    probe = Probe()
    release = asyncio.Event()
    entered = asyncio.Event()

    class Busy(Actor):
        type_name = "busy-streamer"

        @handler
        async def block(self, _: dict[str, Any]) -> str:
            entered.set()
            await release.wait()
            return "done"

        @handler
        async def forever(self, _: StForever) -> AsyncIterator[dict[str, int]]:
            probe.started.set()
            while True:
                yield {"i": 0}
                await asyncio.sleep(0.005)

    await system.spawn(Busy, "b")
    blocking = asyncio.ensure_future(system.ask("busy-streamer/b", {}, timeout=5))
    try:
        await asyncio.wait_for(entered.wait(), WAIT)
        with pytest.raises(AskTimeoutError):
            await drain(system.stream("busy-streamer/b", StForever(), timeout=0.2), [])
        await barrier(system)  # the cancel reached the server before the actor frees up
    finally:
        release.set()
    assert await blocking == "done"
    # handled in arrival order: once this ask is answered, the stream request is past
    assert await system.ask("busy-streamer/b", {}, timeout=2) == "done"
    assert not probe.started.is_set(), "a stream cancelled while queued was started anyway"


async def test_ask_on_a_streaming_handler_is_a_typed_error(system) -> None:
    """ask() cannot take a stream: a clear error, not the first item alone, and the
    producer never runs."""
    from actorbus import ProtocolError, WrongCallError

    await system.spawn(Streamer, "ask-it")
    with pytest.raises(WrongCallError, match=r"streams its reply: call stream\(\)") as wrong:
        await system.ask("streamer/ask-it", StCount(n=3), timeout=2)
    assert isinstance(wrong.value, ProtocolError)  # its code, E_PROTOCOL, is its parent's
    assert await system.ask("streamer/ask-it", {}, timeout=2) == {"plain": True}


async def test_stream_of_a_plain_handler_yields_its_reply_then_ends(system) -> None:
    await system.spawn(Streamer, "plain-it")
    items = [x async for x in system.stream("streamer/plain-it", {}, timeout=2)]
    assert items == [{"plain": True}]


class Firehose(Actor):
    """Yields as fast as it can and records how far it got."""

    @handler(intent="plain")
    async def plain(self, q: dict[str, Any]) -> dict[str, Any]:
        return {"plain": True}

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.produced = 0

    @handler
    async def go(self, req: StCount) -> AsyncIterator[dict[str, int]]:
        try:
            for i in range(req.n):
                self.produced = i + 1
                self.probe.produced = self.produced
                yield {"i": i}
        finally:
            self.probe.closed.set()

    @handler
    async def big(self, req: StBig) -> AsyncIterator[dict[str, Any]]:
        try:
            for i in range(req.n):
                self.probe.produced = i + 1
                yield {"i": i, "pad": "x" * req.size}
        finally:
            self.probe.closed.set()


async def test_flow_control_delivers_a_long_stream_in_order(make_system) -> None:
    """Credits keep a stream going far past one window."""
    host = await make_system(stream_window=8)
    await host.spawn(Firehose, "long", probe=Probe())
    items = [x async for x in host.stream("firehose/long", StCount(n=500), timeout=5)]
    assert items == [{"i": i} for i in range(500)]


async def test_producer_never_runs_more_than_a_window_ahead(make_system) -> None:
    """A consumer that stops reading (without leaving) holds the producer at one
    window; with no credit for stream_credit_timeout the producer gives up."""
    host = await make_system(stream_window=8, stream_credit_timeout=0.5)
    probe = Probe()
    await host.spawn(Firehose, "held", probe=probe)
    stream = host.stream("firehose/held", StCount(n=10_000), timeout=5)
    assert await anext(stream) == {"i": 0}  # take one item, then stop reading
    await asyncio.wait_for(probe.closed.wait(), 5)
    assert probe.produced <= 8 + 1, f"producer ran {probe.produced} items ahead"
    await stream.aclose()


@pytest.mark.parametrize(("size", "most", "least"), [(20_000, 5, 2), (10, 256, 65)])
async def test_a_window_holds_about_its_bytes_of_large_items(
    make_system, size: int, most: int, least: int
) -> None:
    """The window is sized by the first item (and again at each credit): 20 KB
    items under a 100 KB window hold the producer at about five, where small ones
    run the whole 256 ahead. A whole stream of large ones still arrives in order."""
    host = await make_system(stream_window_bytes=100_000, stream_credit_timeout=0.5)
    probe = Probe()
    await host.spawn(Firehose, "big", probe=probe)
    stream = host.stream("firehose/big", StBig(n=10_000, size=size), timeout=5)
    assert (await anext(stream))["i"] == 0  # take one item, then stop reading
    await asyncio.wait_for(probe.closed.wait(), 5)  # no credit: the producer gives up
    assert least <= probe.produced <= most + 1, f"producer ran {probe.produced} items ahead"
    await stream.aclose()
    whole = host.stream("firehose/big", StBig(n=60, size=size), timeout=5)
    assert [item["i"] async for item in whole] == list(range(60))


def raw_stream_request(ns: str, address: str, message: dict[str, Any], intent: str) -> bytes:
    import msgpack

    from actorbus.codecs.envelope import new_id, now_ms

    return msgpack.packb(
        {
            "id": new_id(),
            "ts": now_ms(),
            "src": "raw",
            "dst": address,
            "intent": intent,
            "content": message,
            "context": {"stream": True},
        }
    )


@pytest.mark.parametrize("reader", ["nobody-subscribed", "subscribed-never-reads"])
async def test_a_stream_request_nobody_reads_frees_the_actor_within_seconds(
    system, raw_nc, ns: str, reader: str
) -> None:
    """A raw stream request whose reply subject nobody reads (no subscriber at all, or
    one that never answers the first frame) must not pin a one-at-a-time actor for
    stream_credit_timeout (300 s): the producer stops within stream_start_timeout."""
    probe = Probe()
    await system.spawn(Streamer, "pinned", probe=probe)
    inbox = raw_nc.new_inbox()
    if reader == "subscribed-never-reads":

        async def takes_never_answers(_msg: Any) -> None:
            pass

        await raw_nc.subscribe(inbox, cb=takes_never_answers)
    body = raw_stream_request(ns, "streamer/pinned", {}, "StForever")
    await raw_nc.publish(f"{ns}.a.streamer.pinned", body, reply=inbox)
    await raw_nc.flush()
    await asyncio.wait_for(probe.started.wait(), WAIT)
    loop = asyncio.get_running_loop()
    started = loop.time()
    # Handled in arrival order: this answer proves the stream request is over.
    assert await system.ask("streamer/pinned", {}, timeout=10) == {"plain": True}
    assert loop.time() - started < system.runtime.stream_settings.start_timeout + 1.5


async def test_a_consumer_that_grants_no_credit_does_not_pin_the_actor(make_system) -> None:
    """A consumer takes the first item and never grants credit: while the producer
    waits, the one-at-a-time actor answers its other messages at once."""
    host = await make_system(stream_window=4, stream_credit_timeout=300)
    probe = Probe()
    await host.spawn(Firehose, "stalled", probe=probe)
    stream = host.stream("firehose/stalled", StCount(n=1_000), timeout=5)
    assert await anext(stream) == {"i": 0}  # take one item, then stop reading
    await eventually(lambda: probe.produced >= 4, what="the producer used its window")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await host.ask("firehose/stalled", {}, intent="plain", timeout=5) == {"plain": True}
    assert loop.time() - started < 1.0
    assert probe.produced <= 4 + 1  # still held at one window: the stream waits
    await stream.aclose()
    await asyncio.wait_for(probe.closed.wait(), 5)


class RawFrames:
    """A consumer speaking the stream protocol itself over raw nats-py: it answers the
    first frame, grants credit, and keeps every frame's items as they arrived."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.frames: list[list[Any]] = []
        self.ended = asyncio.Event()

    async def on_frame(self, msg: Any) -> None:
        import msgpack

        body = msgpack.unpackb(msg.data)
        if msg.reply:
            await self.nc.publish(msg.reply, b"")
        if body["intent"] == "$end":
            self.ended.set()
            return
        single = [[body["intent"], body["content"]]]
        items = body["content"] if body["intent"] == "$items" else single
        self.frames.append([content for _intent, content in items])
        credit = (msg.headers or {}).get("Ab-Credit")
        if credit:
            await self.nc.publish(credit, b"")

    async def request(self, ns: str, address: str, n: int, headers: dict[str, str]) -> None:
        inbox = self.nc.new_inbox()
        await self.nc.subscribe(inbox, cb=self.on_frame)
        body = raw_stream_request(ns, address, {"n": n}, "StCount")
        subject = f"{ns}.a.{address.replace('/', '.')}"
        await self.nc.publish(subject, body, reply=inbox, headers=headers or None)
        await asyncio.wait_for(self.ended.wait(), WAIT)


@pytest.mark.parametrize("batch", ["32", None])
async def test_a_fast_producer_sends_its_items_in_few_frames_the_first_alone(
    system, raw_nc, ns: str, batch: str | None
) -> None:
    """A consumer that says it takes frames of items (``Ab-Batch``) gets a generator
    that never waits in few frames, the first holding one item (time to first item
    stays an ask's); one that does not say gets one item per frame, as before."""
    await system.spawn(Streamer, "fast")
    consumer = RawFrames(raw_nc)
    await consumer.request(ns, "streamer/fast", 300, {"Ab-Batch": batch} if batch else {})
    items = [item for frame in consumer.frames for item in frame]
    assert items == [{"i": i} for i in range(300)]
    assert len(consumer.frames[0]) == 1
    if batch:
        assert len(consumer.frames) <= 300 // 8, f"{len(consumer.frames)} frames"
        assert max(len(frame) for frame in consumer.frames) <= 32
    else:
        assert len(consumer.frames) == 300


async def test_a_producer_that_waits_between_items_sends_each_at_once(system) -> None:
    """Items of a generator that waits between them (tokens from a model) are never
    held back for a fuller frame: item i reaches the caller before i+1 is made."""
    taken = [asyncio.Event() for _ in range(5)]

    class Paced(Actor):
        type_name = "paced"

        @handler
        async def go(self, req: StCount) -> AsyncIterator[dict[str, int]]:
            for i in range(req.n):
                yield {"i": i}
                await taken[i].wait()  # the caller took item i

    await system.spawn(Paced, "p")
    got: list[Any] = []

    async def consume() -> None:
        async for item in system.stream("paced/p", StCount(n=5), timeout=WAIT):
            got.append(item)
            taken[item["i"]].set()

    await asyncio.wait_for(consume(), WAIT)
    assert got == [{"i": i} for i in range(5)]


async def test_a_frame_over_the_size_limit_goes_in_parts(system) -> None:
    """Twenty 100 KB items made at once are more than one message may carry: the
    frame is split, and every item arrives, in order."""

    class Bulky(Actor):
        type_name = "bulky"

        @handler
        async def go(self, req: StCount) -> AsyncIterator[dict[str, Any]]:
            for i in range(req.n):
                yield {"i": i, "blob": "x" * 100_000}

    await system.spawn(Bulky, "b")
    items = [x async for x in system.stream("bulky/b", StCount(n=20), timeout=WAIT)]
    assert [item["i"] for item in items] == list(range(20))


async def test_a_malformed_frame_of_items_is_a_protocol_error(system, raw_nc, ns: str) -> None:
    import msgpack

    from actorbus.codecs.errors import ProtocolError

    async def bad_producer(msg: Any) -> None:
        body = msgpack.packb({"id": "r1", "dst": "x", "intent": "$items", "content": [["dict"]]})
        await raw_nc.publish(msg.reply, body, headers={"Ab-Seq": "1"})

    await raw_nc.subscribe(f"{ns}.a.fake-batcher.f", cb=bad_producer)
    await barrier(raw_nc)
    with pytest.raises(ProtocolError, match="malformed frame of items"):
        await drain(system.stream("fake-batcher/f", {}, timeout=2), [])
