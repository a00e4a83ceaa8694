"""Streamed replies: a handler that yields, a caller that iterates.

Wire protocol (core NATS, one publisher to one inbox, so order is kept):

- the request carries ``context.stream = true`` and a reply inbox;
- each item goes to the inbox as a frame with header ``Ab-Seq: n`` (1, 2, ...);
  a consumer that says ``Ab-Batch: k`` in its request takes frames of up to k
  items (intent ``$items``, content ``[[intent, content], ...]``, ``Ab-Seq`` the
  first item's): what the generator made while the last frame was sent goes
  out as one message (``ItemsAhead``), which makes a fast stream several times
  faster and leaves a slow one (tokens) as it was;
- the last frame is intent ``$end`` (or ``$error`` with the remote error);
- the first frame carries a reply subject, which the consumer answers once it
  has handed the item over: a producer whose first frame finds nobody
  subscribed (the server's no-responders status) or gets no answer within
  ``start_timeout`` (2 s) stops at once, so a request whose reply subject
  nobody reads cannot pin an actor. The first frame is written to the socket
  at once (the stream's time to first item), the rest as the flusher takes
  them;
- flow control: the producer may run a window of items ahead of the consumer:
  ``window`` items (256) at most, fewer when about ``window_bytes`` (1 MiB) of
  them would be more (sized by the first item, which goes alone, and again at
  each credit from the bytes sent so far). The consumer does not need to know
  the window: it answers what it is asked. Halfway through each window a frame
  carries ``Ab-Credit: <inbox>``; when the consumer takes that item it answers
  on the inbox, which lets the producer go one more window. While it waits for
  credit the producer gives the actor's turn back (the generator is suspended
  at a ``yield``: none of its code runs meanwhile), so a slow or stalled
  consumer never keeps the actor from its other messages; it takes the turn
  again before the generator goes on. A producer that gets no credit within
  ``credit_timeout`` takes the consumer for gone and stops;
- a caller that stops early (break, error, or a timeout before any frame)
  publishes ``{"cancel": <request id>}`` on ``{ns}.ctl.cancel``. Every system
  listens there (cancels are rare, so a broadcast is cheaper than a subscription
  per stream); the one producing that stream cancels its task and closes the
  generator. A cancel that arrives before the stream started is remembered, so
  the stream never starts.

The caller checks the sequence, so a lost frame is a ProtocolError, never a
silently shortened stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from nats.aio.msg import Msg

from actorbus.actors.messages import (
    INTENT_END,
    INTENT_ERROR,
    INTENT_ITEMS,
    from_content,
    to_content,
)
from actorbus.actors.pipeline import Outgoing, decode_answer
from actorbus.bus.client import with_header
from actorbus.bus.requests import NO_RESPONDERS_STATUS, RequestTimeout
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    AuthError,
    NoRespondersError,
    ProtocolError,
    error_from_wire,
)
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import H_BATCH, H_CREDIT, H_SEQ, pack, unpack
from actorbus.security.sealing import check_answer
from actorbus.security.sessions import OutboundSession

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.streams")

_REMEMBERED_CANCELS = 1024
MAX_FRAME_ITEMS = 32  # items a consumer takes in one frame (at most half a window)


class StreamProducers:
    """The streams this system is producing, so a consumer can cancel one."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._active: dict[str, asyncio.Task[Exception | None]] = {}
        self._cancelled_early: OrderedDict[str, None] = OrderedDict()
        self._stopped: set[str] = set()  # streams cancelled by stop(), until their end

    @property
    def control_subject(self) -> str:
        return self.rt.subjects.control("cancel")

    async def on_control(self, msg: Msg) -> None:
        try:
            body = unpack(msg.data)
            stream_id = body["cancel"]
        except Exception:
            log.warning("ignoring malformed control message on %s", msg.subject)
            return
        if self.stop(stream_id):
            return
        self._cancelled_early[str(stream_id)] = None
        while len(self._cancelled_early) > _REMEMBERED_CANCELS:
            self._cancelled_early.popitem(last=False)

    def stop(self, stream_id: str) -> bool:
        """Cancel the task producing ``stream_id`` (False: none here produces it)."""
        task = self._active.get(stream_id)
        if task is None:
            return False
        self._stopped.add(stream_id)
        task.cancel()
        return True

    async def produce(
        self,
        msg: Msg,
        env: Inbound,
        agen: AsyncIterator[Any],
        error_for: Callable[[BaseException], ActorBusError],
        turn: Turn | None = None,
    ) -> Exception | None:
        """Run a streaming handler to completion, cancellation or error; returns the
        handler's exception, if it raised one (the cell decides about a restart).

        ``turn`` is the actor's turn, held by the caller: given back while the
        producer waits for credit, and held again when this returns. It runs in
        the caller's task, which must be the message's own: the consumer's
        cancel (or a consumer that is not there) cancels that task."""
        if not msg.reply:
            log.warning("stream request %s to %s has no reply inbox; dropped", env.id, env.dst)
            await _close(agen)
            return None
        if self._cancelled_early.pop(env.id, 0) is None:
            log.debug("stream %s was cancelled before it started", env.id)
            await _close(agen)
            return None
        task = asyncio.current_task()
        assert task is not None
        self._active[env.id] = task
        try:
            return await self._pump(msg, env, agen, error_for, turn)
        finally:
            self._active.pop(env.id, None)
            self._stopped.discard(env.id)

    async def single(self, request: Msg, env: Inbound, result: Any) -> None:
        """A plain handler called with stream(): its reply as the only item."""
        assert request.reply
        intent, content = to_content(result)
        await self.rt.replies.send(request.reply, env, intent, content, {H_SEQ: "1"}, msg=request)
        await self.rt.replies.send(request.reply, env, INTENT_END, None, {H_SEQ: "2"}, msg=request)

    async def _pump(
        self,
        request: Msg,
        env: Inbound,
        agen: AsyncIterator[Any],
        error_for: Callable[[BaseException], ActorBusError],
        turn: Turn | None,
    ) -> Exception | None:
        rt = self.rt
        inbox = request.reply
        settings = rt.stream_settings
        # The first item goes alone, and the window is sized by it (window_for):
        # at most settings.window items, fewer when they are large.
        window = settings.window
        allowed = 1  # the last seq we may send before the next credit
        asked = True  # the credit of this window asked for (none in the first frame)
        credit: asyncio.Future[Msg] | None = None
        credit_inbox = ""
        seq = sent_bytes = 0
        abandoned: list[str] = []  # why the consumer was taken for gone, if it was
        frame_items = 1  # the consumer's (_frame_items), read once the first item is out
        ahead = ItemsAhead(agen, allowed)
        try:
            while True:
                if seq == allowed:
                    assert credit is not None
                    try:  # asyncio.timeout: a cancel arriving with the credit still cancels
                        async with asyncio.timeout(settings.credit_timeout):
                            await _given_back_while(turn, credit)
                    except TimeoutError:
                        why = (
                            f"stream {env.id} stopped: the consumer took no item for "
                            f"{settings.credit_timeout:g}s"
                        )
                        log.warning("%s (consumer %s)", why, env.src)
                        await rt.replies.send_error(
                            inbox, ProtocolError(why), env, {H_SEQ: str(seq + 1)}, msg=request
                        )
                        return None
                    finally:
                        rt.mux.discard(credit_inbox)
                    window = settings.window_for(sent_bytes, seq)
                    allowed += window
                    ahead.allow(window)
                    asked = False
                asks_credit = allowed - window // 2  # the item whose taking grants more
                frame_ends_by = asks_credit if seq < asks_credit else allowed
                items = await ahead.take(min(frame_items, frame_ends_by - seq))
                if not items:
                    break
                headers = {H_SEQ: str(seq + 1)}
                first = seq == 0
                seq += len(items)
                if not asked and seq >= asks_credit:
                    asked = True
                    credit_inbox, credit = rt.mux.new_inbox()
                    headers[H_CREDIT] = credit_inbox
                hello = self._greet(env, abandoned) if first else ""
                sent_bytes += await rt.replies.send_items(
                    inbox, env, items, headers, msg=request, reply=hello
                )
                if first:
                    frame_items = _frame_items(request)
                    window = allowed = settings.window_for(sent_bytes, seq)
                    ahead.allow(window - 1)
                    asked = False
            await rt.replies.send(inbox, env, INTENT_END, None, {H_SEQ: str(seq + 1)}, msg=request)
        except asyncio.CancelledError:
            if env.id not in self._stopped:
                raise  # not this stream's end: its task's (a stop, a shutdown)
            self._stopped.discard(env.id)
            this = asyncio.current_task()
            assert this is not None
            this.uncancel()  # the stream's end is handled here: the task goes on
            if abandoned:
                log.warning("stream %s to %s stopped: %s", env.id, env.src, abandoned[0])
            else:
                log.debug("stream %s cancelled by its consumer after %d items", env.id, seq)
            if credit_inbox:
                rt.mux.discard(credit_inbox)
        except Exception as exc:
            await rt.replies.send_error(
                inbox, error_for(exc), env, {H_SEQ: str(seq + 1)}, msg=request
            )
            return exc
        finally:
            await ahead.stop()
            await _close(agen)
        return None

    def _greet(self, env: Inbound, abandoned: list[str]) -> str:
        """A reply subject for the first frame; the producing task (this one) is
        stopped if nobody is there to answer it, or nobody does in time."""
        timeout = self.rt.stream_settings.start_timeout
        hello, answered = self.rt.mux.new_inbox(timeout)

        def check(done: asyncio.Future[Msg]) -> None:
            if done.cancelled():
                return
            failed = done.exception()
            if isinstance(failed, RequestTimeout):
                why = f"the consumer did not take the first item within {timeout:g}s"
            elif failed is not None:
                why = f"the consumer's inbox failed: {failed!r}"
            elif (done.result().headers or {}).get("Status") == NO_RESPONDERS_STATUS:
                why = "nobody is subscribed to its reply subject"
            else:
                return  # the consumer is there
            abandoned.append(why)
            self.stop(env.id)

        answered.add_done_callback(check)
        return hello


class ItemsAhead:
    """A streaming handler's generator, run in a task of its own so that the items
    it makes while the producer sends go out together, as one frame.

    It may make at most ``allowed`` items (the producer's window; ``allow`` adds
    to it when credit comes): with none left it waits before asking the generator
    for its next item, so a producer waiting for credit holds a generator
    suspended at a ``yield``, as the turn given back requires. The first item is
    made by the producer's own task and handed over alone, and the task starts
    once it has gone out. A frame then holds what was made while the previous
    one was sent: one item per frame for a generator that waits (tokens from a
    model), many for one that does not."""

    def __init__(self, agen: AsyncIterator[Any], allowed: int) -> None:
        self._agen = agen
        self._allowed = allowed
        self._made = 0
        self._ready: deque[Any] = deque()
        self._may_make = asyncio.Event()
        self._wake = asyncio.Event()
        self._ended = False
        self._failure: BaseException | None = None
        self._task: asyncio.Task[None] | None = None  # started after the first item

    def allow(self, items: int) -> None:
        self._allowed += items
        self._may_make.set()

    async def take(self, most: int) -> list[Any]:
        """Up to ``most`` items, waiting for the first; [] once the generator is
        done; the generator's exception once its items before it were taken."""
        if self._task is None and not self._ended:
            if not self._made:
                return await self._first()
            # Started only now, after the first frame was published: it is
            # written before the generator runs on (nats-py's flusher first).
            self._task = asyncio.create_task(self._make())
        while not self._ready:
            if self._ended:
                if self._failure is not None:
                    raise self._failure
                return []
            self._wake.clear()
            await self._wake.wait()
        ready = self._ready
        if most >= len(ready):
            items = list(ready)
            ready.clear()
            return items
        return [ready.popleft() for _ in range(most)]

    async def stop(self) -> None:
        """Stop the generator's task (bounded: cancelled, never waited out)."""
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _first(self) -> list[Any]:
        try:
            item = await anext(self._agen)
        except StopAsyncIteration:
            self._ended = True
            return []
        except BaseException:
            self._ended = True
            raise
        self._made = 1
        return [item]

    async def _make(self) -> None:
        agen = self._agen
        try:
            while True:
                while self._made >= self._allowed:
                    self._may_make.clear()
                    await self._may_make.wait()
                item = await anext(agen)
                self._made += 1
                self._ready.append(item)
                self._wake.set()
        except StopAsyncIteration:
            pass
        except Exception as exc:
            self._failure = exc
        finally:
            self._ended = True
            self._wake.set()


def _frame_items(request: Msg) -> int:
    """How many items the consumer takes in one frame (``Ab-Batch``; 1 for a
    consumer that does not say)."""
    said = (request.headers or {}).get(H_BATCH)
    if not said:
        return 1
    try:
        return max(1, min(int(said), MAX_FRAME_ITEMS))
    except ValueError:
        return 1


class Turn(Protocol):
    """An actor's turn (its lock, or its semaphore with ``concurrency`` > 1)."""

    async def acquire(self) -> Any: ...

    def release(self) -> None: ...


class SharedTurn:
    """A one-at-a-time actor's turn as a streamed reply holds it: its producer
    gives it back while it waits for credit, and says so (``given_back``), so
    whoever waits for the turn to end can go on to the actor's next message."""

    def __init__(self, gate: Turn) -> None:
        self.gate = gate
        self.given_back = asyncio.Event()

    async def acquire(self) -> Any:
        return await self.gate.acquire()

    def release(self) -> None:
        self.gate.release()
        self.given_back.set()


async def _given_back_while(turn: Turn | None, waiting: asyncio.Future[Msg]) -> None:
    """Wait with the actor's turn given back; hold it again before returning,
    whatever happens (the caller's ``async with`` releases it)."""
    if turn is None:
        await waiting
        return
    turn.release()
    try:
        await waiting
    finally:
        cancelled = False
        while True:  # a cancelled acquire holds nothing: acquire again, then re-raise
            try:
                await turn.acquire()
                break
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError


async def _close(agen: AsyncIterator[Any]) -> None:
    aclose = getattr(agen, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


def cancel_message(stream_id: str) -> bytes:
    return pack({"cancel": stream_id})


async def consume_stream(
    rt: Runtime,
    address: str,
    subject: str,
    prepare: Callable[[], Awaitable[tuple[Outgoing, OutboundSession | None]]],
    timeout: float,
    returns: type[Any] | None,
) -> AsyncGenerator[Any, None]:
    """The caller's side: send the request (``prepare`` encodes it, on its security
    session when it has one, once the caller starts to iterate), yield items in
    order, check the sequence, grant credit as items are taken, cancel the
    producer on early exit. With a session, a frame that fails its check is
    dropped (a forged one: the real one is still awaited)."""
    out, session = await prepare()
    inbox, frames = rt.mux.new_stream()
    finished = False
    try:
        headers = with_header(out.headers, H_BATCH, str(MAX_FRAME_ITEMS))
        if not rt.conn.publish_now(subject, out.body, headers, inbox, rt.mux.alone):
            await rt.conn.publish(subject, out.body, headers, reply=inbox)
        expected = 1
        while True:
            try:
                msg = await frames.get(timeout)
            except TimeoutError:
                raise AskTimeoutError(address, out.intent, timeout, expected - 1) from None
            if isinstance(msg, BaseException):
                finished = True
                raise msg
            hdrs = msg.headers or {}
            if hdrs.get("Status") == NO_RESPONDERS_STATUS:
                finished = True
                raise NoRespondersError(address, out.intent)
            if session is not None and not _authentic(session, msg):
                continue
            seq = int(hdrs.get(H_SEQ, expected))
            if seq != expected:
                finished = True
                raise ProtocolError(
                    f"stream from {address} lost frames: expected #{expected}, got #{seq}"
                )
            if msg.reply:  # the first frame: tell the producer we are here, once
                # the item is handed over (the flusher writes it at the next pass
                # either way; the item need not wait for it to be queued)
                asyncio.get_running_loop().call_soon(_answer_greeting, rt, msg.reply)
            intent, content = decode_answer(msg, address, session)
            if intent == INTENT_END:
                finished = True
                return
            if intent == INTENT_ERROR:
                finished = True
                raise error_from_wire(content, address)
            if intent == INTENT_ITEMS:
                frame = _frame(content, address)
                for item_intent, item in frame:
                    yield from_content(item_intent, item, returns)
                expected += len(frame)
            else:
                yield from_content(intent, content, returns)
                expected += 1
            credit_inbox = hdrs.get(H_CREDIT)
            if credit_inbox and not rt.conn.publish_now(credit_inbox, b""):
                await rt.conn.publish(credit_inbox, b"")  # the item was taken: go on
    finally:
        # Shielded: a consumer cancelled once more while it closes (a task both
        # leaving its loop and being cancelled) must still stop the producer.
        rt.mux.discard(inbox)
        cancel = None if finished else cancel_message(out.id)
        if cancel is not None:
            await asyncio.shield(asyncio.ensure_future(_cancel(rt, cancel)))


def _answer_greeting(rt: Runtime, subject: str) -> None:
    if not rt.conn.publish_now(subject, b""):
        rt.spawn_task(_publish_quietly(rt, subject), "a stream's answer to its first frame")


async def _publish_quietly(rt: Runtime, subject: str) -> None:
    """An empty publish whose failure needs no word: a connection gone for good
    fails the stream's wait for its next frame, which says so."""
    with contextlib.suppress(ActorBusError):
        await rt.conn.publish(subject, b"")


def _frame(content: Any, address: str) -> list[tuple[str, Any]]:
    """A ``$items`` frame's items, checked before the first is handed over."""
    if isinstance(content, list) and content:
        items = [tuple(item) for item in content if isinstance(item, list) and len(item) == 2]
        if len(items) == len(content) and all(isinstance(i, str) for i, _ in items):
            return items
    raise ProtocolError(f"stream from {address} sent a malformed frame of items")


def _authentic(session: OutboundSession, msg: Msg) -> bool:
    try:
        check_answer(msg, session)
    except AuthError as err:
        log.warning("dropped a stream frame that failed its check: %s", err)
        return False
    return True


async def _cancel(rt: Runtime, cancel: bytes) -> None:
    """Tell the producer of a stream that did not finish to stop."""
    nc = rt.nc
    if nc.is_connected:
        with contextlib.suppress(Exception):
            await nc.publish(rt.subjects.control("cancel"), cancel)
