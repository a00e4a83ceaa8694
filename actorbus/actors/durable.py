"""Durable delivery into actors: JetStream pull consumer -> cell -> ack.

A message is acked only after its handler succeeded. A failing handler's
message is tried again after the configured backoff; after the last attempt it
is moved to the dead-letter stream with the reason and the attempt count, and
the messages behind it go on. A message that can never succeed (not a valid
envelope, unknown intent, payload that fails validation) is dead-lettered at
once; one whose ttl (``ttl_ms``, else the default ``max_age``) passed is dropped
and counted, never handled late.

Two readers share that logic. ``DurableInbox`` (``actors/address_inbox.py``)
serves one spawned address with one message in flight, so a retry (a NAK with a
delay) keeps the order.
``TypeInbox`` (``actors/type_inbox.py``) serves a lazily hosted type: one consumer
for all its keys, many messages in flight, and a queue per key so each key's
messages stay in order; its retries wait in place (keeping the message in
progress) for the same reason.

Nothing one message does can stop a reader: any exception while handling it
dead-letters it with the reason (a broker error leaves it for redelivery), and
the fetch loop itself runs supervised, restarted with backoff if it ever
fails. JetStream's consumers redeliver without limit; the reader counts the
attempts itself, so a message whose deliveries all ended unsettled (the reader
crashed or stalled on it) is dead-lettered on its next delivery, before any
handler runs, instead of vanishing when the server stops offering it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar, cast

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.kv import KeyValue

from actorbus.actors import faults
from actorbus.actors.dead_letters import dead_letter_record
from actorbus.actors.handled_keys import HandledKeys
from actorbus.actors.in_hand import Held, InHand
from actorbus.actors.outbox import Outbox, current_outbox, recorded_sends, release, resent
from actorbus.actors.reminders import firing_key
from actorbus.bus.client import BadHeaders
from actorbus.bus.fetch_failures import FetchFailures
from actorbus.bus.jetstream import (
    consumer_gone,
    expired_entry,
    idempotency_entry,
    patiently,
    store_message,
    stream_name,
    withdraw_pulls,
)
from actorbus.bus.subjects import Address
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.envelope import now_ms
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    ExpiredError,
    MessageTooLargeError,
    TurnTimeoutError,
    UnknownIntentError,
    ValidationFailedError,
)
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import H_FIRED, H_STORED, pack
from actorbus.state.record import Position
from actorbus.telemetry import metrics as meters

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor
    from actorbus.actors.cell import ActorCell
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.durable")
T = TypeVar("T")

# Errors no retry can fix: the message goes to the dead letters at once.
_POISON = (DecodeError, MessageTooLargeError, UnknownIntentError, ValidationFailedError)
_FETCH_WAIT = 0.5  # seconds a fetch waits for work; also bounds how long stop() takes
_DEPTH_EVERY = 10.0  # seconds between queue depth refreshes for the metrics
# "deliver policy can not be updated" (and its older bad-request form): a consumer
# made again at a start sequence keeps it when a reader starts again.
_START_CANNOT_CHANGE = (10012, 10058)


class DurableReader:
    """A pull consumer's life (set-up with retries, fetch loop, stop) and the steps
    of one message that both readers share."""

    def __init__(self, rt: Runtime, cls: type[Actor], name: str, what: str) -> None:
        self.rt = rt
        self.cls = cls
        self.consumer = name
        self.stream = stream_name(rt.namespace, cls.type_name)
        self.what = what  # for logs and errors: an address or 'type/*'
        self.expired = 0
        self.dead_lettered = 0
        self.skipped = 0
        self._stopping = False
        self._stop = asyncio.Event()  # set with _stopping: wakes a retry waiting its turn
        # Set while no pull request of this reader can take a message: one handed
        # back before then could come straight back to it, behind its key's later ones.
        self._pulls_withdrawn = asyncio.Event()
        self._pulls_withdrawn.set()
        self._task: asyncio.Task[None] | None = None
        self._gauge: asyncio.Task[None] | None = None
        self._psub: JetStreamContext.PullSubscription | None = None
        self._stream_born: object = None  # when the stream read from was created
        self._pull_subscribe: Callable[[], Awaitable[JetStreamContext.PullSubscription]]
        self._handled_keys: HandledKeys | None = None
        s = rt.durable_settings
        self._in_hand = InHand(cls.type_name, name, what, s.ack_wait, s.start_timeout)
        self._beat: asyncio.Task[None] | None = None
        self._failures = FetchFailures(f"{what}: the durable fetch", log)

    async def _subscribe(self, subject: str, config: ConsumerConfig) -> None:
        rt = self.rt

        async def pull_subscribe() -> JetStreamContext.PullSubscription:
            stream = self.stream
            made = await self._where_to_start(stream, config)
            try:
                # Created, or brought up to date (a consumer made by an older version
                # may still let the server drop messages after max_deliver).
                await rt.js.add_consumer(stream, config=made)
            except nats.js.errors.APIError as exc:
                if exc.err_code not in _START_CANNOT_CHANGE:
                    raise
                # Made again once where an earlier one stopped: keep its start.
                have = (await rt.js.consumer_info(stream, self.consumer)).config
                made = dataclasses.replace(
                    made, deliver_policy=have.deliver_policy, opt_start_seq=have.opt_start_seq
                )
                await rt.js.add_consumer(stream, config=made)
            return await rt.js.pull_subscribe(
                subject, durable=self.consumer, stream=stream, config=made
            )

        self._pull_subscribe = pull_subscribe
        self._psub = await self._patiently(pull_subscribe)
        self._pulls_withdrawn.clear()
        if self._beat is None:
            self._beat = supervise(
                f"in-progress acks of {self.what}", self._in_hand.keep_in_progress, logger=log
            )
        self._task = supervise(f"durable reader of {self.what}", self._run, logger=log)
        if self.rt.telemetry.metrics and self._gauge is None:
            self._gauge = supervise(f"queue depth of {self.what}", self._report_depth, logger=log)

    async def _report_depth(self) -> None:
        """Refresh the queue depth and lag the metrics gauges read (they cannot ask
        the server themselves: their callbacks are synchronous)."""
        stream = self.stream
        while True:
            try:
                info = await self.rt.js.consumer_info(stream, self.consumer)
                pending, in_flight = info.num_pending or 0, info.num_ack_pending or 0
                meters.queue_state[self.what] = (pending + in_flight, pending)
            except Exception as exc:  # the broker away: keep the last figures
                log.debug("%s: queue depth: %r", self.what, exc)
            await asyncio.sleep(_DEPTH_EVERY)

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        """A JetStream call at start-up, tried again while a cluster elects a new
        leader (a node just died: answers come late or not at all for a few
        seconds), within ``start_timeout``."""
        await self.rt.durable.queue(self.cls.type_name, host=True)
        timeout = self.rt.durable_settings.start_timeout
        return await patiently(call, timeout, f"{self.what}: the durable queue")

    async def stop(self, timeout: float = 10.0) -> None:
        """Finish the message(s) in hand (for up to ``timeout``), then stop fetching
        (the consumer stays on the server, so nothing queued is lost). Messages
        still held then (a handler cut short, messages waiting their turn) go back
        at once, and one whose handler never started is not counted as tried."""
        self._stopping = True
        self._stop.set()
        await stop_task(self._gauge, what=f"queue depth of {self.what}")
        self._gauge = None
        if self._task is not None:  # ends within a fetch wait plus the message in hand
            await asyncio.wait({self._task}, timeout=timeout)
            await stop_task(self._task, what=f"durable reader of {self.what}")
        if self._psub is not None:  # before anything goes back: see withdraw_pulls
            for msg in await withdraw_pulls(self._psub):
                self._in_hand.take(msg)  # handed back below, in order
            self._psub = None
        self._pulls_withdrawn.set()
        await self._drained(timeout)
        for held in sorted(self._in_hand, key=lambda h: h.seq):  # in order, per key too
            await self._hand_back(held)
        await stop_task(self._beat, what=f"in-progress acks of {self.what}")
        self._beat = None

    async def _hand_back(self, held: Held) -> None:
        """Give a held message back to JetStream now (another reader may take it)."""
        with contextlib.suppress(Exception):
            await self._in_hand.handed_back(held, self._attempts)
            await held.msg.nak()
        self._in_hand.let_go(held)

    async def _drained(self, timeout: float) -> None:
        """Wait for work handed out by the fetch loop (none for a one-at-a-time reader)."""

    async def _run(self) -> None:
        raise NotImplementedError

    async def _fetch(self, batch: int) -> list[Msg] | None:
        """The next messages ([] when none came), or None when the connection ended."""
        assert self._psub is not None
        try:
            got = await self._psub.fetch(batch, timeout=_FETCH_WAIT)
        except TimeoutError:  # nats' own, or asyncio's when a pull expires at its deadline
            got = []
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            return None
        except Exception as exc:  # a broker hiccup must not end the reader
            self._failures.failed(exc)
            await asyncio.sleep(_FETCH_WAIT)
            await self._restore_if_gone()
            return []
        self._failures.worked()
        return got

    async def _where_to_start(self, stream: str, config: ConsumerConfig) -> ConsumerConfig:
        """A consumer made again after this reader settled messages starts after
        them (a new consumer would deliver the whole stream again), unless the
        stream itself is new (the broker lost its store): then from its start."""
        info = await self.rt.js.stream_info(stream)
        born, self._stream_born = self._stream_born, info.created
        if born is not None and born != info.created:  # a new stream: old sequences mean nothing
            self._in_hand.forget_sequences()
        floor = self._in_hand.floor
        if floor == 0:  # nothing settled yet (in this stream): from its start
            return config
        return dataclasses.replace(
            config, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=floor + 1
        )

    async def _restore_if_gone(self) -> None:
        """After a failed fetch: if the consumer is gone (an operator deleted it, or
        the broker came back on a fresh store without the streams), make it again,
        with the streams and buckets it needs."""
        if not await consumer_gone(self.rt.js, self.stream, self.consumer):
            return  # still there (or the broker away): the next fetch tries again
        log.warning(
            "%s: durable consumer %s is gone (deleted, or the broker lost its store): "
            "making it again",
            self.what,
            self.consumer,
        )
        await self.rt.durable.restore(self.cls.type_name)
        old, self._psub = self._psub, await self._patiently(self._pull_subscribe)
        if old is not None:
            with contextlib.suppress(Exception):
                await old.unsubscribe()
        log.info("%s: durable consumer %s made again; reading", self.what, self.consumer)

    async def _fetch_free(self, slots: asyncio.Semaphore) -> list[Msg] | None:
        """Wait for a free slot, then fetch as many messages as slots are free (one
        pull request for them all); each message returned holds one slot, released
        by whoever settles it."""
        await slots.acquire()
        taken = 1
        while not slots.locked():
            await slots.acquire()  # free: returns at once
            taken += 1
        batch = await self._fetch(taken)
        for _ in range(taken - len(batch or ())):
            slots.release()
        return batch

    # -- the steps of one message -----------------------------------------
    async def _open(self, held: Held, address: str) -> tuple[Msg, Inbound] | None:
        """Decode a stored message; None when it was settled here already (expired,
        undecodable, tried too often, or handled before under its idempotency key)."""
        rt = self.rt
        msg = held.msg
        await self._in_hand.recall(held, self._attempts)
        tried = held.attempts_before
        if tried >= len(self._backoff) + 1:
            why = ActorBusError(
                f"its handler started {tried} times without the message being settled (the "
                "reader's process died or stalled in it each time)"
            )
            await self._dead_letter(held, address, None, why, tried)
            return None
        # Handled without a reply subject: a JetStream message's reply is its ack subject.
        headers: Mapping[str, str] | None = msg.headers  # nats-py says dict; ours may not be
        if self.cls.state_model is not None and type(headers) is not BadHeaders:
            # a declared state commits with the message's position
            where = Position(str(self._stream_born), held.seq)
            headers = {**(msg.headers or {}), H_STORED: where.header()}
        plain = Msg(
            _client=msg._client,
            subject=msg.subject,
            data=msg.data,
            headers=cast(dict[str, str] | None, headers),
        )
        fired = _fired(msg)
        env: Inbound | None = None
        try:
            env = rt.intake.decode(plain, address)
            stored_ms = int(msg.metadata.timestamp.timestamp() * 1000)
            await rt.intake.admit(  # stored time, not now: a backlog is fresh
                plain,
                env,
                address,
                self.cls.security,
                # A firing repeats its reminder's envelope, sealed when it was set
                # (its session long over by now): taken as it stood then, and
                # checked below against its reminder instead of the replay window.
                stored_ms=stored_ms if fired is None else env.ts,
                redelivered=held.delivery > 1 or fired is not None,
                stored_at=f"{self.stream}:{held.seq}",  # a repeat here: delivered again
            )
            if fired is not None:
                firing = await firing_key(rt, address, env, fired, msg.data, stored_ms)
                if firing is None:  # its reminder was cancelled or replaced
                    await msg.ack()
                    await self._in_hand.settled(held, self._attempts)
                    self.skipped += 1
                    return None
                env.context.idempotency_key = firing  # each firing taken once
            elif env.context.ttl_ms is None:
                _check_default_ttl(env, address, rt.durable_settings.max_age)
        except ExpiredError as err:
            await self._count_expired(err, address)
            await msg.term()
            await self._in_hand.settled(held, self._attempts)
            return None
        except ActorBusError as err:
            await self._dead_letter(held, address, env, err, tried + 1)
            return None
        entry = self._idempotency_entry(address, env, fired is not None)
        if entry is not None:
            handled = await self._handled.get(entry)
            if handled is not None:
                # A crash may have come between recording and sending: send again
                # (the stream drops what it has by id), then settle.
                await release(rt, resent(rt, recorded_sends(handled)))
                self.skipped += 1
                log.info("%s: %s already handled (idempotency key); acked", address, env.id)
                await msg.ack()
                await self._in_hand.settled(held, self._attempts)
                return None
        return plain, env

    async def _turn(
        self, held: Held, address: str, run: Callable[[], Awaitable[Outbox | Exception]]
    ) -> Outbox | Exception:
        """One attempt at a held message: its start recorded first (when it must be),
        cut short as hung after the type's ``max_turn``."""
        await self._in_hand.starting(held, self._attempts)
        limit = self.cls.max_turn or self.rt.durable_settings.max_turn
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                return await run()
        except TimeoutError:
            if not deadline.expired():
                raise
        hung = TurnTimeoutError(
            f"the turn on message #{held.seq} ran past max_turn ({limit:g}s) and was cancelled"
        )
        log.warning(
            "%s: %s; treated as hung and retried per the retry policy (set max_turn on the "
            "actor type if its turns take longer)",
            address,
            hung,
        )
        return hung

    async def _attempt(
        self, cell: ActorCell, msg: Msg, env: Inbound, attempt: int = 0
    ) -> Outbox | Exception:
        """Run the handler once; an idempotent one's durable sends are held in an
        outbox and handed back for ``_succeeded`` to record and release.
        ``attempt`` (the delivery count) goes on the spans."""
        box = Outbox()
        token = current_outbox.set(box)
        try:
            failed = await cell.deliver_durable(msg, env, attempt)
        finally:
            current_outbox.reset(token)
            box.open = False
        return box if failed is None else failed

    async def _succeeded(self, held: Held, address: str, env: Inbound, box: Outbox) -> None:
        entry = self._idempotency_entry(address, env, _fired(held.msg) is not None)
        if entry is None:
            await release(self.rt, box.held)  # at least once: nothing to record
        else:
            record = box.record(env.id)
            if record is None:  # too large to keep with the key: sent first
                await release(self.rt, box.held)
                await self._handled.put(entry, pack({"id": env.id, "out": []}))
            else:
                await self._handled.put(entry, record)
                await release(self.rt, box.held)
        faults.reached(faults.AFTER_SENDS)
        await held.msg.ack()
        await self._in_hand.settled(held, self._attempts)

    @property
    def _handled(self) -> HandledKeys:
        if self._handled_keys is None:
            patience = self.rt.durable_settings.start_timeout
            self._handled_keys = HandledKeys(self.rt.durable.stores.handled, patience, self.what)
        return self._handled_keys

    @property
    def _attempts(self) -> KeyValue:
        return self.rt.durable.stores.attempts

    @property
    def _backoff(self) -> tuple[float, ...]:
        """Delays before each retry: the type's own, else the system's."""
        return self.cls.retry_backoff or self.rt.durable_settings.backoff

    def _gives_up(self, failed: Exception, attempt: int) -> bool:
        return isinstance(failed, _POISON) or attempt >= len(self._backoff) + 1

    def _delay(self, attempt: int) -> float:
        backoff = self._backoff
        return backoff[min(attempt, len(backoff)) - 1]

    def _idempotency_entry(self, address: str, env: Inbound, fired: bool) -> str | None:
        """The handled-key entry ``env`` is taken once under: its key's, when its
        handler is idempotent or it is a reminder's firing."""
        key = env.context.idempotency_key
        if key is None:
            return None
        spec = self.cls.handlers.get(env.intent)
        if not (fired or (spec.idempotent if spec is not None else self.cls.idempotent)):
            return None
        return idempotency_entry(Address.parse(address), key)

    async def _count_expired(self, err: ExpiredError, address: str) -> None:
        """Count in the namespace's stats bucket, so every process sees the total."""
        self.expired += 1
        log.info("%s: %s; dropped", address, err)
        stats = self.rt.durable.stores.stats
        entry = expired_entry(self.consumer)
        for _ in range(10):  # compare-and-set: readers of one queue may count at once
            try:
                try:
                    current = await stats.get(entry)
                except nats.js.errors.KeyNotFoundError:
                    await stats.create(entry, b"1")
                    return
                count = int(current.value or b"0") + 1
                await stats.update(entry, str(count).encode(), last=current.revision)
                return
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
            except Exception as exc:
                log.warning("%s: could not count an expired message: %r", address, exc)
                return

    async def _dead_letter(
        self, held: Held, address: str, env: Inbound | None, err: BaseException, attempt: int
    ) -> None:
        msg = held.msg
        code = err.code if isinstance(err, ActorBusError) else "E_HANDLER"
        reason = f"{type(err).__name__}: {err}"
        envelope_id = env.id if env else None
        record = dead_letter_record(
            msg, address, reason, code, attempt, envelope_id, self.rt.nc.max_payload
        )
        rt = self.rt
        subject = rt.subjects.dead_letter(Address.parse(address))
        timeout = rt.durable_settings.store_timeout
        await store_message(rt.mux, subject, record, None, address, timeout)
        await msg.term()
        await self._in_hand.settled(held, self._attempts)
        self.dead_lettered += 1
        log.warning(
            "%s: message %s dead-lettered after %d attempt(s): %s",
            address,
            envelope_id or f"#{held.seq}",
            attempt,
            reason[:500],
        )

    async def _guarded(self, held: Held, address: str, work: Awaitable[None]) -> None:
        """Run one message's steps; whatever they raise stays with that message,
        which is let go of afterwards (a cancelled run keeps it held: the stopping
        reader hands it back).

        A broker error (the ack, the dead-letter publish) leaves the message for
        JetStream to deliver again; anything else is this message's fault, or a
        fault in handling it, and it goes to the dead letters with the reason."""
        try:
            await work
        except (nats.errors.Error, ConnectionError, TimeoutError) as exc:
            log.warning("%s: durable message not settled (delivered again later): %r", address, exc)
        except Exception as exc:
            log.error("%s: handling a durable message failed", address, exc_info=True)
            try:
                tried = held.attempts_before + held.started
                await self._dead_letter(held, address, None, _unexpected(exc), tried)
            except Exception as again:
                log.error("%s: and it could not be dead-lettered: %r", address, again)
        self._in_hand.let_go(held)


def _fired(msg: Msg) -> str | None:
    """A reminder firing's ``Ab-Fired`` header (None: not a firing)."""
    headers = msg.headers
    return headers.get(H_FIRED) if headers else None


def _unexpected(exc: Exception) -> ActorBusError:
    if isinstance(exc, ActorBusError):
        return exc
    if isinstance(exc, RecursionError):
        return DecodeError(f"the message nests too deeply to handle ({exc})")
    return ActorBusError(f"unexpected {type(exc).__name__} while handling it: {exc}")


def _check_default_ttl(env: Inbound, address: str, max_age: float) -> None:
    if now_ms() > env.ts + max_age * 1000:
        raise ExpiredError(
            f"message {env.id} to {address} expired (default ttl {max_age:g} s, no ttl_ms)"
        )
