"""The processes of ``bench/scale.py``, one role each (the first argument).

- ``activations URL NS KIND N``: hosts a lazily hosted (``lazy``) or keyed
  (``keyed``) type and receives N messages to N new keys (each activates an
  instance), then the same N keys again (the baseline: the same path without
  activation), then passivates them all. Says ``ready`` before each pass and a
  JSON line after it; publishes how many it handled on ``PROGRESS`` so that the
  sender keeps a bounded number in flight.
- ``sender URL NS TYPE N``: publishes N prebuilt envelopes to ``TYPE/k0..k{N-1}``
  (raw nats-py), at most ``WINDOW`` ahead of what the host handled.
- ``stream-host URL NS``: hosts ``Streamer`` (a stream of small items, and an
  ask) until its stdin closes.
- ``raw-publisher URL SUBJECT N``: on a line on stdin, publishes N small items
  to SUBJECT (raw nats-py pub/sub, the streaming baseline); again per line.
- ``fan-host URL NS INDEX ACTORS MESSAGES [named]``: spawns ACTORS actors
  subscribed to the topic ``fan.news`` (under keys given to them with
  ``named``) and says ``done`` once each got MESSAGES of them.
- ``fan-raw URL SUBJECT INDEX ACTORS MESSAGES``: the baseline, ACTORS raw
  nats-py subscriptions on SUBJECT in one connection.
- ``work-host URL NS INDEX ACTORS REPLICAS``: spawns ACTORS ``work`` actors
  (an ask that answers, a durable tell that counts), its durable streams with
  REPLICAS replicas; publishes how many durable messages it handled on
  ``PROGRESS``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import nats
from _child import READY, stop_when_stdin_closes
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.client import Client
from actorbus.codecs.envelope import new_id, now_ms

PROGRESS = "bench.scale.progress"
WINDOW = 20_000  # messages the sender may be ahead of the host
FAN_TOPIC = "fan.news"


class StreamRequest(BaseModel):
    n: int


class Item(BaseModel):
    i: int
    text: str


class Ping(BaseModel):
    pass


ITEM_TEXT = "x" * 32  # an item of about 50 bytes encoded, as a token or a row


class Streamer(Actor):
    type_name = "streamer"

    @handler
    async def items(self, req: StreamRequest) -> AsyncIterator[Item]:
        for i in range(req.n):
            yield Item(i=i, text=ITEM_TEXT)

    @handler
    async def ping(self, _: Ping) -> Ping:
        return Ping()


def say(line: str) -> None:
    print(line, flush=True)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- activations ------------------------------------------------------------------
class Counted:
    handled = 0
    expected = 0
    first = 0.0
    last = 0.0
    done: asyncio.Event


async def count_one() -> None:
    Counted.handled += 1
    if Counted.handled == 1:
        Counted.first = time.perf_counter()
    if Counted.handled == Counted.expected:
        Counted.last = time.perf_counter()
        Counted.done.set()


class Lazy(Actor):
    type_name = "scale-lazy"

    @handler
    async def hit(self, _: dict[str, Any]) -> None:
        await count_one()


class Keyed(Lazy):
    type_name = "scale-keyed"
    keyed = True


async def progress(nc: Any, stop: asyncio.Event, subject: str = PROGRESS) -> None:
    while not stop.is_set():
        await nc.publish(subject, str(Counted.handled).encode())
        await asyncio.sleep(0.02)


async def a_pass(n: int) -> tuple[float, float]:
    """Wait for the n messages of one pass: (messages/s, seconds)."""
    Counted.handled, Counted.expected, Counted.done = 0, n, asyncio.Event()
    say(READY)
    await Counted.done.wait()
    took = Counted.last - Counted.first
    return n / took if took > 0 else 0.0, took


def tracked_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


async def activations(url: str, ns: str, kind: str, n: int) -> None:
    cls = Keyed if kind == "keyed" else Lazy
    async with ActorSystem.connect(url, namespace=ns, registry=False) as system:
        await system.register(cls)
        stop = asyncio.Event()
        reporter = asyncio.create_task(progress(system.nc, stop))
        try:
            rss0, objects0 = rss_bytes(), tracked_objects()
            rate, took = await a_pass(n)
            rss1, objects1 = rss_bytes(), tracked_objects()
            live = len(system.local_actors())
            say(
                json.dumps(
                    {
                        "phase": "activate",
                        "per_s": rate,
                        "seconds": took,
                        "live": live,
                        "rss_per_activation": (rss1 - rss0) / n,
                        "objects_per_activation": (objects1 - objects0) / n,
                    }
                )
            )
            rate, took = await a_pass(n)
            say(json.dumps({"phase": "warm", "per_s": rate, "seconds": took}))
            # Passivation on: the sweep stops every instance idle for a second.
            # What it returns is counted from just before it.
            rss1, objects1 = rss_bytes(), tracked_objects()
            cls.idle_timeout = 1.0
            started = time.perf_counter()
            system.hosting.virtual.watch_idle()
            # (Not local_actors(): a dict of a million addresses made ten times a
            # second would keep this process's loop busy beside the sweep.)
            while system.hosting.residents.cells:  # noqa: ASYNC110 (the sweep's progress is the figure)
                await asyncio.sleep(0.1)
            took = time.perf_counter() - started - cls.idle_timeout
            objects2 = tracked_objects()  # collected first: garbage waiting is not kept
            rss2 = rss_bytes()
            say(
                json.dumps(
                    {
                        "phase": "passivate",
                        "per_s": n / took if took > 0 else 0.0,
                        "seconds": took,
                        "objects_returned": (objects1 - objects2) / max(1, objects1 - objects0),
                        "rss_returned": (rss1 - rss2) / max(1, rss1 - rss0),
                        "rss_per_activation_after": (rss2 - rss0) / n,
                    }
                )
            )
        finally:
            stop.set()
            await reporter


async def sender(url: str, ns: str, type_name: str, n: int) -> None:
    bodies = [
        (
            f"{ns}.a.{type_name}.k{k}",
            msgpack.packb(
                {
                    "id": new_id(),
                    "ts": now_ms(),
                    "src": "bench",
                    "dst": f"{type_name}/k{k}",
                    "intent": "dict",
                    "content": {},
                    "context": {},
                }
            ),
        )
        for k in range(n)
    ]
    # actorbus's client: nats-py's own flush() writes its PING ahead of the
    # publishes still in the buffer, so a close right after it could drop the
    # last few thousand of them (a pass then waited for messages never sent).
    nc = Client()
    await nc.connect(url)
    handled = 0
    moved = asyncio.Event()

    async def on_progress(msg: Any) -> None:
        nonlocal handled
        handled = max(handled, int(msg.data))
        moved.set()

    await nc.subscribe(PROGRESS, cb=on_progress)
    for sent, (subject, body) in enumerate(bodies):
        while sent - handled >= WINDOW:
            moved.clear()
            await moved.wait()
        await nc.publish(subject, body)
    await nc.flush()
    await nc.close()


# -- streaming ---------------------------------------------------------------------
async def stream_host(url: str, ns: str) -> None:
    stop = asyncio.Event()
    stop_when_stdin_closes(asyncio.get_running_loop(), stop)
    async with ActorSystem.connect(url, namespace=ns, registry=False) as system:
        await system.spawn(Streamer, "1")
        say(READY)
        await stop.wait()


async def raw_publisher(url: str, subject: str, n: int) -> None:
    """Publish n items per line read on stdin; stop when stdin closes."""
    nc = await nats.connect(url)
    body = msgpack.packb({"i": 0, "text": ITEM_TEXT})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    say(READY)
    while await reader.readline():
        for _ in range(n):
            await nc.publish(subject, body)
        await nc.flush()
    await nc.close()


# -- fan-out -----------------------------------------------------------------------
class FanOut(Actor):
    type_name = "fan"
    received = 0
    expected = 0
    done: asyncio.Event

    @handler(topic=FAN_TOPIC)
    async def news(self, _: dict[str, Any]) -> None:
        FanOut.received += 1
        if FanOut.received == FanOut.expected:
            FanOut.done.set()


async def fan_host(url: str, ns: str, index: int, actors: int, messages: int, named: bool) -> None:
    """``named``: each actor under a key given to it, which another process could
    host too (a subscription each, in its queue group); else under a generated
    one (one subscription shared by all of them, ``actors/topic_fanout.py``)."""
    FanOut.expected, FanOut.done = actors * messages, asyncio.Event()
    async with ActorSystem.connect(url, namespace=ns, registry=False) as system:
        for j in range(actors):
            await system.spawn(FanOut, f"{index}-{j}" if named else None)
        await system.nc.flush()
        say(READY)
        await FanOut.done.wait()
        say("done")


async def fan_raw(url: str, subject: str, actors: int, messages: int) -> None:
    expected, received, done = actors * messages, 0, asyncio.Event()

    async def on_msg(msg: Any) -> None:
        nonlocal received
        msgpack.unpackb(msg.data)  # as a subscriber that reads what it gets
        received += 1
        if received == expected:
            done.set()

    nc = await nats.connect(url)
    for _ in range(actors):
        await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=1_000_000)
    await nc.flush()
    say(READY)
    await done.wait()
    say("done")
    await nc.close()


# -- cluster ------------------------------------------------------------------------
class Job(BaseModel):
    n: int


class Tally(BaseModel):
    n: int


class Work(Actor):
    type_name = "work"
    durable = False  # asks; the durable handler says so itself

    @handler
    async def answer(self, job: Job) -> Job:
        return job

    @handler(durable=True)
    async def record(self, _: Tally) -> None:
        Counted.handled += 1


async def work_host(url: str, ns: str, index: int, actors: int, replicas: int) -> None:
    from actorbus.bus.jetstream import DurableSettings

    stop = asyncio.Event()
    stop_when_stdin_closes(asyncio.get_running_loop(), stop)
    durable = DurableSettings(replicas=replicas)
    servers = url.split(",")
    async with ActorSystem.connect(
        servers, namespace=ns, registry=False, durable=durable
    ) as system:
        for j in range(actors):
            await system.spawn(Work, f"h{index}-{j}")
        reporter = asyncio.create_task(progress(system.nc, stop, f"{PROGRESS}.{index}"))
        say(READY)
        await stop.wait()
        await reporter


def main(argv: list[str]) -> None:
    role, url, *rest = argv
    if role == "activations":
        run = activations(url, rest[0], rest[1], int(rest[2]))
    elif role == "sender":
        run = sender(url, rest[0], rest[1], int(rest[2]))
    elif role == "stream-host":
        run = stream_host(url, rest[0])
    elif role == "raw-publisher":
        run = raw_publisher(url, rest[0], int(rest[1]))
    elif role == "fan-host":
        named = rest[4:] == ["named"]
        run = fan_host(url, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), named)
    elif role == "fan-raw":
        run = fan_raw(url, rest[0], int(rest[2]), int(rest[3]))
    elif role == "work-host":
        run = work_host(url, rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
    else:
        raise SystemExit(f"unknown role {role!r}")
    asyncio.run(run)


if __name__ == "__main__":
    main(sys.argv[1:])
