"""The lock a one-at-a-time actor's turns are taken under."""

from __future__ import annotations

import asyncio


class TurnLock(asyncio.Lock):
    """An ``asyncio.Lock`` whose free state is taken without a coroutine.

    Every message to a one-at-a-time actor takes its turn. ``async with`` an
    ``asyncio.Lock`` runs two coroutines for it and, once the lock has ever had
    a waiter, a generator over its (by then empty) waiters; an actor that is
    not busy needs none of that. A lock that is held, or has anyone (even a
    cancelled one) waiting, is taken the usual way, in the usual order."""

    def try_acquire(self) -> bool:
        """Take the lock if it is free and nobody waits for it; False otherwise."""
        if self._locked or self._waiters:  # type: ignore[has-type]
            return False
        self._locked = True
        return True
