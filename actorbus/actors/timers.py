"""In-memory timers of one actor instance (``Actor.every``).

A timer lives and dies with its instance: it stops when the instance stops
(passivation, restart, shutdown) and is not kept anywhere, unlike a reminder
(``actors/reminders.py``). Each tick runs as a turn of the instance, so it
never overlaps a message, and a declared state it changed is saved as after a
message; a tick does not count as activity, so a timer does not keep an idle
instance from being passivated (as Orleans' grain timers). Ticks are spaced by
the interval after the previous one ended (fixed delay): a slow tick delays
the next one instead of piling them up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from actorbus.bus.tasks import stop_task

log = logging.getLogger("actorbus.actors")

Tick = Callable[[], Awaitable[None]]
# Runs one tick as a turn of the instance (the cell's ``timer_turn``).
RunTurn = Callable[[str, Tick], Awaitable[None]]


class Timers:
    """The running timers of one instance, by name (every instance has one; most
    never start a timer, so it is kept small until one does)."""

    __slots__ = ("_run_turn", "_tasks", "address")

    def __init__(self, address: str, run_turn: RunTurn) -> None:
        self.address = address
        self._run_turn = run_turn
        self._tasks: dict[str, asyncio.Task[None]] | None = None

    def start(self, name: str, seconds: float, tick: Tick) -> None:
        """Run ``tick`` every ``seconds`` (replacing a timer of the same name)."""
        if seconds <= 0:
            raise ValueError(f"timer {name!r}: every must be > 0 seconds (got {seconds:g})")
        if self._tasks is None:
            self._tasks = {}
        old = self._tasks.pop(name, None)
        if old is not None:
            old.cancel()
        what = f"timer {name!r} of {self.address}"
        self._tasks[name] = asyncio.create_task(self._ticking(name, seconds, tick), name=what)

    def cancel(self, name: str) -> bool:
        """Stop one timer; False when none of that name runs."""
        task = self._tasks.pop(name, None) if self._tasks else None
        if task is None:
            return False
        task.cancel()
        return True

    @property
    def running(self) -> list[str]:
        return [name for name, task in (self._tasks or {}).items() if not task.done()]

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop every timer (bounded: a tick in its turn is cancelled)."""
        if not self._tasks:
            return
        tasks, self._tasks = list(self._tasks.values()), None
        for task in tasks:
            await stop_task(task, timeout, f"a timer of {self.address}")

    async def _ticking(self, name: str, seconds: float, tick: Tick) -> None:
        while True:
            await asyncio.sleep(seconds)
            await self._run_turn(name, tick)
