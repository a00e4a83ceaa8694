"""The relay of one type's reminder firings into its durable queue.

The server stores a firing in the type's reminder stream (``bus/schedules.py``);
every process hosting the type's durable messages runs a relay, and the relays
share one consumer there, so each firing is moved once (a relay that dies
mid-way leaves it to be moved again, and the copy's ``Nats-Msg-Id``, the
firing's own stream position, makes the queue drop the repeat). The firing then
goes the way of any durable message: its reader checks it
(:meth:`~actorbus.actors.reminders.Reminders.firing_key`), activates the actor and
acks it when the handler succeeded.

A repeating reminder's firings that waited while no host ran are one behind the
other: only the newest is moved (missed ones coalesce, as in Orleans and
Quartz), so a host back after a day does not run a day of ticks in a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from actorbus.bus.client import encode_headers
from actorbus.bus.fetch_failures import FetchFailures
from actorbus.bus.jetstream import consumer_gone, patiently, store_message, stream_name
from actorbus.bus.schedules import (
    H_SCHEDULE_NEXT,
    H_SCHEDULER,
    LAST_FIRING,
    RELAY_CONSUMER,
    reminder_stream_name,
    schedule_time,
)
from actorbus.bus.subjects import Address
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.wire import H_FIRED, H_MSG_ID

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.reminders")

_FETCH_WAIT = 0.5  # seconds a fetch waits for work; also bounds how long stop() takes
_MISSED = dt.timedelta(seconds=1)  # a firing whose next one is this far past is stale


class ReminderRelay:
    """Moves one type's reminder firings into its durable queue (module docstring)."""

    def __init__(self, rt: Runtime, type_: str) -> None:
        self.rt = rt
        self.type = type_
        self.stream = reminder_stream_name(rt.namespace, type_)
        self.relayed = 0
        self.coalesced = 0
        self._psub: JetStreamContext.PullSubscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._failures = FetchFailures(f"{type_}: the reminder relay's fetch", log)

    async def start(self) -> None:
        rt = self.rt
        await rt.durable.queue(self.type)
        await rt.durable.reminder_stream(self.type)
        self._psub = await self._subscribe()
        self._task = supervise(f"reminder relay of {self.type}", self._run)

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        rt = self.rt
        config = ConsumerConfig(
            durable_name=RELAY_CONSUMER,
            filter_subject=rt.subjects.fired_type(self.type),
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=rt.durable_settings.ack_wait,
            max_deliver=-1,
        )

        async def subscribe() -> JetStreamContext.PullSubscription:
            await rt.js.add_consumer(self.stream, config=config)
            return await rt.js.pull_subscribe(
                config.filter_subject or "",
                durable=RELAY_CONSUMER,
                stream=self.stream,
                config=config,
            )

        return await patiently(subscribe, rt.durable_settings.start_timeout, self.stream)

    async def stop(self, timeout: float = 5.0) -> None:
        await stop_task(self._task, timeout, f"reminder relay of {self.type}")
        psub, self._psub = self._psub, None
        if psub is not None:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()

    async def _run(self) -> None:
        while True:
            psub = self._psub
            if psub is None:
                return
            try:
                batch = await psub.fetch(16, timeout=_FETCH_WAIT)
            except TimeoutError:
                self._failures.worked()
                continue
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
                return
            except Exception as exc:  # a broker hiccup, or its store lost: not the relay's end
                self._failures.failed(exc)
                await asyncio.sleep(_FETCH_WAIT)
                await self._restore_if_gone()
                continue
            self._failures.worked()
            for msg in batch:
                try:
                    await self._relay(msg)
                except (nats.errors.Error, ConnectionError, TimeoutError) as exc:
                    log.warning("%s: a reminder firing not relayed yet: %r", self.type, exc)

    async def _restore_if_gone(self) -> None:
        """After a failed fetch: make the stream and the shared consumer again if
        they are gone (the broker came back on a fresh store; a fetch from a
        stream that is not there answers 503, not 404)."""
        if not await consumer_gone(self.rt.js, self.stream, RELAY_CONSUMER):
            return  # still there (or the broker away): the next fetch tries again
        log.warning("%s: the reminder relay's consumer is gone: making it again", self.type)
        await self.rt.durable.restore_store_of(self.rt.subjects.fired_type(self.type))
        old, self._psub = self._psub, await self._subscribe()
        if old is not None:
            with contextlib.suppress(Exception):
                await old.unsubscribe()

    async def _relay(self, msg: Msg) -> None:
        rt = self.rt
        headers = msg.headers or {}
        scheduler, next_at = headers.get(H_SCHEDULER, ""), headers.get(H_SCHEDULE_NEXT, "")
        prefix = msg.subject + "."
        if not scheduler.startswith(prefix) or "." in scheduler[len(prefix) :]:
            log.warning("%s: not a reminder's firing on %s; dropped", self.type, msg.subject)
            await msg.term()
            return
        name = scheduler[len(prefix) :]
        upcoming = schedule_time(next_at) if next_at != LAST_FIRING else None
        if upcoming is not None and upcoming + _MISSED < dt.datetime.now(dt.UTC):
            self.coalesced += 1  # a newer firing of the same reminder follows it
            await msg.ack()
            return
        key = msg.subject.rsplit(".", 1)[1]
        addr = Address(self.type, key)
        relayed = {k: v for k, v in headers.items() if not k.startswith("Nats-")}
        relayed[H_FIRED] = f"{name} {next_at}"
        relayed[H_MSG_ID] = f"{self.stream}:{msg.metadata.sequence.stream}"
        subject = rt.subjects.durable(addr)
        await store_message(
            rt.mux,
            subject,
            msg.data,
            encode_headers(relayed),
            f"reminder {name!r} of {addr}",
            rt.durable_settings.store_timeout,
            functools.partial(rt.durable.restore_store_of, subject),
            stream_name(rt.namespace, self.type),
        )
        await msg.ack()
        self.relayed += 1
