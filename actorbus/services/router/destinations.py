"""Destination routing: which of several instances a message goes to.

Each policy orders the healthy candidates by preference for one message (the
first is tried first; the rest are where retries and hedges go):

- :class:`FirstMatch`: in the order given.
- :class:`Weighted`: smooth weighted round robin (the nginx algorithm): over any
  window, each candidate gets its share of first places, evenly interleaved,
  deterministically.
- :class:`LatencyAware`: by the EWMA of each candidate's observed latency; a
  candidate whose recent 95th percentile is more than ``guard`` times the best
  candidate's goes last (a replica that is fast on average but stalls often is
  not preferred), and a candidate never measured is tried first, once, so it
  gets measured.
- :class:`ConsistentHash`: by rendezvous (highest random weight) hashing of a
  key (the session or trace id): the same key prefers the same instance, and
  when one leaves only the keys it held move (sticky sessions).

Policies learn from :meth:`Policy.observe` (the router calls it after every
attempt) and are safe to share between tasks of one event loop.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol


class Policy(Protocol):
    name: str

    def order(self, candidates: Sequence[str], key: str | None = None) -> list[str]:
        """``candidates`` by preference for one message (keyed by ``key``)."""
        ...

    def observe(self, destination: str, latency_s: float, ok: bool) -> None:
        """What one attempt to ``destination`` took, and whether it succeeded."""
        ...


class FirstMatch:
    name = "first-match"

    def order(self, candidates: Sequence[str], key: str | None = None) -> list[str]:
        return list(candidates)

    def observe(self, destination: str, latency_s: float, ok: bool) -> None:
        return None


class Weighted:
    """Smooth weighted round robin; a candidate without a weight weighs 1."""

    name = "weighted"

    def __init__(self, weights: Mapping[str, float]) -> None:
        if any(w <= 0 for w in weights.values()):
            raise ValueError("weights must be positive")
        self.weights = dict(weights)
        self._current: dict[str, float] = {}

    def order(self, candidates: Sequence[str], key: str | None = None) -> list[str]:
        if not candidates:
            return []
        total = 0.0
        for c in candidates:
            w = self.weights.get(c, 1.0)
            self._current[c] = self._current.get(c, 0.0) + w
            total += w
        first = max(candidates, key=lambda c: (self._current[c], -candidates.index(c)))
        self._current[first] -= total
        rest = sorted(
            (c for c in candidates if c != first), key=lambda c: -self.weights.get(c, 1.0)
        )
        return [first, *rest]

    def observe(self, destination: str, latency_s: float, ok: bool) -> None:
        return None


class LatencyAware:
    """EWMA of latency with a tail guard; failures count as slow."""

    name = "latency-aware"

    def __init__(
        self, alpha: float = 0.3, guard: float = 3.0, window: int = 50, failure_s: float = 5.0
    ) -> None:
        self.alpha = alpha
        self.guard = guard
        self.failure_s = failure_s  # what a failed attempt counts as
        self._window = window
        self.ewma: dict[str, float] = {}
        self._recent: dict[str, deque[float]] = {}

    def p95(self, destination: str) -> float | None:
        recent = self._recent.get(destination)
        if not recent:
            return None
        ordered = sorted(recent)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]

    def order(self, candidates: Sequence[str], key: str | None = None) -> list[str]:
        unmeasured = [c for c in candidates if c not in self.ewma]
        measured = sorted((c for c in candidates if c in self.ewma), key=lambda c: self.ewma[c])
        if not measured:
            return unmeasured
        best = self.ewma[measured[0]]
        tails = {c: self.p95(c) or self.ewma[c] for c in measured}
        steady = [c for c in measured if tails[c] <= self.guard * max(best, 1e-6)]
        spiky = [c for c in measured if c not in steady]
        # never-measured ones first (once each, so they get measured), then by speed
        return unmeasured + steady + spiky

    def observe(self, destination: str, latency_s: float, ok: bool) -> None:
        sample = latency_s if ok else max(latency_s, self.failure_s)
        old = self.ewma.get(destination)
        self.ewma[destination] = sample if old is None else old + self.alpha * (sample - old)
        self._recent.setdefault(destination, deque(maxlen=self._window)).append(sample)


class ConsistentHash:
    """Rendezvous hashing of the message's key; without a key, the given order."""

    name = "consistent-hash"

    def order(self, candidates: Sequence[str], key: str | None = None) -> list[str]:
        if key is None:
            return list(candidates)

        def weight(c: str) -> bytes:
            return hashlib.blake2b(f"{key}\x1f{c}".encode(), digest_size=8).digest()

        return sorted(candidates, key=weight, reverse=True)

    def observe(self, destination: str, latency_s: float, ok: bool) -> None:
        return None


POLICIES = {
    "first-match": FirstMatch,
    "latency-aware": LatencyAware,
    "consistent-hash": ConsistentHash,
}
