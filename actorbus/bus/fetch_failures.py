"""Failed fetches of a pull consumer, said when they last, not when they blink.

A consumer just made on a cluster is hosted by a leader its replicas elect
first; until then a fetch is answered 503 (no responders). Every host starting
on a fresh three-node cluster used to log "fetch failed: ServiceUnavailableError()"
a few times for this, and a user starting a cluster saw warnings for a cluster
doing what it should. A reader keeps fetching either way (each failure waits a
little and checks that its consumer is still there); what changes is what is
said: failures in the first ``grace`` seconds are logged at debug level, a
failure that lasts longer is a warning (again each ``repeat`` seconds while it
lasts), and the first fetch that works after such a warning says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

FETCH_GRACE = 10.0  # seconds: a leader elected, a node rejoining
REPEAT_EVERY = 60.0


class FetchFailures:
    """One reader's run of failed fetches (see the module)."""

    __slots__ = ("_clock", "_log", "_next_warning", "_since", "_warned", "grace", "repeat", "what")

    def __init__(
        self,
        what: str,
        log: logging.Logger,
        grace: float = FETCH_GRACE,
        repeat: float = REPEAT_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what  # "vcounter/*: durable fetch", for the log lines
        self.grace = grace
        self.repeat = repeat
        self._log = log
        self._clock = clock
        self._since: float | None = None  # when the current run of failures began
        self._next_warning = 0.0
        self._warned = False

    @property
    def failing_for(self) -> float:
        """Seconds since the current run of failures began (0 while fetches work)."""
        return 0.0 if self._since is None else self._clock() - self._since

    def failed(self, exc: BaseException) -> None:
        """A fetch failed with ``exc``."""
        now = self._clock()
        if self._since is None:
            self._since, self._next_warning = now, now + self.grace
        lasted = now - self._since
        if now < self._next_warning:
            self._log.debug("%s failed after %.1fs of failures: %r", self.what, lasted, exc)
            return
        self._next_warning, self._warned = now + self.repeat, True
        self._log.warning("%s has failed for %.0fs: %r", self.what, lasted, exc)

    def worked(self) -> None:
        """A fetch was answered (messages, or none before its wait ran out)."""
        since = self._since
        if since is None:
            return
        self._since = None
        lasted = self._clock() - since
        if self._warned:  # said at the level of the warning it ends
            self._warned = False
            self._log.warning("%s works again after %.0fs of failures", self.what, lasted)
        else:
            self._log.debug("%s works again after %.1fs of failures", self.what, lasted)
