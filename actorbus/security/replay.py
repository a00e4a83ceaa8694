"""Replay and clock-skew checks: a message is taken once, and only when it is fresh.

A receiver keeps the ids it took within the skew window; an id seen again is a
replay (:class:`ReplayError`), a timestamp further than the window from the
receiver's clock is stale or future-dated (:class:`ClockSkewError`). An id
leaves the cache once its timestamp has left the window, so the cache holds at
most the messages of one window: anything older is refused by its timestamp.
For a message stored in JetStream the reference time is when the server stored
it, not now, so a queue read hours later is still fresh, and a captured message
published again gets a new store time and fails. A stored message is also taken
with where it is stored (its stream and sequence): the server delivers one again
after a restart that lost its consumers' progress, with nothing to say it is a
redelivery, and the same id at the same place is that message again, not a
replay; a captured one published again has a place of its own and is refused.
"""

from __future__ import annotations

import heapq
import time
from typing import Final

from actorbus.codecs.errors import ClockSkewError, ReplayError

DEFAULT_SKEW_MS: Final = 30_000


class ReplayWindow:
    """Ids taken within ``skew_ms``; ``check`` refuses a repeat or a stale stamp."""

    def __init__(self, skew_ms: int = DEFAULT_SKEW_MS, max_ids: int = 1_000_000) -> None:
        self.skew_ms = skew_ms
        self.max_ids = max_ids
        self._seen: dict[str, str | None] = {}  # id -> where it is stored (None: live)
        self._expiry: list[tuple[int, str]] = []  # (ts + skew, id), a min-heap
        # Under a flood the oldest ids are dropped, and nothing stamped at or before
        # the newest dropped one is taken any more: a replay is never let through.
        self._floor = 0

    def check(
        self, msg_id: str, ts: int, now_ms: int | None = None, stored_at: str | None = None
    ) -> None:
        """Take ``msg_id`` stamped ``ts`` (ms) at ``now_ms`` (the store time for a
        stored message; ``stored_at`` its stream and sequence), or raise
        ReplayError / ClockSkewError."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if abs(now - ts) > self.skew_ms:
            ahead = "ahead of" if ts > now else "behind"
            raise ClockSkewError(
                f"message {msg_id} is stamped {abs(now - ts) / 1000:.1f} s {ahead} this "
                f"receiver's clock (allowed: {self.skew_ms / 1000:g} s)"
            )
        if self._expiry and self._expiry[0][0] < now:
            self._forget(now)
        if msg_id in self._seen:
            if stored_at is not None and self._seen[msg_id] == stored_at:
                return  # the same stored message, delivered again
            raise ReplayError(f"message {msg_id} was already taken: a replay")
        if ts + self.skew_ms <= self._floor:
            raise ClockSkewError(
                f"message {msg_id} is older than what this receiver can still tell from "
                "a replay under the current load"
            )
        if len(self._seen) >= self.max_ids:
            self._drop_oldest(self.max_ids // 10 or 1)
        self._seen[msg_id] = stored_at
        heapq.heappush(self._expiry, (ts + self.skew_ms, msg_id))

    def _drop_oldest(self, n: int) -> None:
        for _ in range(min(n, len(self._expiry))):
            expires, old = heapq.heappop(self._expiry)
            self._seen.pop(old, None)
            self._floor = max(self._floor, expires)

    def _forget(self, now: int) -> None:
        expiry = self._expiry
        while expiry and expiry[0][0] < now:
            self._seen.pop(heapq.heappop(expiry)[1], None)

    def __len__(self) -> int:
        return len(self._seen)
