"""Background tasks that cannot die quietly, and stops that cannot hang.

Every long-running loop actorbus starts (durable readers, lease renewers,
watchers, relays) runs under :func:`supervise`: an unexpected exception is
logged loudly, with what the task serves, and the loop starts again after a
backoff, so one bad moment never leaves a queue unread for good. One-shot tasks
go through :func:`spawn`, which logs a failure instead of leaving it as "Task
exception was never retrieved".

:func:`stop_task` is the one way to stop a task: it cancels it *until it is
done*, bounded. On Python 3.11, ``asyncio.wait_for`` can swallow a
cancellation that arrives as its inner future completes; a loop waiting that
way survives one ``cancel()`` and an unbounded ``await task`` then hangs
forever. Cancelling again each round, within a deadline, cannot hang.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("actorbus.tasks")
T = TypeVar("T")

_HEALTHY_AFTER = 60.0  # a run this long resets the backoff


def backoff_delay(attempt: int, initial: float, maximum: float) -> float:
    """Exponential backoff with 'equal jitter': half fixed, half random."""
    ceiling = min(maximum, initial * 2.0 ** min(attempt, 20))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def supervise(
    what: str,
    run: Callable[[], Awaitable[None]],
    *,
    backoff: tuple[float, float] = (0.1, 5.0),
    logger: logging.Logger = log,
) -> asyncio.Task[None]:
    """Run ``run()`` in a task; restart it with backoff whenever it raises.

    ``what`` names the task in logs (say, ``"durable reader of billing/eu"``).
    Returning normally ends the task; cancelling it (``stop_task``) stops it.
    """
    return asyncio.create_task(_supervised(what, run, backoff, logger), name=what)


async def _supervised(
    what: str,
    run: Callable[[], Awaitable[None]],
    backoff: tuple[float, float],
    logger: logging.Logger,
) -> None:
    loop = asyncio.get_running_loop()
    failures = 0
    while True:
        started = loop.time()
        try:
            await run()
            return
        except Exception:
            if loop.time() - started > _HEALTHY_AFTER:
                failures = 0
            delay = backoff_delay(failures, *backoff)
            failures += 1
            logger.error(
                "%s crashed (failure %d); restarting in %.2fs", what, failures, delay, exc_info=True
            )
        await asyncio.sleep(delay)


def spawn(
    coro: Coroutine[Any, Any, T],
    what: str,
    tasks: set[asyncio.Task[Any]] | None = None,
    *,
    eager: bool = False,
) -> asyncio.Task[T]:
    """A one-shot task whose failure is logged (never "never retrieved");
    kept in ``tasks`` (if given) until it ends, so it can be waited for.

    ``eager``: on Python 3.12+ the task runs at once, up to its first real wait,
    inside this call (``eager_start``), instead of one pass of the loop later. It
    is its own task from its first line (``current_task()``, a cancel, a timeout
    are its own). Python 3.11 has no eager start: there it starts on the next
    pass, as without it."""
    task = _eager_task(coro, what) if eager else asyncio.create_task(coro, name=what)
    if tasks is not None:
        tasks.add(task)
    task.add_done_callback(lambda t: _settled(t, what, tasks))
    return task


# Seconds of messages handled back to back in one task before the loop gets a
# turn (an actor's mailbox, a lazily hosted type's shared subscription).
LOOP_TURN_EVERY = 0.002


class LoopPasses:
    """Tells whether the event loop has run anything else since a task last looked.

    Work handed over message by message (nats-py gives a subscription's queued
    messages to its callback without returning to the loop) must give the loop
    a turn after a while; but work that waited in between (its task suspended,
    the loop ran) has had it. Telling the two apart by the clock alone (idle for
    2 ms?) took a loaded actor's steady batches, a few hundred microseconds
    apart, for one long run: it gave the loop a turn in the middle of every few
    batches, and every such turn wrote the batch's replies in two pieces (1.75
    socket writes per read against raw nats-py's one). A callback scheduled
    here runs only when the loop gets to it, so a changed count means it did.
    """

    def __init__(self) -> None:
        self._count = 0
        self._armed: asyncio.AbstractEventLoop | None = None  # the loop watched

    def seen(self) -> int:
        """The passes counted so far (the next one is being watched for)."""
        armed = self._armed
        if armed is None or armed.is_closed():  # (a loop closed before it got there)
            self._armed = armed = asyncio.get_running_loop()
            armed.call_soon(self._passed)
        return self._count

    def _passed(self) -> None:
        self._count += 1
        self._armed = None


LOOP_PASSES = LoopPasses()  # the process's: one loop runs the actors


class YieldEvery:
    """When to give the event loop a turn: after ``every`` seconds of work back to
    back in one task (see :class:`LoopPasses`), a callback that never waits (or
    starts tasks that run at once, 3.12's eager tasks) would otherwise keep the
    connection from reading through a whole burst, until NATS cut it off as a
    slow consumer. (An actor cell keeps the same two facts in its own fields:
    one object less for each of a million idle activations.)"""

    __slots__ = ("_pass", "_since", "every")

    def __init__(self, every: float = LOOP_TURN_EVERY) -> None:
        self.every = every
        self._since = time.monotonic()
        self._pass = -1

    def due(self, started: float) -> bool:
        """One piece of work, begun at ``started`` (``time.monotonic()``), is done:
        True when the caller should now ``await asyncio.sleep(0)``."""
        passes = LOOP_PASSES.seen()
        if passes != self._pass:  # the loop ran since the last piece: it had its turn
            self._pass = passes
            self._since = started
        now = time.monotonic()
        if now - self._since > self.every:
            self._since = now
            return True
        return False


if sys.version_info >= (3, 12):

    def _eager_task(coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, name=what, eager_start=True)

else:

    def _eager_task(coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        return asyncio.create_task(coro, name=what)


def _settled(task: asyncio.Task[Any], what: str, tasks: set[asyncio.Task[Any]] | None) -> None:
    if tasks is not None:
        tasks.discard(task)
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("%s failed", what, exc_info=exc)


async def stop_task(task: asyncio.Task[Any] | None, timeout: float = 5.0, what: str = "") -> bool:
    """Cancel ``task`` until it is done, for at most ``timeout`` seconds.

    True when it ended; False (logged) when it would not, which is then left
    behind rather than hanging the caller's ``stop()``.
    """
    if task is None or task.done():
        return True
    if task is asyncio.current_task():
        return False  # stopping oneself: the caller is on its way out already
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not task.done():
        left = deadline - loop.time()
        if left <= 0:
            log.error("%s did not stop within %gs; left behind", what or task.get_name(), timeout)
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(0.25, left))
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.debug("%s ended with %r while stopping", what or task.get_name(), exc)
    return True
