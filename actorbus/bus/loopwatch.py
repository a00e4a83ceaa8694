"""Notice an event loop that someone blocked, and say what it cost.

A handler that does blocking work (``time.sleep``, a synchronous HTTP call, a
CPU-bound loop) stops the whole process: nats-py reads nothing while it runs,
and once the server's buffer for this connection fills, nats-server cuts the
connection off as a slow consumer. Every core NATS message sent to the process
meanwhile (tells, asks) is gone, and nothing in the process would otherwise
say so. :class:`LoopWatch` ticks every ``TICK`` seconds; a late tick means the
loop was blocked, which it logs (with the advice), and the connection asks it,
when it drops, whether a block explains the drop.

Python's own garbage collector blocks the loop too: a full collection walks
every object the process keeps, about a second per few million (a process
hosting a million idle activations has four million). The watch times the
collector (``gc.callbacks``) so that a block it caused is said to be its, with
the advice that fits, instead of blaming a handler.

A loop can also be late without anyone blocking it: a burst of thousands of
messages makes thousands of short turns ready together, and the loop runs them
all before it looks at its timers. A late tick while that many messages came in
is said to be a burst (and the advice is more processes), not a handler: a
blocking handler keeps the connections from reading, so few come in meanwhile.

One watch per event loop, whatever the number of connections on it (systems in
one process): a block is the loop's, so it is said once, counting the messages
every connection read.

Where the loop was blocked is something the loop cannot see: none of it runs
until the block ends. A thread of the watch's own wakes every tick and, once
the loop is a while late, looks at what the loop's thread is running
(``sys._current_frames``), so the warning names the line that blocked. Python
code that blocks still lets that thread run every few milliseconds (the
interpreter's switch interval), and a blocking call lets it run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

from actorbus.bus.tasks import stop_task, supervise

log = logging.getLogger("actorbus.bus")

TICK = 0.1
BLOCKED = 0.5  # a tick this late: the loop was blocked
WARN_EVERY = 10.0
BURST = 1_000  # messages received while the loop was late: a burst, not a block


class CollectorTime:
    """Seconds this process's cyclic garbage collector has run (one clock per
    process: the collector is the process's)."""

    total = 0.0
    _started = 0.0
    _installed = False

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            cls._installed = True
            gc.callbacks.append(cls._on_collection)

    @classmethod
    def _on_collection(cls, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            cls._started = time.perf_counter()
        else:
            cls.total += time.perf_counter() - cls._started


class LoopWatch:
    _of_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        CollectorTime.install()
        self.last_tick = time.monotonic()
        self.longest = 0.0  # the longest block seen, in seconds
        self.blocks = 0
        self._warned_at = -WARN_EVERY
        self._counters: list[Callable[[], int]] = []
        self._task: asyncio.Task[None] | None = None
        self._where: str | None = None  # what the loop's thread ran in this block
        self._stood_still = False  # the witness thread missed its ticks too in this block
        self._witness: threading.Thread | None = None
        self._witness_stop = threading.Event()

    @classmethod
    def join(cls, received: Callable[[], int]) -> LoopWatch:
        """The running loop's watch, started if need be; ``received`` says how many
        messages a connection on it has read so far (until :meth:`leave`)."""
        loop = asyncio.get_running_loop()
        watch = cls._of_loop.get(loop)
        if watch is None:
            watch = cls._of_loop[loop] = cls()
        watch._counters.append(received)
        if watch._task is None or watch._task.done():
            watch._task = supervise("event loop watch", watch.run, logger=log)
        if watch._witness is None:
            watch._witness_stop.clear()
            watch._witness = threading.Thread(
                target=watch._witness_blocks,
                args=(threading.get_ident(),),
                name="actorbus event loop witness",
                daemon=True,
            )
            watch._witness.start()
        return watch

    async def leave(self, received: Callable[[], int]) -> None:
        """A connection closed; the last one to leave stops the watch."""
        with contextlib.suppress(ValueError):
            self._counters.remove(received)
        if not self._counters:
            task, self._task = self._task, None
            await stop_task(task, what="event loop watch")
            witness, self._witness = self._witness, None
            if witness is not None:
                self._witness_stop.set()  # its wait ends at once
                witness.join(timeout=1.0)

    def received(self) -> int:
        return sum(count() for count in self._counters)

    def blocked_for(self) -> float:
        """How long the loop has gone without a tick, right now (0 if it ticks)."""
        late = time.monotonic() - self.last_tick - TICK
        return late if late > BLOCKED else 0.0

    async def run(self) -> None:
        while True:
            self.last_tick = time.monotonic()
            self._where = None
            self._stood_still = False
            collected, received = CollectorTime.total, self.received()
            await asyncio.sleep(TICK)
            late = time.monotonic() - self.last_tick - TICK
            if late > BLOCKED:
                self._blocked(
                    late,
                    CollectorTime.total - collected,
                    self.received() - received,
                    # the witness saw nothing, or stood still too: the process did
                    None if self._stood_still or self._where is None else self._where,
                )

    def _witness_blocks(self, loop_thread: int) -> None:
        """The witness thread: once per block, what the loop's thread runs."""
        last = time.monotonic()
        while not self._witness_stop.wait(TICK):
            now = time.monotonic()
            if now - last - TICK > BLOCKED / 2:  # this thread stood still as well
                self._stood_still = True
            last = now
            if self._stood_still:
                continue  # what the loop's thread runs now says nothing of the pause
            if self._where is None and now - self.last_tick - TICK > BLOCKED / 2:
                frame = sys._current_frames().get(loop_thread)
                self._where = _frames(frame) if frame is not None else ""

    def _blocked(
        self, late: float, in_collector: float = 0.0, arrived: int = 0, where: str | None = ""
    ) -> None:
        """Say why the loop was late. ``where``: what its thread ran, as the witness
        thread saw it; None when the witness saw nothing or stood still too (the
        whole process did: a block long enough to warn of is always seen)."""
        self.blocks += 1
        self.longest = max(self.longest, late)
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY:
            return
        self._warned_at = now
        if in_collector >= late / 2:
            log.warning(
                "the event loop was blocked for %.2fs, %.2fs of it in Python's garbage "
                "collector walking every object this process keeps (many activations or "
                "large caches: see gc_young on the configuration page); while blocked "
                "this process reads no messages",
                late,
                in_collector,
            )
            return
        if arrived >= BURST:
            log.warning(
                "the event loop fell %.2fs behind while %d messages came in: a burst "
                "of more work at once than this process keeps up with (the messages "
                "wait their turn; more processes share a type's messages: actorbus run "
                "--workers N), unless a handler also does blocking work",
                late,
                arrived,
            )
            return
        if where is None:
            log.warning(
                "this process stood still for %.2fs, its threads too: it was suspended "
                "(SIGSTOP, a paused container or VM, a machine asleep), or native code "
                "held the interpreter; meanwhile it read no messages",
                late,
            )
            return
        log.warning(
            "the event loop was blocked for %.2fs%s: a handler is doing blocking work "
            "(move it off the loop with asyncio.to_thread); while blocked this process "
            "reads no messages, and NATS may cut it off as a slow consumer",
            late,
            f" at {where}" if where else "",
        )


def _frames(frame: FrameType) -> str:
    """Where the loop's thread is: its innermost frame and, when that is in a
    library (a socket read under an HTTP client), the innermost of the user's
    own frames too, which is the line to change."""
    here = _frame(frame)
    users: FrameType | None = frame
    while users is not None and not _users(users.f_code.co_filename):
        users = users.f_back
    if users is None or users is frame:
        return here
    return f"{here}, from {_frame(users)}"


def _frame(frame: FrameType) -> str:
    return f"{_path(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


_NOT_USERS = tuple(
    os.path.join(path, "")  # a directory: /x/actorbus/, not /x/actorbus_app
    for path in {
        sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    | {str(Path(__file__).resolve().parents[1])}  # actorbus itself
)


def _users(filename: str) -> bool:
    """Code of the process's own: not Python's, an installed package's or ours."""
    return not filename.startswith(("<", *_NOT_USERS))


def _path(filename: str) -> str:
    """As the user would type it: relative to the working directory when under it."""
    with contextlib.suppress(ValueError):  # another drive, on Windows
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            return relative
    return filename
