"""The runtime kernel: what every part of the actor runtime needs, and nothing more.

Cells, durable readers, virtual actors, streams, dead letters and history are
given a :class:`Runtime`, not the ``ActorSystem``: the connection and its
JetStream context, the request mux, the subject scheme, size limits and time
outs, the reply writer, the durable settings and stores, mailbox accounting,
system events and task spawning. ``ActorSystem`` builds one and is a facade
over it; nothing here knows about hosting or sending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from actorbus.actors.config import SystemConfig
from actorbus.actors.failure_log import FailureLog
from actorbus.actors.intake import Intake
from actorbus.actors.mailbox import Mailboxes
from actorbus.actors.pipeline import encode_event
from actorbus.actors.replies import Replies
from actorbus.bus.jetstream import (
    dlq_stream_name,
    ensure_queue,
    ensure_streams,
    readers_bucket,
    stream_name,
    topics_stream_name,
)
from actorbus.bus.leases import LeaseBucket
from actorbus.bus.requests import RequestMux
from actorbus.bus.schedules import ensure_reminders, reminder_stream_name
from actorbus.bus.subjects import Subjects
from actorbus.bus.tasks import backoff_delay, spawn
from actorbus.bus.transport import Messaging, Transport
from actorbus.codecs.envelope import new_id
from actorbus.codecs.errors import ActorBusError, StateError
from actorbus.security.stage import SecurityStage
from actorbus.state.kv_store import KeyValueStateStore
from actorbus.state.store import StateStore
from actorbus.telemetry import Telemetry

log = logging.getLogger("actorbus.system")
_RESTORE_EVERY = 2.0  # seconds between attempts to make lost durable streams again


class Runtime:
    """One process's shared runtime state on one NATS connection."""

    def __init__(
        self,
        conn: Transport,
        config: SystemConfig,
        security: SecurityStage,
        telemetry: Telemetry,
    ) -> None:
        self.config = config
        self.conn = conn
        self.nc: Messaging = conn.nc
        self.js: JetStreamContext = self.nc.jetstream()
        self.namespace = config.namespace
        self.subjects = Subjects(config.namespace)
        self.encoding = config.encoding
        self.limits = config.limits
        self.default_timeout = config.default_timeout
        self.debug = config.debug
        self.stream_settings = config.streams
        self.durable_settings = config.durable
        self.state_settings = config.state
        self._state_store: StateStore | None = None  # opened on first use
        self.system_id = new_id()
        self.security = security  # the pipeline's seal and open stages
        self.telemetry = telemetry  # what its sends and turns record
        self.replies = Replies(conn, config.limits, config.debug)
        self.intake = Intake(config.limits, security, self.replies)
        self.mux = RequestMux(self.nc, f"{conn.options.inbox_prefix}.{self.system_id}")
        conn.on_lost.append(self.mux.fail_all)
        self.mailboxes = Mailboxes(self._refuse, self.emit_event, telemetry.metrics)
        conn.on_slow_consumer.append(self.mailboxes.on_overflow)
        self.handled: KeyValue | None = None  # idempotency keys already handled
        self.stats: KeyValue | None = None  # counters shared by every reader
        self.attempts: KeyValue | None = None  # handler starts of redelivered messages
        self.tasks: set[asyncio.Task[Any]] = set()
        self.failures = FailureLog()  # handler failures, logged with their tracebacks
        self._durable_lock = asyncio.Lock()
        self._durable_ok = False
        self._queues: dict[str, bool] = {}  # types whose durable stream is made: by a host?
        self._reminder_streams: set[str] = set()  # types whose reminder stream is made
        self._restored_at: dict[str | None, float] = {}
        self._reader_leases: LeaseBucket | None = None
        # What makes again, after a reconnect, what a broker back on a fresh store
        # lost (buckets, records, credentials); each checks its own first.
        self.restorers: list[Callable[[], Awaitable[None]]] = [
            self._restore_durable,
            self._restore_leases,
            security.restore_if_lost,
        ]
        conn.on_reconnect.append(self._reconnected)

    @property
    def client_address(self) -> str:
        """The ``src`` of this system's own sends: bound to its key when it has one,
        so that no other member's credential covers it."""
        return self.security.sender_address(self.system_id)

    # -- durable stores ------------------------------------------------------
    async def durable_ready(self) -> None:
        """Create the durable streams and buckets once (idempotent on the server too)."""
        if self._durable_ok:
            return
        async with self._durable_lock:
            if not self._durable_ok:
                try:
                    stores = await ensure_streams(self.js, self.subjects, self.durable_settings)
                    self.handled, self.stats = stores.handled, stores.stats
                    self.attempts = stores.attempts
                except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
                    raise ActorBusError(
                        "durable delivery needs JetStream, which this bus does not offer (a "
                        "nats-server started with -js, as ActorSystem.start() does; the "
                        "in-process bus has none)"
                    ) from None
                self._durable_ok = True

    async def durable_queue(self, type_: str, *, host: bool = False) -> None:
        """Make a type's durable stream once (``host``: also to this system's settings),
        after the namespace's streams and buckets."""
        await self.durable_ready()
        if self._queues.get(type_) in (True, host):
            return
        await ensure_queue(self.js, self.subjects, type_, self.durable_settings, host=host)
        self._queues[type_] = host or self._queues.get(type_, False)

    async def reminder_stream(self, type_: str) -> None:
        """Make a type's reminder stream once (``bus/schedules.py``)."""
        if type_ in self._reminder_streams:
            return
        await self.durable_ready()
        await ensure_reminders(self.js, self.subjects, type_, self.durable_settings)
        self._reminder_streams.add(type_)

    async def durable_restore(self, type_: str | None = None) -> None:
        """Make the namespace's durable streams and buckets (and ``type_``'s stream)
        again, at most every few seconds each: something found them gone (a broker
        restarted on a fresh store, an operator deleted one). Creating them is
        idempotent, so a false alarm costs a few calls."""
        now = time.monotonic()
        if now - self._restored_at.get(type_, float("-inf")) < _RESTORE_EVERY:
            return
        self._restored_at[type_] = now
        self._durable_ok = False
        await self.durable_ready()
        if type_ is not None:
            host = self._queues.pop(type_, False)
            await self.durable_queue(type_, host=host)

    def stream_of(self, subject: str) -> str:
        """The stream that stores ``subject`` (a type's durable queue, else kept topics)."""
        type_ = self.subjects.durable_type_of(subject)
        if type_ is not None:
            return stream_name(self.namespace, type_)
        type_ = self.subjects.reminder_type_of(subject)
        if type_ is not None:
            return reminder_stream_name(self.namespace, type_)
        return topics_stream_name(self.namespace)

    async def restore_store_of(self, subject: str) -> None:
        """:meth:`durable_restore` for the stream that stores ``subject``."""
        reminders = self.subjects.reminder_type_of(subject)
        if reminders is not None:
            self._reminder_streams.discard(reminders)
            await self.reminder_stream(reminders)
            return
        await self.durable_restore(self.subjects.durable_type_of(subject))

    async def _reconnected(self) -> None:
        self.spawn_task(self._restore_lost(), "restoring what the broker lost")

    async def _restore_lost(self) -> None:
        """After a reconnect the server may be a new one with a fresh store (or its
        JetStream may still be starting): each part makes again what it lost,
        tried again with backoff for up to ``start_timeout``."""
        for restore in list(self.restorers):
            deadline = time.monotonic() + self.durable_settings.start_timeout
            attempt = 0
            while True:
                try:
                    await restore()
                    break
                except Exception as exc:
                    attempt += 1
                    if time.monotonic() > deadline:
                        log.error("after a reconnect, %s failed: %r", restore.__qualname__, exc)
                        break
                    await asyncio.sleep(backoff_delay(attempt, 0.1, 2.0))

    async def _restore_durable(self) -> None:
        if not self._durable_ok:
            return
        try:
            await self.js.stream_info(dlq_stream_name(self.namespace))
        except nats.js.errors.NotFoundError:
            log.warning("the durable streams are gone (the broker lost its store?): making them")
            self._durable_ok = False
            queues, self._queues = self._queues, {}
            self._reminder_streams.clear()
            for type_, host in queues.items():
                await self.durable_queue(type_, host=host)
            await self.durable_ready()

    async def _restore_leases(self) -> None:
        if self._reader_leases is not None:
            await self._reader_leases.restore_if_lost(self.js)

    # -- actor state --------------------------------------------------------
    def state_store(self) -> StateStore:
        """Where declared actor state is kept: the settings' store, else the
        namespace's key-value bucket on this connection (made on first use)."""
        given = self.state_settings.store
        if given is not None and getattr(given, "namespace", self.namespace) != self.namespace:
            raise StateError(
                f"the state store is for namespace {getattr(given, 'namespace', '')!r}, this "
                f"system is in {self.namespace!r}: give the store namespace={self.namespace!r}"
            )
        if self._state_store is None and given is not None:
            self._state_store = given
        elif self._state_store is None:
            s = self.state_settings
            self._state_store = KeyValueStateStore.for_namespace(
                self.js,
                self.namespace,
                self.nc.max_payload,
                history=s.history,
                ttl=s.ttl,
                replicas=s.replicas or self.durable_settings.replicas,
                request=self.mux.request,
            )
        return self._state_store

    async def close_state_store(self) -> None:
        """Let go of the state store (a database's connections), bounded."""
        store, self._state_store = self._state_store, None
        if store is not None:
            try:
                async with asyncio.timeout(5.0):
                    await store.close()
            except Exception as exc:
                log.warning("closing the state store: %r", exc)

    async def reader_leases(self) -> LeaseBucket:
        """The leases that pick one reader process per lazily hosted durable type."""
        if self._reader_leases is None:
            s = self.durable_settings
            self._reader_leases = await LeaseBucket.open(
                self.js, readers_bucket(self.namespace), s.reader_lease_ttl, replicas=s.replicas
            )
        return self._reader_leases

    # -- events and tasks ------------------------------------------------------
    async def emit_event(self, event: str, data: dict[str, Any]) -> None:
        """Publish a system event on ``{ns}.sys.{event}`` (best effort)."""
        try:
            body = encode_event(f"system/{self.system_id}", event, data)
            await self.nc.publish(self.subjects.system(event), body)
        except Exception as exc:
            log.warning("could not emit %s event: %r", event, exc)

    def spawn_task(self, coro: Coroutine[Any, Any, Any], what: str = "actorbus task") -> None:
        """A one-shot background task, logged if it fails, waited for at close."""
        spawn(coro, what, self.tasks)

    async def _refuse(self, inbox: str, err: ActorBusError) -> None:
        """Answer an ask that did not fit its actor's mailbox."""
        await self.replies.send_error(inbox, err, None, None)
