"""The namespace's durable streams and buckets, made on first use, and made again
when a broker comes back without them.

Nothing durable exists until something needs it: the first durable send, host
or reminder makes the namespace's dead-letter stream and buckets, then each
actor type's own queue and reminder stream. Making them is idempotent on the
server too, so two processes racing to do it both succeed. A broker back on a
fresh store lost them all: :meth:`DurableStreams.restore_if_lost` makes again
what this process had made, and :meth:`DurableStreams.restore` does it for
whatever found one gone (at most every few seconds each). The runtime holds one
of these; it is the only part of the runtime that changes after it opens.
"""

from __future__ import annotations

import asyncio
import logging
import time

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from actorbus.bus.jetstream import (
    DurableSettings,
    DurableStores,
    dlq_stream_name,
    ensure_queue,
    ensure_streams,
    readers_bucket,
    stream_name,
    topics_stream_name,
)
from actorbus.bus.leases import LeaseBucket
from actorbus.bus.schedules import ensure_reminders, reminder_stream_name
from actorbus.bus.subjects import Subjects
from actorbus.codecs.errors import ActorBusError

log = logging.getLogger("actorbus.system")
_RESTORE_EVERY = 2.0  # seconds between attempts to make lost durable streams again


class DurableStreams:
    """One namespace's durable streams and buckets, as this process made them."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, settings: DurableSettings) -> None:
        self.js = js
        self.subjects = subjects
        self.settings = settings
        self._stores: DurableStores | None = None
        self._lock = asyncio.Lock()
        self._queues: dict[str, bool] = {}  # types whose durable stream is made: by a host?
        self._reminders: set[str] = set()  # types whose reminder stream is made
        self._restored_at: dict[str | None, float] = {}
        self._reader_leases: LeaseBucket | None = None

    @property
    def stores(self) -> DurableStores:
        """The namespace's buckets (handled keys, counters, attempts), once made."""
        if self._stores is None:
            raise ActorBusError("the durable stores are not made yet (await ready() first)")
        return self._stores

    async def ready(self) -> DurableStores:
        """Make the namespace's durable streams and buckets once."""
        if self._stores is not None:
            return self._stores
        async with self._lock:
            if self._stores is None:
                try:
                    self._stores = await ensure_streams(self.js, self.subjects, self.settings)
                except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
                    raise ActorBusError(
                        "durable delivery needs JetStream, which this bus does not offer (a "
                        "nats-server started with -js, as ActorSystem.start() does; the "
                        "in-process bus has none)"
                    ) from None
            return self._stores

    async def queue(self, type_: str, *, host: bool = False) -> None:
        """Make a type's durable stream once (``host``: also to this system's
        settings), after the namespace's streams and buckets."""
        await self.ready()
        if self._queues.get(type_) in (True, host):
            return
        await ensure_queue(self.js, self.subjects, type_, self.settings, host=host)
        self._queues[type_] = host or self._queues.get(type_, False)

    async def unread(self, type_: str) -> int:
        """How many messages ``type_``'s durable stream holds while it has no
        consumer to read them (0 when there is no stream, or a consumer)."""
        try:
            info = await self.js.stream_info(stream_name(self.subjects.ns, type_))
        except nats.js.errors.NotFoundError:
            return 0
        return 0 if info.state.consumer_count else info.state.messages

    async def reminder_stream(self, type_: str) -> None:
        """Make a type's reminder stream once (``bus/schedules.py``)."""
        if type_ in self._reminders:
            return
        await self.ready()
        await ensure_reminders(self.js, self.subjects, type_, self.settings)
        self._reminders.add(type_)

    async def restore(self, type_: str | None = None) -> None:
        """Make the namespace's streams and buckets (and ``type_``'s stream) again,
        at most every few seconds each: something found them gone (a broker
        restarted on a fresh store, an operator deleted one). Creating them is
        idempotent, so a false alarm costs a few calls."""
        now = time.monotonic()
        if now - self._restored_at.get(type_, float("-inf")) < _RESTORE_EVERY:
            return
        self._restored_at[type_] = now
        if self._stores is None:
            await self.ready()
        else:  # made again beside the ones in use, which stay usable until then: a
            async with self._lock:  # failover's election can take seconds, or fail
                self._stores = await ensure_streams(self.js, self.subjects, self.settings)
        if type_ is not None:
            host = self._queues.pop(type_, False)
            await self.queue(type_, host=host)

    def stream_of(self, subject: str) -> str:
        """The stream that stores ``subject`` (a type's durable queue, its
        reminders, else kept topics)."""
        ns = self.subjects.ns
        type_ = self.subjects.durable_type_of(subject)
        if type_ is not None:
            return stream_name(ns, type_)
        type_ = self.subjects.reminder_type_of(subject)
        if type_ is not None:
            return reminder_stream_name(ns, type_)
        return topics_stream_name(ns)

    async def restore_store_of(self, subject: str) -> None:
        """:meth:`restore` for the stream that stores ``subject``."""
        reminders = self.subjects.reminder_type_of(subject)
        if reminders is not None:
            self._reminders.discard(reminders)
            await self.reminder_stream(reminders)
            return
        await self.restore(self.subjects.durable_type_of(subject))

    async def restore_if_lost(self) -> None:
        """After a reconnect: if the broker lost the streams, make again every one
        this process had made, then the readers' leases bucket."""
        if self._stores is not None:
            try:
                await self.js.stream_info(dlq_stream_name(self.subjects.ns))
            except nats.js.errors.NotFoundError:
                log.warning("the durable streams are gone (the broker lost its store?): remaking")
                self._stores = None
                queues, self._queues = self._queues, {}
                self._reminders.clear()
                for type_, host in queues.items():
                    await self.queue(type_, host=host)
                await self.ready()
        if self._reader_leases is not None:
            await self._reader_leases.restore_if_lost(self.js)

    async def reader_leases(self) -> LeaseBucket:
        """The leases that pick one reader process per lazily hosted durable type."""
        if self._reader_leases is None:
            s = self.settings
            self._reader_leases = await LeaseBucket.open(
                self.js, readers_bucket(self.subjects.ns), s.reader_lease_ttl, replicas=s.replicas
            )
        return self._reader_leases
