"""Single activation of keyed actor types across processes (virtual actors).

A type with ``keyed = True`` has at most one live instance of each ``type/key``
in the whole namespace. Activating one claims ``type/key`` in the namespace's
claim table (``bus/claims.py``): a record in the ``actorbus-{ns}-placement``
bucket naming the hosting ActorSystem, valid for as long as that system's
liveness lease in ``actorbus-{ns}-hosts`` lives. The system renews that one
lease every ``ttl / 3``, however many actors it hosts; passivation and shutdown
release the records. A record lives ``record_ttl`` at most (an hour by default),
so a crashed holder's records go away even for keys never activated again; the
holder writes each of its records again once half of that has passed (spread
over time as the activations were: 50,000 keys make 28 writes a second).
A process that gets a message for a key another live process holds forwards
it there (``actors/virtual.py``); when the holder died, its liveness runs out
within ``ttl`` and the next message takes the key over where it arrives. A
holder that finds its own liveness lapsed (it was cut off for longer than
``ttl``) stops every instance it hosted: any of them may live elsewhere now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from actorbus.bus.claims import RECORD_TTL, ClaimTable
from actorbus.bus.leases import LeaseLostError, lease_key
from actorbus.bus.tasks import spawn, stop_task, supervise

if TYPE_CHECKING:
    from nats.js import JetStreamContext

log = logging.getLogger("actorbus.placement")

LostCallback = Callable[[str], Awaitable[None]]
_RELEASED_AT_ONCE = 256  # records released side by side at close
# Claims in flight at once. A burst of first messages to new keys (50,000 at
# once) sent every claim to the server together: on a slow machine their acks
# came after the client's timeout and a third of the messages were refused
# ("could not place"). Past this many, a claim waits here, where no timer runs.
CLAIMS_AT_ONCE = 256


def placement_bucket(ns: str) -> str:
    """Who hosts each activated ``type/key``: valid while its host lives (and
    written again by it before its ``record_ttl`` runs out)."""
    return f"actorbus-{ns}-placement"


def hosts_bucket(ns: str) -> str:
    """The hosting systems' liveness leases (ttl: ``activation_ttl``)."""
    return f"actorbus-{ns}-hosts"


class Placement:
    """The activation leases this system holds, and who holds the others."""

    def __init__(
        self,
        js: JetStreamContext,
        namespace: str,
        holder: str,
        ttl: float,
        replicas: int,
        on_lost: LostCallback,
        record_ttl: float = RECORD_TTL,
        reachable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.js = js
        self.reachable = reachable  # whether the broker is there to be told
        self.namespace = namespace
        self.holder = holder
        self.ttl = ttl
        self.record_ttl = record_ttl
        self.replicas = replicas
        self.on_lost = on_lost
        self._table: ClaimTable | None = None
        self._opening = asyncio.Lock()
        self._held: dict[str, int] = {}  # address -> its record's revision
        self._claims: dict[str, asyncio.Future[str | None]] = {}
        self._claiming = asyncio.Semaphore(CLAIMS_AT_ONCE)
        self._owners: dict[str, str] = {}  # who hosts what, as last seen (may be stale)
        self._renewer: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        # (when, address, revision): records to write again, in the order they are due
        self._due: deque[tuple[float, str, int]] = deque()

    async def table(self) -> ClaimTable:
        if self._table is None:
            async with self._opening:
                if self._table is None:
                    self._table = await ClaimTable.open(
                        self.js,
                        hosts_bucket(self.namespace),
                        placement_bucket(self.namespace),
                        self.ttl,
                        self.holder,
                        replicas=self.replicas,
                        record_ttl=self.record_ttl,
                    )
                    self.ttl = self._table.ttl
        return self._table

    async def restore_if_lost(self) -> None:
        """The broker lost its store: make the buckets again (the liveness in them
        is gone: its holders find it lost at the next renewal)."""
        if self._table is not None:
            await self._table.restore_if_lost(self.js)

    def holds(self, address: str) -> bool:
        return address in self._held

    def forget(self, address: str) -> None:
        """The remembered holder of ``address`` moved or died: ask the bucket next time."""
        self._owners.pop(address, None)

    async def owner(self, address: str) -> str | None:
        """None when this system may host ``address`` (it holds or just took the
        lease); else the id of the system that does (as last seen: a forward that
        finds it gone calls ``forget`` and asks again)."""
        if address in self._held:
            return None
        known = self._owners.get(address)
        if known is not None:
            return known
        claim = self._claims.get(address)
        if claim is None:  # one claim per address at a time, shared by its messages
            claim = asyncio.get_running_loop().create_future()
            self._claims[address] = claim
            try:
                claim.set_result(await self._claim(address))
            except BaseException as exc:
                claim.set_exception(exc)
                claim.exception()  # retrieved: waiters (if any) re-raise it
            finally:
                del self._claims[address]
        return await asyncio.shield(claim)

    async def _claim(self, address: str) -> str | None:
        table = await self.table()
        async with self._claiming:
            claim = await table.claim(_key(address))
        if claim.revision is not None:
            self._hold(address, claim.revision)
            self._ensure_renewer()
            return None
        if len(self._owners) >= 100_000:
            self._owners.clear()  # a bound, not an LRU: forwards re-learn cheaply
        self._owners[address] = claim.holder
        return claim.holder

    async def release(self, address: str) -> None:
        revision = self._held.pop(address, None)
        self._forget_released()
        if revision is not None and self._table is not None:
            with contextlib.suppress(Exception):
                await self._table.release(_key(address), revision)

    def _hold(self, address: str, revision: int) -> None:
        self._held[address] = revision
        self._due.append((time.monotonic() + self.record_ttl / 2, address, revision))
        self._forget_released()

    def _forget_released(self) -> None:
        """Released keys leave their entries in the refresh schedule: drop them
        once they are half of it, on a claim or a release. Kept until due (half
        an hour), the entries of 20,000 passivated keyed actors kept 80,000
        blocks of memory, and with them every arena those activations had used:
        none of their memory went back to the system (a third with this)."""
        if len(self._due) > 2 * len(self._held) + _RELEASED_AT_ONCE:
            held = self._held
            self._due = deque(d for d in self._due if held.get(d[1]) == d[2])

    async def _refresh_due(self, table: ClaimTable) -> None:
        """Write again the records due (half their ttl gone), a few hundred side by
        side; one found changed or gone was lost: its instance stops. It runs in a
        task of its own: under a burst of claims each write waits for the disk, and
        the liveness renewal must not wait for them."""
        started = time.monotonic()
        while self._due and self._due[0][0] <= started:
            due: list[tuple[str, int]] = []
            while self._due and self._due[0][0] <= started and len(due) < _RELEASED_AT_ONCE:
                _, address, revision = self._due.popleft()
                if self._held.get(address) == revision:  # else released or written since
                    due.append((address, revision))
            outcomes = await asyncio.gather(
                *(table.refresh(_key(address), revision) for address, revision in due),
                return_exceptions=True,
            )
            away = False
            for (address, revision), outcome in zip(due, outcomes, strict=True):
                if isinstance(outcome, int):
                    if self._held.get(address) == revision:
                        self._hold(address, outcome)
                    else:  # released meanwhile (its delete missed the new revision)
                        with contextlib.suppress(Exception):
                            await table.release(_key(address), outcome)
                elif outcome is None:
                    log.warning("%s: its placement record changed or expired: stopping it", address)
                    if self._held.pop(address, None) is not None:
                        await self.on_lost(address)
                else:  # NATS away: due again at the next round
                    self._due.appendleft((started, address, revision))
                    log.debug("writing the placement record of %s again: %r", address, outcome)
                    away = True
            if away:
                return

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = supervise("activation lease renewal", self._renew_forever, logger=log)

    def _refresh_in_background(self, table: ClaimTable) -> None:
        idle = self._refresher is None or self._refresher.done()
        if idle and self._due and self._due[0][0] <= time.monotonic():
            self._refresher = spawn(self._refresh_due(table), "placement record refresh")

    async def _renew_forever(self) -> None:
        loop = asyncio.get_running_loop()
        renewed = loop.time()  # when the liveness was last known to hold
        period = self.ttl / 3
        next_at = renewed
        # For as long as this system may claim, not only while it holds a key: a
        # liveness let lapse while nothing was held made the next claims name a
        # holder that counted as dead (another process could take those keys at
        # once), and the next renewal then stopped every keyed actor it had just
        # activated ("liveness lapsed", in a walk: 608 of them).
        while True:
            # A third of the ttl after the last one began, however long it took
            # (at once if it took longer).
            next_at = max(next_at + period, loop.time())
            await asyncio.sleep(next_at - loop.time())
            table = await self.table()
            asked = loop.time()
            try:
                await table.renew()
            except LeaseLostError:
                # Cut off for longer than ttl: any of our keys may be hosted
                # elsewhere now, so none of our instances may go on as the one.
                lost = list(self._held)
                log.warning(
                    "this system's liveness lapsed (cut off for over %gs: last renewed "
                    "%.1fs ago, this renewal took %.1fs): stopping its %d keyed actor(s); "
                    "their next messages activate them again",
                    self.ttl,
                    asked - renewed,
                    loop.time() - asked,
                    len(lost),
                )
                renewed = loop.time()  # a new liveness comes with the next claim
                for address in lost:
                    if self._held.pop(address, None) is not None:
                        await self.on_lost(address)
                continue
            except Exception as exc:  # NATS away: try again next round
                log.debug("renewing this system's liveness: %r", exc)
                continue
            renewed = loop.time()
            if renewed - asked > period:
                # The step before a lapse, said while there is still time to act.
                log.warning(
                    "renewing this system's liveness took %.1fs of its %gs ttl: the "
                    "broker is slow to store (a busy disk or cluster); past the ttl its "
                    "keyed actors stop. A longer activation_ttl gives more room",
                    renewed - asked,
                    self.ttl,
                )
            self._refresh_in_background(table)

    async def close(self, timeout: float = 10.0) -> None:
        """Release every record held (a few hundred at a time, within ``timeout``),
        then this system's liveness: a record left behind names a holder that is
        gone, which the next claim of its key takes over."""
        await stop_task(self._renewer, what="activation lease renewal")
        await stop_task(self._refresher, what="placement record refresh")
        if not self.reachable():
            # Nobody to tell: each release would wait out its timeout (a close took
            # 15 s). The records name a holder whose liveness runs out within the
            # ttl, and the next claim of each key takes it over, as after a crash.
            if self._table is not None:
                await self._table.leave(tell=False)
            return
        held = list(self._held)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                for start in range(0, len(held), _RELEASED_AT_ONCE):
                    chunk = held[start : start + _RELEASED_AT_ONCE]
                    await asyncio.gather(*(self.release(address) for address in chunk))
        if self._table is not None:
            await self._table.leave()


def _key(address: str) -> str:
    type_, _, key = address.partition("/")
    return lease_key("act", type_, key)
