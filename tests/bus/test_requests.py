"""The request multiplexer's single-timer deadlines, against a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _wire import BlockingSubscriber
from nats.aio.msg import Msg

from actorbus.bus.client import Client
from actorbus.bus.requests import NoResponders, RequestMux, RequestTimeout, StreamFrames


@pytest.fixture
async def nc(nats_server: Any) -> Any:
    client = Client()
    await client.connect(nats_server.url)
    yield client
    await client.close()


async def test_deadlines_fire_in_order_whatever_order_they_were_set(nc: Client) -> None:
    mux = RequestMux(nc, "_INBOX.mux-order")
    await mux.start()

    async def silent(msg: Msg) -> None:  # takes requests, never answers
        return None

    await nc.subscribe("silent.order", cb=silent)
    await nc.flush()
    finished: list[float] = []

    async def one(timeout: float) -> None:
        with pytest.raises(RequestTimeout):
            await mux.request("silent.order", b"", None, timeout)
        finished.append(timeout)

    await asyncio.wait_for(asyncio.gather(*(one(t) for t in (0.3, 0.05, 0.15))), 5)
    assert finished == [0.05, 0.15, 0.3]
    assert not mux._pending


async def test_answered_requests_do_not_pile_up_in_the_deadline_heap(nc: Client) -> None:
    mux = RequestMux(nc, "_INBOX.mux-heap")
    await mux.start()

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("echo.heap", cb=echo)
    await nc.flush()
    for i in range(3000):
        reply = await mux.request("echo.heap", str(i).encode(), None, 30.0)
        assert reply.data == str(i).encode()
    assert not mux._pending
    assert len(mux._deadlines) <= 1024 + 1


async def test_a_request_alone_in_flight_is_on_the_wire_before_the_loop_runs_again(
    nats_server: Any, nc: Client
) -> None:
    """One request in flight is written at once; with others in flight it waits
    for the flusher, which writes them together. A check queued right behind
    the requesting task's first step reads the wire before the flusher's turn."""
    mux = RequestMux(nc, "_INBOX.mux-alone")
    await mux.start()
    sub = BlockingSubscriber(nats_server.url, "alone.>")
    loop = asyncio.get_running_loop()
    try:
        seen: list[bytes | None] = []

        def read_the_wire(timeout: float) -> None:  # holds the loop: no flusher meanwhile
            seen.append(sub.next_body(timeout))

        alone = asyncio.ensure_future(mux.request("alone.one", b"alone", None, 0.2))
        loop.call_soon(read_the_wire, 5.0)
        with pytest.raises(RequestTimeout):
            await alone
        assert seen == [b"alone"]

        first = asyncio.ensure_future(mux.request("alone.many", b"first", None, 0.5))
        await asyncio.sleep(0)  # its first step: sent (alone, so at once)
        assert sub.next_body() == b"first"
        second = asyncio.ensure_future(mux.request("alone.many", b"second", None, 0.5))
        loop.call_soon(read_the_wire, 0.2)
        await asyncio.gather(first, second, return_exceptions=True)
        assert seen[1] is None  # two in flight: left to the flusher
        assert sub.next_body() == b"second"
    finally:
        sub.close()


async def test_no_responders_is_reported_at_once(nc: Client) -> None:
    mux = RequestMux(nc, "_INBOX.mux-none")
    await mux.start()
    with pytest.raises(NoResponders):
        await asyncio.wait_for(mux.request("nobody.here", b"", None, 30.0), 5)


async def test_stream_frames_come_in_order_and_a_silent_stream_times_out() -> None:
    frames = StreamFrames()
    first, second = Msg(_client=None, subject="a"), Msg(_client=None, subject="b")  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, frames.put, first)
    assert await frames.get(5.0) is first  # waited for
    frames.put(second)
    lost = ConnectionError("gone")
    frames.put(lost)
    assert await frames.get(0.0) is second  # already there: no wait, whatever the timeout
    assert await frames.get(0.0) is lost
    started = loop.time()
    with pytest.raises(TimeoutError):
        await frames.get(0.05)
    assert 0.04 <= loop.time() - started < 2.0
    frames.put(first)  # a frame after a timeout is still there for the next read
    assert await frames.get(1.0) is first


async def test_a_cancelled_read_of_stream_frames_leaves_them_usable() -> None:
    frames = StreamFrames()
    reader = asyncio.create_task(frames.get(30.0))
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    frames.put(ConnectionError("late"))  # nobody waits: kept, not handed to a dead future
    assert isinstance(await frames.get(0.0), ConnectionError)
