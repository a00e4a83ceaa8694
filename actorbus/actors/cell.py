"""ActorCell: the runtime around one actor instance.

It owns the instance's lifecycle (start, restart with backoff, stop), keeps the
one-message-at-a-time promise (or the class's ``concurrency``), turns a handler's
result or exception into a reply, and runs streaming handlers as cancellable
tasks. The ActorSystem routes messages here; the cell never touches
subscriptions' internals.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from actorbus.actors.actor import Actor, ActorContext, Crash, Incoming, current_incoming
from actorbus.actors.handlers import HandlerSpec
from actorbus.actors.messages import validate
from actorbus.actors.state_keeper import StateKeeper, keeper_for
from actorbus.actors.streaming import SharedTurn
from actorbus.actors.timers import Timers
from actorbus.actors.turn_lock import TurnLock
from actorbus.bus.tasks import LOOP_PASSES, LOOP_TURN_EVERY, backoff_delay, spawn
from actorbus.codecs.errors import (
    ActorBusError,
    ActorStoppedError,
    RemoteError,
    StateConflictError,
    UnknownIntentError,
    ValidationFailedError,
    WrongCallError,
)
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import H_STORED
from actorbus.state.record import Position

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime
    from actorbus.actors.streaming import StreamProducers, Turn

log = logging.getLogger("actorbus.actors")


@dataclass(frozen=True)
class CellEnv:
    """What a cell needs from the system hosting it (one for all its cells)."""

    rt: Runtime
    streams: StreamProducers
    context: ActorContext  # what its actor instances talk through
    gave_up: Callable[[ActorCell], Awaitable[None]]  # unsubscribe and forget a cell


_NONE_WAITING = ()  # deliver_later's task has a message in hand, and none waits behind it


class ActorCell:
    def __init__(self, env: CellEnv, cls: type[Actor], key: str, kwargs: dict[str, Any]) -> None:
        self.env = env
        self.rt = env.rt
        self.cls = cls
        self.key = key
        self.kwargs = kwargs
        self.address = f"{cls.type_name}/{key}"
        self.instance: Actor | None = None
        self.state = "new"  # new | running | restarting | stopping | stopped
        # What one idle activation keeps is what a process hosting a million of them
        # pays a million times: the rarely needed parts are made when first needed
        # (an Event or a deque alone takes 600 bytes).
        self._is_ready = False  # started, or stopped for good: messages need not wait
        self._readiness: asyncio.Event | None = None  # made by the first message to wait
        # One at a time: a Lock (its uncontended acquire is cheaper than a
        # Semaphore's). More: a Semaphore admits up to `concurrency`.
        self._lock = TurnLock()
        self._gate: asyncio.Lock | asyncio.Semaphore = (
            self._lock if cls.concurrency == 1 else asyncio.Semaphore(cls.concurrency)
        )
        self._restarts: deque[float] | None = None  # made by the first restart
        self._busy = 0
        self._idle: asyncio.Future[None] | None = None  # set by stop() while it waits
        self._tasks: set[asyncio.Task[None]] | None = None  # made by the first task
        self._queued_bytes = 0  # bodies waiting in deliver_later's queue
        # That queue: None while no task takes it, else what waits behind the message in hand.
        self._backlog: deque[tuple[Msg, Inbound]] | tuple[()] | None = None
        self.subscriptions: tuple[Any, ...] = ()
        self.restart_count = 0
        self.failure: BaseException | None = None
        self.keeper: StateKeeper | None = None  # the declared state's, when there is one
        self._timers: Timers | None = None  # the instance's every(...): made by the first
        # How a lazily activated cell starts: run by its first message, in its task.
        self.starter: Callable[[ActorCell], Awaitable[None]] | None = None
        self.last_active = time.monotonic()  # when it last finished a message
        self._yielded_at = self.last_active
        self._loop_pass = -1  # the loop pass its last turn began in (LOOP_PASSES)

    def idle_for(self, now: float) -> float:
        """Seconds without a message in hand (0 while one is)."""
        return 0.0 if self._busy else now - self.last_active

    def load(self) -> int:
        """Messages admitted and not yet finished, and those queued for it."""
        return self._busy + len(self._backlog or ())

    # -- lifecycle ---------------------------------------------------------
    async def start(self) -> bool:
        """Create the instance and run on_start, restarting with backoff on failure."""
        while True:
            where = "on_start"
            try:
                inst = self.cls(**self.kwargs)
                inst._system = self.env.context
                inst._address = self.address
                inst._key = self.key
                inst._timer_source = self
                if self.cls.state_model is not None:  # before on_start, which may read it
                    where = "loading its state"
                    self.keeper = keeper_for(self.rt, self.cls, self.key)
                    inst.state = await self.keeper.activate()
                    inst.__dict__["_keeper"] = self.keeper
                    where = "on_start"
                await inst.on_start()
            except Exception as exc:
                log.warning("%s: %s failed: %r", self.address, where, exc)
                if not await self._may_restart(exc, where):
                    return False
                continue
            self.instance = inst
            self.state = "running"
            self._set_ready()
            return True

    async def _may_restart(self, exc: BaseException, where: str) -> bool:
        """Count a restart; wait the backoff, or give up after too many."""
        now = time.monotonic()
        restarts = self._restarts = self._restarts or deque()
        while restarts and now - restarts[0] > self.cls.restart_window:
            restarts.popleft()
        if len(restarts) >= self.cls.max_restarts:
            await self._give_up(exc, where)
            return False
        restarts.append(now)
        self.restart_count += 1
        self._counted_restart()
        initial, maximum = self.cls.restart_backoff
        delay = backoff_delay(len(restarts) - 1, initial, maximum)
        log.info("%s: restarting in %.2fs after %s failed", self.address, delay, where)
        await self.rt.emit_event(
            "actor.restarting",
            {
                "address": self.address,
                "where": where,
                "error": _describe(exc),
                "restarts": self.restart_count,
                "delay_s": round(delay, 3),
            },
        )
        await asyncio.sleep(delay)
        return True

    async def _give_up(self, exc: BaseException, where: str, why: str | None = None) -> None:
        """Stop for good: after too many restarts, or ``why`` (one that no restart
        would mend)."""
        self.failure = exc
        self.state = "stopped"
        self._set_ready()  # wake waiters; they see 'stopped' and get an error reply
        why = why or f"after {self.cls.max_restarts} restarts in {self.cls.restart_window:g}s"
        log.error("%s: stopped %s; last failure in %s: %r", self.address, why, where, exc)
        await self.rt.emit_event(
            "actor.failed",
            {
                "address": self.address,
                "where": where,
                "error": _describe(exc),
                "restarts": self.restart_count,
            },
        )
        await self.env.gave_up(self)

    async def _restart(self, exc: BaseException) -> None:
        if self.state != "running":
            return
        self.state = "restarting"
        self._is_ready = False
        await self._call_on_stop()
        if await self._may_restart(exc, "handler"):
            await self.start()

    def timer_set(self) -> Timers:
        """The instance's timers (``Actor.every``), made when first used."""
        if self._timers is None:
            self._timers = Timers(self.address, self.timer_turn)
        return self._timers

    async def _call_on_stop(self) -> None:
        timers, self._timers = self._timers, None
        if timers is not None:
            await timers.stop()
        inst, self.instance = self.instance, None
        if inst is None:
            return
        try:
            await inst.on_stop()
        except Exception as exc:
            log.warning("%s: on_stop failed: %r", self.address, exc)

    async def stop(self, timeout: float) -> None:
        """Stop taking messages, let in-flight ones finish (bounded), then on_stop."""
        if self.state in ("stopping", "stopped"):
            return
        self.state = "stopping"
        try:
            if self._busy:
                self._idle = asyncio.get_running_loop().create_future()
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self._idle)
        except TimeoutError:
            log.warning(
                "%s: %d handler(s) still running after %gs; cancelling",
                self.address,
                self._busy,
                timeout,
            )
            for task in list(self._tasks or ()):
                task.cancel()
        await self._call_on_stop()
        self.state = "stopped"
        self._set_ready()

    def _set_ready(self) -> None:
        self._is_ready = True
        readiness, self._readiness = self._readiness, None
        if readiness is not None:
            readiness.set()  # its waiters are woken; the Event itself is not kept

    async def _wait_ready(self) -> None:
        if self._readiness is None:
            self._readiness = asyncio.Event()
        await self._readiness.wait()

    def _spawn(self, coro: Coroutine[Any, Any, None], eager: bool = False) -> None:
        """A task of this cell's, kept until it ends (``stop`` cancels what is left);
        ``eager``: started at once where Python can (``bus/tasks.spawn``)."""
        if self._tasks is None:
            self._tasks = set()
        spawn(coro, self.address, self._tasks, eager=eager).add_done_callback(self._drop_task_set)

    def _drop_task_set(self, _: asyncio.Task[None]) -> None:
        if not self._tasks:  # none left (the task was taken out just before this)
            self._tasks = None

    # -- message path ------------------------------------------------------
    async def deliver(self, msg: Msg, env: Inbound) -> None:
        """Handle one message, keeping the concurrency promise; returns when admitted
        (concurrency > 1) or done (concurrency 1, which keeps arrival order)."""
        if msg.reply and env.context.stream and self.cls.concurrency == 1:
            await self._deliver_stream(msg, env)
            return
        self._busy += 1
        arrived = self._arrival()
        if self.cls.concurrency == 1:
            passes = LOOP_PASSES.seen()
            if passes != self._loop_pass:  # the loop ran since its last turn (tasks.py)
                self._loop_pass = passes
                self._yielded_at = time.monotonic()
            lock = self._lock
            try:
                if not lock.try_acquire():  # busy: wait for the turn in order
                    await lock.acquire()
                try:
                    await self._handle(msg, env, arrived)
                finally:
                    lock.release()
            finally:
                self._done()
            if self.last_active - self._yielded_at > LOOP_TURN_EVERY:
                # nats-py hands a subscription's queued messages over without
                # returning to the loop; handlers that never await (blocking work)
                # would keep the connection from reading for the whole backlog,
                # until NATS cuts it off as a slow consumer. Give the reader a turn.
                self._yielded_at = self.last_active
                await asyncio.sleep(0)
            return
        await self._gate.acquire()
        self._spawn(self._handle_then_release(msg, env, arrived))

    async def _deliver_stream(self, msg: Msg, env: Inbound) -> None:
        """A stream request to a one-at-a-time actor: its turn runs in a task of its
        own, and this returns once the turn ended or its producer gave it back to
        wait for the consumer's credit, so the actor's next messages are not held
        up by a slow consumer (the generator waits at a ``yield`` meanwhile)."""
        self._busy += 1
        arrived = self._arrival()
        turn = SharedTurn(self._lock)

        async def run() -> None:
            try:
                await turn.acquire()
                try:
                    await self._handle(msg, env, arrived, turn)
                finally:
                    turn.gate.release()  # held again: the producer takes it before it ends
            finally:
                turn.given_back.set()
                self._done()

        self._spawn(run(), eager=True)
        await turn.given_back.wait()

    async def deliver_durable(self, msg: Msg, env: Inbound, attempt: int = 0) -> Exception | None:
        """Handle one durable message to the end and say how it went (``attempt``:
        its delivery count, for the spans; 0 when not known).

        ``msg`` must carry no reply subject (a JetStream message's reply is its
        ack subject, which a reply would ack by accident).
        """
        self._busy += 1
        arrived = self._arrival()
        gate = self._gate
        stored = msg.headers.get(H_STORED) if msg.headers else None
        position = Position.parse(stored) if stored else None
        try:
            async with gate:
                return await self._handle(msg, env, arrived, position=position, attempt=attempt)
        finally:
            self._done()

    def deliver_later(self, msg: Msg, env: Inbound, *, eager: bool = True) -> None:
        """Queue a message without blocking the caller (shared subscriptions),
        within the mailbox bound (``mailbox_size`` messages, ``mailbox_bytes``
        bytes): what does not fit is dropped (an ask refused).

        One task takes the queue's messages in turn while there are any, as a
        subscription's own task does: a task for each message cost a shared
        topic subscription a third of its time (``topic_fanout.py``).
        ``eager``: that task starts at once where Python can (3.12+), see below;
        False lets the messages that arrive meanwhile join its queue instead."""
        size = len(msg.data)
        backlog = self._backlog
        if (
            backlog is not None and len(backlog) >= self.cls.mailbox_size
        ) or self._queued_bytes + size > self.cls.mailbox_bytes:
            mailboxes = self.rt.mailboxes
            spawn(mailboxes.overflowed(self.address, self.cls, msg.reply), self.address)
            return
        self._queued_bytes += size
        if backlog is None:  # no task takes them: this message starts one
            self._backlog = _NONE_WAITING  # a deque only once a second one waits
            # Started at once where Python can (3.12+): a turn that need not wait
            # is done before the type's reader reads on, without a pass of the loop
            # in between (lazily hosted activations on 3.12: 16,000/s -> 18,000-22,000/s).
            self._spawn(self._deliver_queued(msg, env), eager=eager)
        elif backlog:
            backlog.append((msg, env))
        else:
            self._backlog = deque(((msg, env),))

    async def _deliver_queued(self, msg: Msg, env: Inbound) -> None:
        try:
            while True:
                try:
                    await self.deliver(msg, env)
                finally:
                    self._queued_bytes -= len(msg.data)
                backlog = self._backlog
                if not isinstance(backlog, deque) or not backlog:
                    break
                msg, env = backlog.popleft()
        finally:  # ended, or cancelled by stop(): what still waits is dropped
            self._queued_bytes -= sum(len(msg.data) for msg, _ in self._backlog or ())
            self._backlog = None

    async def _handle_then_release(self, msg: Msg, env: Inbound, arrived: int) -> None:
        try:
            await self._handle(msg, env, arrived)
        finally:
            self._gate.release()
            self._done()

    def _done(self) -> None:
        self._busy -= 1
        self.last_active = time.monotonic()
        if self._busy == 0 and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def timer_turn(self, name: str, tick: Callable[[], Awaitable[None]]) -> None:
        """One tick of a timer, as a turn of its own (``actors/timers.py``): never
        beside a message, its state change saved, and not counted as activity."""
        if self.state != "running":
            return
        self._busy += 1  # stop() waits for it like for a message
        try:
            async with self._gate:
                inst = self.instance
                if inst is None:
                    return
                try:
                    await tick()
                    if self.keeper is not None:
                        await self.keeper.end_turn(inst, None, None)
                except Exception as exc:
                    if self.keeper is not None:
                        inst.state = self.keeper.rolled_back()
                    log.warning("%s: timer %r failed: %r", self.address, name, exc)
        finally:
            self._busy -= 1  # the idle clock is left alone: a timer keeps no one alive
            if self._busy == 0 and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)

    # -- what an observed cell adds (actors/observed_cell.py); nothing here -----
    def _arrival(self) -> int:
        """When a message arrived (ns), for its span; 0: nobody measures."""
        return 0

    def _counted_restart(self) -> None:
        """A restart happened (metrics count it)."""

    def _counted_failure(self, env: Inbound, err: ActorBusError) -> None:
        """A handler failed (metrics count it)."""

    async def _handle(
        self,
        msg: Msg,
        env: Inbound,
        arrived: int = 0,
        turn: Turn | None = None,
        position: Position | None = None,
        attempt: int = 0,
    ) -> Exception | None:
        """Handle one message and answer it; returns what went wrong, if anything
        (the durable path acks, retries or dead-letters by it). ``turn``: the
        turn held for it, when a stream may give it back (else the cell's gate).
        ``position``: where a durable message is stored, for a declared state to
        commit with (and to tell one it reflects already). ``attempt``: a
        durable message's delivery count (the observed cell's spans say it)."""
        inst = self.instance
        if inst is None and not self._is_ready:
            starter, self.starter = self.starter, None
            if starter is not None:  # activated by this message: it starts the instance
                await starter(self)
            else:
                await self._wait_ready()  # starting or restarting: hold the message
            inst = self.instance
        if inst is None or self.state != "running":
            why = f"actor {self.address} is {self.state}"
            if self.failure is not None:
                why += f" after repeated failures ({_describe(self.failure)})"
            stopped = ActorStoppedError(why)
            await self.rt.replies.error(msg, stopped, env, self.address)
            return stopped
        if position is not None and self.keeper is not None and self.keeper.applied(position):
            return None
        spec = self.cls.handlers.get(env.intent)
        if spec is None:
            unknown = self._unknown(env.intent)
            await self.rt.replies.error(msg, unknown, env, self.address)
            return unknown
        try:
            if spec.model is not None:
                arg = validate(spec.model, env.content, env.intent)
            else:
                arg = _raw_argument(spec, env)
        except ActorBusError as err:
            await self.rt.replies.error(msg, err, env, self.address)
            return err
        if spec.streaming and msg.reply and not env.context.stream:
            wrong_call = WrongCallError(
                f"{self.address}.{spec.method} streams its reply: call stream(), not ask()"
            )
            await self.rt.replies.error(msg, wrong_call, env, self.address)
            return wrong_call
        token = current_incoming.set(Incoming(env, self.address))
        try:
            if spec.streaming:
                if turn is None:
                    turn = self._gate
                failed = await self.env.streams.produce(
                    msg, env, getattr(inst, spec.method)(arg), self.error_for, turn
                )
                if failed is not None and self._crashes(failed):
                    await self._restart(failed)
                elif self.keeper is not None:
                    await self.keeper.end_turn(inst, failed, position)
                return failed
            result = await getattr(inst, spec.method)(arg)
            if self.keeper is not None:  # saved before the answer says it is done
                await self.keeper.end_turn(inst, None, position)
            if not msg.reply:
                return None
            if env.context.stream:  # stream() of a plain handler: one item, then the end
                await self.env.streams.single(msg, env, result)
            else:
                await self.rt.replies.reply(msg, env, self.address, result)
        except Exception as exc:
            if self.keeper is not None:
                inst.state = self.keeper.rolled_back()  # a failed turn leaves no trace
            await self._handler_failed(msg, env, spec, exc)
            if isinstance(exc, StateConflictError):
                await self._give_up(
                    exc,
                    "saving its state",
                    "at once: its state was written by a newer activation, or deleted",
                )
            return exc
        finally:
            current_incoming.reset(token)
        return None

    async def _handler_failed(
        self, msg: Msg, env: Inbound, spec: HandlerSpec, exc: Exception
    ) -> None:
        err = self.error_for(exc)
        self._counted_failure(env, err)
        self.rt.failures.handler_failed(
            self.cls.type_name, f"{self.address}.{spec.method}", env.id, exc
        )
        if msg.reply:
            await self.rt.replies.error(msg, err, env, self.address)
        if self._crashes(exc):
            await self._restart(exc)

    def _crashes(self, exc: BaseException) -> bool:
        """Does this exception mean the instance's state is broken?"""
        return isinstance(exc, (Crash, *self.cls.crash_on))

    def error_for(self, exc: BaseException) -> ActorBusError:
        if isinstance(exc, ActorBusError) and not isinstance(exc, Crash):
            return exc
        tb = traceback.format_exc() if self.rt.debug else None
        return RemoteError(
            str(exc), remote_type=type(exc).__name__, address=self.address, remote_traceback=tb
        )

    def _unknown(self, intent: str) -> UnknownIntentError:
        known = ", ".join(sorted(self.cls.handlers)) or "none"
        return UnknownIntentError(
            f"{self.address} has no handler for intent {intent!r} (handles: {known})"
        )


def _raw_argument(spec: HandlerSpec, env: Inbound) -> Any:
    """The content for a bytes/dict/str (or untyped) handler, type-checked."""
    content = env.content
    expected: type | None = {"bytes": bytes, "dict": dict, "text": str}.get(spec.kind)
    if expected is not None and not isinstance(content, expected):
        raise ValidationFailedError(
            f"intent {env.intent!r} expects {expected.__name__} content, "
            f"got {type(content).__name__}"
        )
    return content


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
