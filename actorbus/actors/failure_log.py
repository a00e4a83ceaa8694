"""Handler failures, logged where the agent runs: with the traceback, rate-limited.

The caller sees a ``RemoteError``; the operator of the host must see what broke
too, without a failing handler flooding the log at thousands of lines a second.
Each actor type may log ``burst`` tracebacks, refilled at ``per_minute``; what
is held back is counted and said with the next line that gets through.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger("actorbus.actors")


@dataclass
class _Allowance:
    tokens: float
    at: float
    held_back: int = 0


class FailureLog:
    """One per process: how handler failures reach the log."""

    def __init__(self, burst: int = 5, per_minute: float = 30.0) -> None:
        self.burst = burst
        self.rate = per_minute / 60.0
        self._types: dict[str, _Allowance] = {}

    def handler_failed(
        self, type_name: str, where: str, message_id: str, exc: BaseException
    ) -> None:
        """Log one failure with its traceback, unless this type logged too many lately."""
        now = time.monotonic()
        allowance = self._types.get(type_name)
        if allowance is None:
            allowance = self._types[type_name] = _Allowance(float(self.burst), now)
        allowance.tokens = min(self.burst, allowance.tokens + (now - allowance.at) * self.rate)
        allowance.at = now
        if allowance.tokens < 1:
            allowance.held_back += 1
            return
        allowance.tokens -= 1
        more = allowance.held_back
        allowance.held_back = 0
        also = f" ({more} more failure(s) of {type_name} not logged since the last)" if more else ""
        log.error(
            "%s failed on message %s: %s: %s%s",
            where,
            message_id,
            type(exc).__name__,
            exc,
            also,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
