"""Mailbox limits: what overload does to an actor, visibly and within bounds.

An actor's subscriptions are its mailbox: nats-py queues what arrives for a
subscription until the actor takes it. Unbounded, an actor that falls behind
grows without limit (tens of MB a second under a flood of tells) until NATS cuts
the whole connection off as a slow consumer and every message in flight is lost
without a word. Here each subscription of an actor holds at most
``mailbox_size`` messages and ``mailbox_bytes`` bytes; past that nats-py drops
the newest and reports it, and this module turns the report into an actor-level
signal:

- an ``ask`` that did not fit is answered at once with ``RateLimitedError`` (the
  caller can back off) unless the type says ``mailbox_overflow = "drop"``;
- a ``tell`` that did not fit is dropped (it is at most once) and counted;
- each drop counts in ``dropped`` per address and in the
  ``actorbus.mailbox.dropped`` metric; a warning is logged and an
  ``actor.overloaded`` system event published, at most once per
  ``REPORT_EVERY`` seconds per address, with the count since the last one: the
  first drop at once, and what drops after it within that time at its end, so
  the reports add up to every drop.

Durable sends are not affected: they wait in JetStream, and the reader takes
them at the actor's pace.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypedDict

from nats.aio.subscription import Subscription
from nats.errors import SlowConsumerError

from actorbus.bus.tasks import spawn, stop_task
from actorbus.codecs.errors import RateLimitedError
from actorbus.telemetry import metrics as meters

log = logging.getLogger("actorbus.mailbox")

Overflow = Literal["refuse", "drop"]


class Bounded(Protocol):
    """What a mailbox needs of an actor type (an ``Actor`` subclass is one)."""

    type_name: str
    mailbox_size: int
    mailbox_bytes: int
    mailbox_overflow: Overflow


REPORT_EVERY = 5.0  # seconds between two warnings (and events) for one address


class SubscriptionLimits(TypedDict):
    pending_msgs_limit: int
    pending_bytes_limit: int


def limits_of(cls: Bounded) -> SubscriptionLimits:
    """The nats-py subscription arguments that bound one of ``cls``'s mailboxes."""
    return {"pending_msgs_limit": cls.mailbox_size, "pending_bytes_limit": cls.mailbox_bytes}


# A lazily hosted type's shared subscriptions only decode and hand each message
# to its key's instance (whose own mailbox is bounded): a burst buffer, bounded
# in its own right.
ENTRANCE: SubscriptionLimits = {
    "pending_msgs_limit": 65_536,
    "pending_bytes_limit": 64 * 1024 * 1024,
}


class Mailboxes:
    """Which subscription is whose mailbox, and what to do when one overflows."""

    def __init__(
        self,
        refuse: Callable[[str, RateLimitedError], Awaitable[None]],
        emit: Callable[[str, dict[str, Any]], Awaitable[None]],
        metered: bool = False,
    ) -> None:
        self._refuse = refuse  # answer an ask's reply subject with the error
        self._emit = emit  # publish a system event
        self._metered = metered  # drops counted in the metrics too
        self._owners: dict[Subscription, tuple[str, Bounded]] = {}
        self.dropped: dict[str, int] = {}  # address -> messages dropped, ever
        self._unreported: dict[str, int] = {}
        self._reported_at: dict[str, float] = {}
        self._trailing: set[asyncio.Task[None]] = set()  # reports due at a window's end
        self._due: dict[str, Bounded] = {}  # addresses with one of them scheduled

    def watch(self, sub: Subscription, address: str, cls: Bounded) -> Subscription:
        """Count ``sub``'s overflows as ``address``'s."""
        self._owners[sub] = (address, cls)
        return sub

    def forget(self, sub: Subscription) -> None:
        self._owners.pop(sub, None)

    async def on_overflow(self, err: SlowConsumerError) -> None:
        """nats-py dropped a message for a full subscription (called by the
        connection's error callback, inside the read loop: never raises)."""
        owner = self._owners.get(err.sub)
        if owner is None:
            log.warning("a subscription on %s is full; dropped a message", err.subject)
            return
        address, cls = owner
        await self.overflowed(address, cls, err.reply)

    async def overflowed(self, address: str, cls: Bounded, reply: str) -> None:
        """One message for ``address`` did not fit its mailbox."""
        self.dropped[address] = self.dropped.get(address, 0) + 1
        self._unreported[address] = self._unreported.get(address, 0) + 1
        if self._metered:
            meters.mailbox_dropped.add(1, {"actorbus.destination.type": cls.type_name})
        try:
            if reply and cls.mailbox_overflow == "refuse":
                await self._refuse(
                    reply,
                    RateLimitedError(
                        f"{address} is overloaded: its mailbox is full ({cls.mailbox_size} "
                        "messages waiting); try again later"
                    ),
                )
            await self._report(address, cls)
        except Exception as exc:  # the read loop must go on whatever happens here
            log.debug("%s: reporting an overflow failed: %r", address, exc)

    async def _report(self, address: str, cls: Bounded) -> None:
        now = time.monotonic()
        wait = self._reported_at.get(address, -REPORT_EVERY) + REPORT_EVERY - now
        if wait > 0:
            if address not in self._due:  # said at the window's end, with the count
                self._due[address] = cls
                spawn(self._report_later(address, cls, wait), "overload report", self._trailing)
            return
        self._reported_at[address] = now
        count = self._unreported.pop(address, 0)
        if count == 0:
            return
        log.warning(
            "%s is overloaded: %d message(s) did not fit its mailbox (%d messages / %d bytes) "
            "and were %s (%d in all)",
            address,
            count,
            cls.mailbox_size,
            cls.mailbox_bytes,
            "dropped (asks refused with RateLimitedError)"
            if cls.mailbox_overflow == "refuse"
            else "dropped",
            self.dropped[address],
        )
        await self._emit(
            "actor.overloaded",
            {"address": address, "dropped": count, "dropped_total": self.dropped[address]},
        )

    async def _report_later(self, address: str, cls: Bounded, wait: float) -> None:
        await asyncio.sleep(wait)
        self._due.pop(address, None)
        await self._report(address, cls)

    async def close(self) -> None:
        """Say what is still unreported now (a closing system), and stop waiting."""
        for task in list(self._trailing):
            await stop_task(task, what="overload report")
        due, self._due = self._due, {}
        for address, cls in due.items():
            self._reported_at.pop(address, None)
            await self._report(address, cls)
