"""The two sides of bench/durable.py: raw nats-py JetStream and actorbus durable delivery.

Both sides offer the same four operations, so one phase runner measures either:

- ``send(phase, entries, lazy, sent)``: every entry into JetStream with at most
  ``window`` publishes in flight, recording when each one was admitted and when
  its publish-ack came back;
- ``start_reader(phase, probe, lazy)``: start reading that phase's messages; the
  reader reports each handled message to ``probe``;
- ``stop_reader()`` and ``close()``.

``lazy`` messages are spread over ``keys`` keys and read by one consumer with
``type_window`` messages in flight; otherwise they go to one key and are read one
at a time, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Sequence
from typing import Any, Protocol

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, StorageType, StreamConfig
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.jetstream import (
    DurableSettings,
    dlq_stream_name,
    idempotency_bucket,
    readers_bucket,
    stats_bucket,
    stream_name,
)

clock = time.perf_counter_ns
FETCH_WAIT = 0.5  # seconds a raw fetch waits for work (actorbus's reader uses the same)


class Entry(BaseModel):
    """The payload both sides send: a small pydantic model."""

    n: int
    text: str


def make_entries(n: int, text_len: int) -> list[Entry]:
    text = ("durable-bench-" * (text_len // 14 + 1))[:text_len]
    return [Entry(n=i, text=text) for i in range(n)]


class Sent:
    """When each message was admitted (a slot in flight was free) and stored (acked)."""

    def __init__(self, n: int) -> None:
        self.admitted = [0] * n
        self.stored = [0] * n
        self.errors: list[str] = []


class Probe:
    """What a reader handled: the time of each message, duplicates, order per key."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.handled_at = [0] * n
        self.count = 0
        self.duplicates = 0
        self.out_of_order = 0  # handled before a lower number of the same key
        self.first = 0
        self.last = 0
        self.done = asyncio.Event()
        self._last_of: dict[str, int] = {}

    def handled(self, key: str, i: int) -> None:
        now = clock()
        if self.handled_at[i]:
            self.duplicates += 1
            return
        self.handled_at[i] = now
        if i < self._last_of.get(key, -1):
            self.out_of_order += 1
        self._last_of[key] = i
        self.count += 1
        if self.count == 1:
            self.first = now
        if self.count == self.n:
            self.last = now
            self.done.set()


class Side(Protocol):
    name: str

    async def send(self, phase: str, entries: Sequence[Entry], lazy: bool, sent: Sent) -> None: ...

    async def start_reader(self, phase: str, probe: Probe, lazy: bool) -> None: ...

    async def stop_reader(self) -> None: ...

    async def close(self) -> None: ...


def key_for(i: int, lazy: bool, keys: int) -> str:
    return f"k{i % keys}" if lazy else "1"


# -- raw nats-py ---------------------------------------------------------------
class RawSide:
    """Plain nats-py: ``js.publish_async`` (pending bound ``window``), pull consumers.

    The stream mirrors actorbus's (file storage, duplicate window, max age) and every
    message carries a ``Nats-Msg-Id``, so the server does the same work for both.
    Payloads are ``Entry.model_dump_json()``; readers validate them with
    ``Entry.model_validate_json`` before they ack.
    """

    name = "raw"

    def __init__(self, nc: NatsClient, tag: str, window: int, keys: int, type_window: int) -> None:
        self.nc = nc
        self.js = nc.jetstream(publish_async_max_pending=window)
        self.tag = tag
        self.stream = f"raw-{tag}"
        self.prefix = f"raw.{tag}"
        self.window = window
        self.keys = keys
        self.type_window = type_window
        self._reader: asyncio.Task[None] | None = None
        self._psub: nats.js.JetStreamContext.PullSubscription | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, url: str, tag: str, window: int, keys: int, type_window: int) -> RawSide:
        nc = await nats.connect(url, name=f"bench-durable-raw-{tag}")
        side = cls(nc, tag, window, keys, type_window)
        s = DurableSettings()
        await side.js.add_stream(
            StreamConfig(
                name=side.stream,
                subjects=[f"{side.prefix}.>"],
                storage=StorageType.FILE,
                max_age=s.max_age + s.retention_grace,
                duplicate_window=s.duplicate_window,
                discard=DiscardPolicy.OLD,
            )
        )
        return side

    async def send(self, phase: str, entries: Sequence[Entry], lazy: bool, sent: Sent) -> None:
        js, keys, subject = self.js, self.keys, f"{self.prefix}.{phase}."
        slots = asyncio.Semaphore(self.window)
        all_acked = asyncio.Event()
        remaining = len(entries)

        def acked(i: int, fut: asyncio.Future[Any]) -> None:
            nonlocal remaining
            sent.stored[i] = clock()
            slots.release()
            if fut.cancelled():
                sent.errors.append("cancelled")
            elif (exc := fut.exception()) is not None:
                sent.errors.append(repr(exc))
            remaining -= 1
            if remaining == 0:
                all_acked.set()

        for i, entry in enumerate(entries):
            await slots.acquire()
            sent.admitted[i] = clock()
            fut = await js.publish_async(
                subject + key_for(i, lazy, keys),
                entry.model_dump_json().encode(),
                headers={"Nats-Msg-Id": f"{self.tag}-{phase}-{i}"},
            )
            fut.add_done_callback(functools.partial(acked, i))
        if entries:
            await all_acked.wait()

    async def start_reader(self, phase: str, probe: Probe, lazy: bool) -> None:
        in_flight = self.type_window if lazy else 1
        self._psub = await self.js.pull_subscribe(
            f"{self.prefix}.{phase}.{'*' if lazy else '1'}",
            durable=f"c-{phase}",
            stream=self.stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=DurableSettings().ack_wait,
                max_ack_pending=in_flight,
            ),
        )
        run = self._read_concurrent(probe, in_flight) if lazy else self._read_in_order(probe)
        self._reader = asyncio.create_task(run)

    async def _fetch(self, batch: int) -> list[Msg]:
        assert self._psub is not None
        try:
            return await self._psub.fetch(batch, timeout=FETCH_WAIT)
        except TimeoutError:  # nats.errors.TimeoutError, or asyncio's from a racing expiry
            return []

    async def _read_in_order(self, probe: Probe) -> None:
        """One message in flight: fetch one, validate, ack, next."""
        while not probe.done.is_set():
            for msg in await self._fetch(1):
                entry = Entry.model_validate_json(msg.data)
                probe.handled(msg.subject.rsplit(".", 1)[1], entry.n)
                await msg.ack()

    async def _read_concurrent(self, probe: Probe, window: int) -> None:
        """Up to ``window`` messages in flight, each handled (validated, acked) in its
        own task; a fetch asks for as many as there are free slots."""
        slots = asyncio.Semaphore(window)

        async def one(msg: Msg) -> None:
            try:
                entry = Entry.model_validate_json(msg.data)
                probe.handled(msg.subject.rsplit(".", 1)[1], entry.n)
                await msg.ack()
            finally:
                slots.release()

        while not probe.done.is_set():
            await slots.acquire()
            taken = 1
            while not slots.locked():
                await slots.acquire()  # free: returns at once
                taken += 1
            batch = await self._fetch(taken)
            for _ in range(taken - len(batch)):
                slots.release()
            for msg in batch:
                task = asyncio.create_task(one(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
            self._psub = None

    async def close(self) -> None:
        try:
            await self.stop_reader()
            with contextlib.suppress(Exception):
                await self.js.delete_stream(self.stream)
        finally:
            await self.nc.close()


# -- actorbus ------------------------------------------------------------------
class Sink(Actor):
    """A spawned durable actor: one consumer per address, one message in flight."""

    durable = True

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    @handler
    async def take(self, e: Entry) -> None:
        self.probe.handled(self.key, e.n)


class LazySink(Actor):
    """The same, hosted lazily (``register``): one consumer for all keys."""

    type_name = "lazy-sink"
    durable = True

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    @handler
    async def take(self, e: Entry) -> None:
        self.probe.handled(self.key, e.n)


class ActorbusSide:
    """actorbus: ``system.tell(address, entry, durable=True)`` from ``window`` workers
    (each call returns once JetStream stored the message), a spawned ``Sink`` or a
    registered ``LazySink`` reading them. One fresh namespace per instance."""

    name = "actorbus"

    def __init__(self, system: ActorSystem, window: int, keys: int) -> None:
        self.system = system
        self.window = window
        self.keys = keys
        self._spawned: str | None = None

    @classmethod
    async def open(
        cls, url: str, namespace: str, window: int, keys: int, type_window: int
    ) -> ActorbusSide:
        system = await ActorSystem.connect(
            url,
            namespace=namespace,
            name=f"bench-durable-{namespace}",
            durable=DurableSettings(type_window=type_window),
        )
        # streams and buckets exist before anything is timed
        await system.durable_ready("sink", "lazy-sink")
        return cls(system, window, keys)

    def _address(self, phase: str, i: int, lazy: bool) -> str:
        return f"lazy-sink/{key_for(i, True, self.keys)}" if lazy else f"sink/{phase}"

    async def send(self, phase: str, entries: Sequence[Entry], lazy: bool, sent: Sent) -> None:
        system = self.system
        addresses = [self._address(phase, i, lazy) for i in range(len(entries))]
        todo = iter(range(len(entries)))

        async def worker() -> None:
            for i in todo:  # shared: each index is taken by exactly one worker
                sent.admitted[i] = clock()
                try:
                    await system.tell(addresses[i], entries[i], durable=True)
                except Exception as exc:
                    sent.errors.append(repr(exc))
                sent.stored[i] = clock()

        await asyncio.gather(*(worker() for _ in range(min(self.window, len(entries)))))

    async def start_reader(self, phase: str, probe: Probe, lazy: bool) -> None:
        if lazy:
            await self.system.register(LazySink, probe=probe)
        else:
            ref = await self.system.spawn(Sink, phase, probe=probe)
            self._spawned = ref.address

    async def stop_reader(self) -> None:
        # A registered type stays until the system closes (there is no unregister).
        if self._spawned is not None:
            await self.system.stop_actor(self._spawned)
            self._spawned = None

    async def close(self) -> None:
        system = self.system
        ns = system.namespace
        try:
            await self.stop_reader()
        finally:
            await system.close(timeout=5.0)
        # Leave the server as lean as the raw side leaves it.
        nc = await nats.connect(system.url, name="bench-durable-cleanup")
        try:
            js = nc.jetstream()
            names = (stream_name(ns, "sink"), stream_name(ns, "lazy-sink"), dlq_stream_name(ns))
            for name in names:
                with contextlib.suppress(Exception):
                    await js.delete_stream(name)
            for bucket in (idempotency_bucket(ns), stats_bucket(ns), readers_bucket(ns)):
                with contextlib.suppress(Exception):
                    await js.delete_key_value(bucket)
        finally:
            await nc.close()
