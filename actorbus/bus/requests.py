"""Request/reply over one wildcard inbox, with one timer for all deadlines.

nats-py's ``request()`` does per call: two subject validations, a NUID, an
``os.urandom`` token, a done-callback closure and ``asyncio.wait_for`` (whose
timer handle is pushed on, cancelled in and swept from the event loop's heap
with Python-level comparisons). Every ``ask`` pays for that, so the system
keeps its own multiplexer: one subscription on ``{inbox_prefix}.{id}.*``, a
counter for tokens, and a heap of ``(deadline, token)`` tuples (compared in C)
behind a single event-loop timer set for the earliest deadline. Answered
requests leave their heap entry behind; it is dropped when its deadline comes,
or in a rebuild once stale entries outnumber live ones.

A stream's frames come to the same inbox (:meth:`RequestMux.new_stream`): a
token whose replies go to its :class:`StreamFrames` until the stream is done, so
a stream costs no subscription of its own (no SUB and UNSUB on the server per
stream).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actorbus.bus.client import EncodedHeaders
from actorbus.bus.transport import Messaging

NO_RESPONDERS_STATUS = "503"
Accept = Callable[[Msg], bool]
_MIN_REBUILD = 1024


class RequestTimeout(Exception):
    """No reply before the deadline (the caller turns it into a typed error)."""


class NoResponders(Exception):
    """The server said nobody is subscribed on the subject."""


class StreamFrames:
    """One stream's frames as they come, for its one reader.

    A deque, and a future while the reader waits: the wait for each frame is on
    its caller's critical path, and an ``asyncio.Queue`` read inside an
    ``asyncio.timeout`` does far more than one future and one timer (a timeout
    object, a rescheduled timer, the task's cancel count checked on the way
    out). A frame already there is taken with no timer at all."""

    __slots__ = ("_ready", "_waiter")

    def __init__(self) -> None:
        self._ready: deque[Msg | BaseException] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, frame: Msg | BaseException) -> None:
        self._ready.append(frame)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self, timeout: float) -> Msg | BaseException:
        """The next frame (an exception when the connection is gone for good);
        TimeoutError when none comes within ``timeout`` seconds."""
        if not self._ready:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            expiry = loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                expiry.cancel()
                self._waiter = None
            if not self._ready:
                raise TimeoutError
        return self._ready.popleft()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RequestMux:
    def __init__(self, nc: Messaging, prefix: str) -> None:
        self.nc = nc
        self.prefix = prefix if prefix.endswith(".") else prefix + "."
        # token -> (future, deadline, the check a reply must pass, if any)
        self._pending: dict[str, tuple[asyncio.Future[Msg], float, Accept | None]] = {}
        self.dropped = 0  # replies that failed their check
        self._deadlines: list[tuple[float, str]] = []  # heap
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._tokens = itertools.count(1)
        self._streams: dict[str, StreamFrames] = {}
        self._sub: Subscription | None = None
        # The connection's loop, kept: on 3.11 asyncio.get_running_loop() is a
        # getpid() system call, once per request here (measured: 2% of a caller's CPU).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._sub = await self.nc.subscribe(self.prefix + "*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        token = msg.subject[len(self.prefix) :]
        entry = self._pending.get(token)
        if entry is None:
            frames = self._streams.get(token)
            if frames is not None:
                frames.put(msg)
            return
        future, _, accept = entry
        if accept is not None and not accept(msg):  # a forged reply: keep waiting
            self.dropped += 1
            return
        del self._pending[token]
        if not future.done():
            future.set_result(msg)

    def new_inbox(
        self, timeout: float | None = None, accept: Accept | None = None
    ) -> tuple[str, asyncio.Future[Msg]]:
        """Reserve a reply subject; the caller publishes with it and awaits the future,
        which fails with RequestTimeout after ``timeout`` seconds (if given). A reply
        ``accept`` refuses is dropped, and the wait goes on."""
        token = format(next(self._tokens), "x")
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        deadline = math.inf if timeout is None else loop.time() + timeout
        self._pending[token] = (future, deadline, accept)
        if timeout is not None:
            heapq.heappush(self._deadlines, (deadline, token))
            if deadline < self._timer_at:
                self._arm(loop, deadline)
            elif len(self._deadlines) > max(_MIN_REBUILD, 2 * len(self._pending)):
                self._rebuild()
        return self.prefix + token, future

    @property
    def alone(self) -> bool:
        """Whether the one request or stream just reserved is all that is in
        flight: then it is written at once (``publish_now``'s ``at_once``) rather
        than at the flusher's next pass, a loop pass sooner. Requests many at a
        time are left to the flusher, which writes a pass's worth in one call
        (``bench/ask.py``, six runs each way: p50 1.09x -> 1.03x of raw nats-py,
        the throughput with 100 in flight not lower)."""
        return len(self._pending) + len(self._streams) == 1

    def new_stream(self) -> tuple[str, StreamFrames]:
        """Reserve a reply subject for many replies, each kept in the frames as
        it comes (an exception when the connection is gone for good) until
        ``discard``."""
        token = format(next(self._tokens), "x")
        frames = StreamFrames()
        self._streams[token] = frames
        return self.prefix + token, frames

    def discard(self, inbox: str) -> None:
        """Forget a reserved inbox whose replies are no longer awaited."""
        token = inbox[len(self.prefix) :]
        self._pending.pop(token, None)
        self._streams.pop(token, None)

    async def request(
        self,
        subject: str,
        body: bytes,
        headers: Any,
        timeout: float,
        accept: Accept | None = None,
    ) -> Msg:
        inbox, future = self.new_inbox(timeout, accept)
        try:
            encoded = headers is None or isinstance(headers, EncodedHeaders)
            at_once = self.alone
            if not (encoded and self.nc.publish_now(subject, body, inbox, headers, at_once)):
                await self.nc.publish(subject, body, reply=inbox, headers=headers)
            msg = await future
        finally:
            self._pending.pop(inbox[len(self.prefix) :], None)
        if not msg.data and msg.headers and msg.headers.get("Status") == NO_RESPONDERS_STATUS:
            raise NoResponders()
        return msg

    def fail_all(self, exc: BaseException) -> None:
        """Wake every waiting request with ``exc`` (the connection is gone for good)."""
        pending, self._pending = self._pending, {}
        self._deadlines.clear()
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(exc)
        streams, self._streams = self._streams, {}
        for frames in streams.values():
            frames.put(exc)

    # -- deadlines -----------------------------------------------------------
    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._expire_due)
        self._timer_at = when

    def _expire_due(self) -> None:
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, token = heapq.heappop(heap)
            entry = self._pending.pop(token, None)
            if entry is not None and not entry[0].done():
                entry[0].set_exception(RequestTimeout())
        if heap:
            self._arm(loop, heap[0][0])

    def _rebuild(self) -> None:
        """Drop the entries of answered requests (amortised: at most every n pushes)."""
        self._deadlines = [(d, t) for t, (_, d, _) in self._pending.items() if d != math.inf]
        heapq.heapify(self._deadlines)
