"""Durable delivery into an actor: JetStream pull consumer -> cell -> ack.

A message is acked only after its handler succeeded. A failing handler's
message goes out again after the configured backoff; after the last attempt it
is moved to the dead-letter stream with the reason and the attempt count, and
the messages behind it go on. A message that can never succeed (not a valid
envelope, unknown intent, payload that fails validation) is dead-lettered at
once; one whose ttl passed is dropped and counted, never handled late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actorbus.bus.connection import backoff_delay
from actorbus.bus.jetstream import (
    consumer_config,
    consumer_name,
    idempotency_entry,
    stream_name,
)
from actorbus.bus.subjects import Address
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    ExpiredError,
    MessageTooLargeError,
    UnknownIntentError,
    ValidationFailedError,
)
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import pack

if TYPE_CHECKING:
    from actorbus.actors.cell import ActorCell
    from actorbus.actors.system import ActorSystem

log = logging.getLogger("actorbus.durable")

# Errors no retry can fix: the message goes to the dead letters at once.
_POISON = (DecodeError, MessageTooLargeError, UnknownIntentError, ValidationFailedError)
_FETCH_WAIT = 0.5  # seconds a fetch waits for work; also bounds how long stop() takes


class DurableInbox:
    """One cell's reader of its address's durable messages."""

    def __init__(self, system: ActorSystem, cell: ActorCell) -> None:
        self.system = system
        self.cell = cell
        self.addr = Address(cell.cls.type_name, cell.key)
        self.expired = 0
        self.dead_lettered = 0
        self.skipped = 0
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._psub: JetStreamContext.PullSubscription | None = None

    async def start(self) -> None:
        system = self.system
        await system.durable_ready()
        s = system.durable_settings
        deadline = time.monotonic() + s.start_timeout
        attempt = 0
        while True:
            try:
                self._psub = await system.js.pull_subscribe(
                    system.subjects.durable(self.addr),
                    durable=consumer_name(self.addr),
                    stream=stream_name(system.namespace),
                    config=consumer_config(system.subjects, self.addr, s),
                )
                break
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError) as exc:
                # A cluster electing a new leader (a node just died) answers late
                # or not at all for a few seconds: try again, within bounds.
                if time.monotonic() > deadline:
                    raise ActorBusError(
                        f"{self.addr}: JetStream did not set up the durable queue within "
                        f"{s.start_timeout:g}s ({type(exc).__name__})"
                    ) from exc
                attempt += 1
                await asyncio.sleep(backoff_delay(attempt, 0.1, 2.0))
        self._task = asyncio.create_task(self._run(), name=f"durable {self.addr}")

    async def stop(self) -> None:
        """Finish the message in hand, then stop fetching (the consumer stays on the
        server, so nothing queued is lost)."""
        self._stopping = True
        if self._task is not None:
            await asyncio.wait({self._task})
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()

    async def _run(self) -> None:
        assert self._psub is not None
        while not self._stopping:
            try:
                batch = await self._psub.fetch(1, timeout=_FETCH_WAIT)
            except nats.errors.TimeoutError:
                continue
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
                return
            except Exception as exc:  # a broker hiccup must not end the inbox
                log.warning("%s: durable fetch failed: %r", self.addr, exc)
                await asyncio.sleep(_FETCH_WAIT)
                continue
            for msg in batch:
                await self._one(msg)

    async def _one(self, msg: Msg) -> None:
        system, address = self.system, str(self.addr)
        # Handled without a reply subject: a JetStream message's reply is its ack subject.
        plain = Msg(_client=system.nc, subject=msg.subject, data=msg.data, headers=msg.headers)
        attempt = msg.metadata.num_delivered
        try:
            env = system.replies.decode(plain, address)
        except ExpiredError as err:
            self.expired += 1
            log.info("%s: %s; dropped", address, err)
            await msg.term()
            return
        except ActorBusError as err:
            await self._dead_letter(msg, None, err, attempt)
            return
        entry = self._idempotency_entry(env)
        if entry is not None and await self._already_handled(entry):
            self.skipped += 1
            log.info("%s: %s already handled (idempotency key); acked", address, env.id)
            await msg.ack()
            return
        failed = await self.cell.deliver_durable(plain, env)
        if failed is None:
            if entry is not None:
                # Remembered before the ack: a crash in between re-runs the
                # handler once more (at least once), never loses the message.
                assert system.handled is not None
                await system.handled.put(entry, env.id.encode())
            await msg.ack()
            return
        s = system.durable_settings
        if isinstance(failed, _POISON) or attempt >= s.max_deliver:
            await self._dead_letter(msg, env, failed, attempt)
        else:
            await msg.nak(delay=s.backoff[min(attempt, len(s.backoff)) - 1])

    def _idempotency_entry(self, env: Inbound) -> str | None:
        key = env.context.idempotency_key
        if key is None or not self.cell.cls.idempotent:
            return None
        return idempotency_entry(self.addr, key)

    async def _already_handled(self, entry: str) -> bool:
        assert self.system.handled is not None
        try:
            await self.system.handled.get(entry)
        except nats.js.errors.KeyNotFoundError:
            return False
        return True

    async def _dead_letter(
        self, msg: Msg, env: Inbound | None, err: BaseException, attempt: int
    ) -> None:
        code = err.code if isinstance(err, ActorBusError) else "E_HANDLER"
        record = {
            "address": str(self.addr),
            "reason": f"{type(err).__name__}: {err}",
            "code": code,
            "attempts": attempt,
            "envelope_id": env.id if env else None,
            "original": msg.data,
            "original_headers": dict(msg.headers or {}),
        }
        subject = self.system.subjects.dead_letter(self.addr)
        await self.system.js.publish(subject, pack(record))
        await msg.term()
        self.dead_lettered += 1
        log.warning(
            "%s: message %s dead-lettered after %d attempt(s): %s",
            self.addr,
            env.id if env else "?",
            attempt,
            record["reason"],
        )
