"""Resilience primitives of the router: what happens when a destination is slow,
failing or full.

- :class:`RetryPolicy`: jittered exponential backoff, chosen by the error's
  category. A timeout, a lost connection, nobody serving the address, a stopped
  actor, a full mailbox are worth another try (elsewhere, if there is an
  elsewhere); a bad message, an unsupported intent, an authentication failure or
  the handler's own exception are not: the same message would fail the same way.
- :class:`CircuitBreaker`: per destination, closed -> open after
  ``failures`` consecutive failures; open refuses at once for ``cooldown``
  seconds; then half-open lets one probe through, which closes it on success and
  opens it again on failure.
- :class:`Bulkhead`: at most ``limit`` requests in flight per destination; one
  more is refused at once with :class:`BulkheadFullError` (a clear overload,
  not a queue that grows without bound).
- :class:`KeyedQueues`: messages with the same key (a session) go one at a time,
  in the order they were given; other keys are not held up.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final, Literal

from actorbus.codecs.errors import (
    ActorBusError,
    ActorStoppedError,
    AskTimeoutError,
    ConnectionLostError,
    NoRespondersError,
    RateLimitedError,
)

RETRYABLE: Final = (
    AskTimeoutError,
    ConnectionLostError,
    NoRespondersError,
    ActorStoppedError,
    RateLimitedError,
)

CircuitState = Literal["closed", "open", "half-open"]


class CircuitOpenError(NoRespondersError):
    """Every candidate's circuit is open: they failed recently and are resting."""

    def __init__(self, destinations: list[str], retry_in: float) -> None:
        ActorBusError.__init__(
            self,
            f"every destination's circuit is open ({', '.join(destinations)}); "
            f"the first one is probed again in {retry_in:.1f}s",
        )
        self.address = destinations[0] if destinations else ""
        self.intent = ""
        self.retry_in = retry_in


class BulkheadFullError(RateLimitedError):
    """A destination already has as many requests in flight as its bulkhead allows."""

    def __init__(self, destination: str, limit: int) -> None:
        super().__init__(
            f"{destination} already has {limit} requests in flight (the bulkhead's limit); "
            "refused rather than queued"
        )
        self.destination = destination
        self.limit = limit


def retryable(exc: BaseException) -> bool:
    """Whether another attempt could succeed where this one failed."""
    return isinstance(exc, RETRYABLE)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # in all, the first included
    base_s: float = 0.05
    max_s: float = 2.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**attempt)]."""
        cap = min(self.max_s, self.base_s * (2**attempt))
        return (rng or random).uniform(0.0, cap)


@dataclass
class CircuitBreaker:
    failures: int = 3  # consecutive failures that open it
    cooldown: float = 5.0  # seconds open before a probe
    clock: Callable[[], float] = time.monotonic
    state: CircuitState = "closed"
    _failed: int = 0
    _opened_at: float = 0.0
    _probing: bool = False
    transitions: list[tuple[CircuitState, CircuitState]] = field(default_factory=list)

    def allow(self) -> bool:
        """Whether a request may go now (a half-open breaker lets one probe go)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if self.clock() - self._opened_at < self.cooldown:
                return False
            self._move("half-open")
        if self._probing:
            return False
        self._probing = True
        return True

    def available(self) -> bool:
        """Whether ``allow`` would let a request go now (asking changes nothing)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            return self.clock() - self._opened_at >= self.cooldown
        return not self._probing

    def abandon(self) -> None:
        """A request let through ended with no verdict (cancelled): a half-open
        breaker may send another probe."""
        self._probing = False

    def retry_in(self) -> float:
        if self.state != "open":
            return 0.0
        return max(0.0, self.cooldown - (self.clock() - self._opened_at))

    def success(self) -> None:
        self._failed = 0
        self._probing = False
        if self.state != "closed":
            self._move("closed")

    def failure(self) -> None:
        self._probing = False
        self._failed += 1
        if self.state == "half-open" or self._failed >= self.failures:
            self._opened_at = self.clock()
            if self.state != "open":
                self._move("open")

    def _move(self, to: CircuitState) -> None:
        self.transitions.append((self.state, to))
        self.state = to


class Bulkhead:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a bulkhead's limit must be at least 1")
        self.limit = limit
        self.in_flight: dict[str, int] = {}

    def take(self, destination: str) -> None:
        """Hold one of ``destination``'s slots, or raise BulkheadFullError now."""
        n = self.in_flight.get(destination, 0)
        if n >= self.limit:
            raise BulkheadFullError(destination, self.limit)
        self.in_flight[destination] = n + 1

    def give_back(self, destination: str) -> None:
        left = self.in_flight.get(destination, 0) - 1
        if left > 0:
            self.in_flight[destination] = left
        else:
            self.in_flight.pop(destination, None)

    @asynccontextmanager
    async def slot(self, destination: str) -> AsyncIterator[None]:
        self.take(destination)
        try:
            yield
        finally:
            self.give_back(destination)


class KeyedQueues:
    """One lane per key: what is given under a key runs one at a time, in order."""

    def __init__(self) -> None:
        self._lanes: dict[str, tuple[asyncio.Lock, int]] = {}

    def depth(self, key: str) -> int:
        """Messages of ``key`` running or waiting."""
        lane = self._lanes.get(key)
        return lane[1] if lane else 0

    @asynccontextmanager
    async def turn(self, key: str | None) -> AsyncIterator[None]:
        if key is None:
            yield
            return
        lock, waiting = self._lanes.get(key, (asyncio.Lock(), 0))
        self._lanes[key] = (lock, waiting + 1)
        try:
            async with lock:  # asyncio.Lock wakes waiters first come, first served
                yield
        finally:
            lock, waiting = self._lanes[key]
            if waiting <= 1:
                del self._lanes[key]  # no lane kept for a key nobody uses
            else:
                self._lanes[key] = (lock, waiting - 1)
