"""The request multiplexer's single-timer deadlines, against a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.msg import Msg

from actorbus.bus.client import Client
from actorbus.bus.requests import NoResponders, RequestMux, RequestTimeout


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


async def test_no_responders_is_reported_at_once(nc: Client) -> None:
    mux = RequestMux(nc, "_INBOX.mux-none")
    await mux.start()
    with pytest.raises(NoResponders):
        await asyncio.wait_for(mux.request("nobody.here", b"", None, 30.0), 5)
