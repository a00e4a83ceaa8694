"""Notice an event loop that someone blocked, and say what it cost.

A handler that does blocking work (``time.sleep``, a synchronous HTTP call, a
CPU-bound loop) stops the whole process: nats-py reads nothing while it runs,
and once the server's buffer for this connection fills, nats-server cuts the
connection off as a slow consumer. Every core NATS message sent to the process
meanwhile (tells, asks) is gone, and nothing in the process would otherwise
say so. :class:`LoopWatch` ticks every ``TICK`` seconds; a late tick means the
loop was blocked, which it logs (with the advice), and the connection asks it,
when it drops, whether a block explains the drop.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("actorbus.bus")

TICK = 0.1
BLOCKED = 0.5  # a tick this late: the loop was blocked
WARN_EVERY = 10.0


class LoopWatch:
    def __init__(self) -> None:
        self.last_tick = time.monotonic()
        self.longest = 0.0  # the longest block seen, in seconds
        self.blocks = 0
        self._warned_at = -WARN_EVERY

    def blocked_for(self) -> float:
        """How long the loop has gone without a tick, right now (0 if it ticks)."""
        late = time.monotonic() - self.last_tick - TICK
        return late if late > BLOCKED else 0.0

    async def run(self) -> None:
        while True:
            self.last_tick = time.monotonic()
            await asyncio.sleep(TICK)
            late = time.monotonic() - self.last_tick - TICK
            if late > BLOCKED:
                self._blocked(late)

    def _blocked(self, late: float) -> None:
        self.blocks += 1
        self.longest = max(self.longest, late)
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            log.warning(
                "the event loop was blocked for %.2fs: a handler is doing blocking work "
                "(move it off the loop with asyncio.to_thread); while blocked this process "
                "reads no messages, and NATS may cut it off as a slow consumer",
                late,
            )
