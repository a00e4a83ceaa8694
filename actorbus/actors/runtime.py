"""The runtime kernel: what every part of the actor runtime needs, and nothing more.

Cells, durable readers, virtual actors, streams, dead letters and history are
given a :class:`Runtime`, not the ``ActorSystem``: the transport and its
JetStream context, the request mux, the subject scheme, size limits and time
outs, the reply writer, the durable streams and buckets
(``durable_streams.py``), mailbox accounting, system events and task
spawning. ``ActorSystem`` builds one and is a facade over it; nothing here
knows about hosting or sending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from nats.js import JetStreamContext

from actorbus.actors.config import SystemConfig
from actorbus.actors.durable_streams import DurableStreams
from actorbus.actors.failure_log import FailureLog
from actorbus.actors.intake import Intake
from actorbus.actors.mailbox import Mailboxes
from actorbus.actors.pipeline import encode_event
from actorbus.actors.replies import Replies
from actorbus.bus.requests import RequestMux
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


class Runtime:
    """One process's shared runtime state on one transport.

    Every field is set here, once (``Final``: mypy refuses a later assignment).
    What is made on first use lives inside its own part, not in new fields:
    the durable streams and buckets in :attr:`durable`, the state store behind
    :meth:`state_store`."""

    def __init__(
        self,
        conn: Transport,
        config: SystemConfig,
        security: SecurityStage,
        telemetry: Telemetry,
    ) -> None:
        self.config: Final = config
        self.conn: Final = conn
        self.nc: Final[Messaging] = conn.nc
        self.js: Final[JetStreamContext] = self.nc.jetstream()
        self.namespace: Final = config.namespace
        self.subjects: Final = Subjects(config.namespace)
        self.encoding: Final = config.encoding
        self.limits: Final = config.limits
        self.default_timeout: Final = config.default_timeout
        self.debug: Final = config.debug
        self.stream_settings: Final = config.streams
        self.durable_settings: Final = config.durable
        self.state_settings: Final = config.state
        self._state_store: StateStore | None = None  # opened on first use
        self.system_id: Final = new_id()
        self.security: Final = security  # the pipeline's seal and open stages
        self.telemetry: Final = telemetry  # what its sends and turns record
        self.replies: Final = Replies(conn, config.limits, config.debug)
        self.intake: Final = Intake(config.limits, security, self.replies)
        self.mux: Final = RequestMux(self.nc, f"{conn.options.inbox_prefix}.{self.system_id}")
        conn.on_lost.append(self.mux.fail_all)
        self.mailboxes: Final = Mailboxes(self._refuse, self.emit_event, telemetry.metrics)
        conn.on_slow_consumer.append(self.mailboxes.on_overflow)
        # the durable streams and buckets, made on first use (and again when lost)
        self.durable: Final = DurableStreams(self.js, self.subjects, config.durable)
        self.tasks: Final[set[asyncio.Task[Any]]] = set()
        self.failures: Final = FailureLog()  # handler failures, logged with their tracebacks
        # What makes again, after a reconnect, what a broker back on a fresh store
        # lost (buckets, records, credentials); each checks its own first.
        self.restorers: Final[list[Callable[[], Awaitable[None]]]] = [
            self.durable.restore_if_lost,
            security.restore_if_lost,
        ]
        conn.on_reconnect.append(self._reconnected)

    @property
    def client_address(self) -> str:
        """The ``src`` of this system's own sends: bound to its key when it has one,
        so that no other member's credential covers it."""
        return self.security.sender_address(self.system_id)

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
