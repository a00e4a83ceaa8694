"""Single activation of keyed actor types across processes (virtual actors).

A type with ``keyed = True`` has at most one live instance of each ``type/key``
in the whole namespace. Activating one takes a lease on ``type/key`` in the
``actorbus-{ns}-activations`` bucket, held by the ActorSystem's id and renewed
(every ``ttl / 3``, one write per instance) for as long as the instance lives;
passivation and shutdown release it. A process that gets a message for a key
another process holds forwards it there (see ``ActorSystem._forward``); when the
holder died, its lease runs out within ``ttl`` and the next message activates
the actor where it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from actorbus.bus.leases import Lease, LeaseBucket, LeaseLostError, lease_key
from actorbus.bus.tasks import stop_task, supervise

if TYPE_CHECKING:
    from nats.js import JetStreamContext

log = logging.getLogger("actorbus.placement")

LostCallback = Callable[[str], Awaitable[None]]


def activations_bucket(ns: str) -> str:
    return f"actorbus-{ns}-activations"


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
    ) -> None:
        self.js = js
        self.namespace = namespace
        self.holder = holder
        self.ttl = ttl
        self.replicas = replicas
        self.on_lost = on_lost
        self._bucket: LeaseBucket | None = None
        self._opening = asyncio.Lock()
        self._held: dict[str, Lease] = {}
        self._claims: dict[str, asyncio.Future[str | None]] = {}
        self._owners: dict[str, str] = {}  # who hosts what, as last seen (may be stale)
        self._renewer: asyncio.Task[None] | None = None

    async def bucket(self) -> LeaseBucket:
        if self._bucket is None:
            async with self._opening:
                if self._bucket is None:
                    self._bucket = await LeaseBucket.open(
                        self.js,
                        activations_bucket(self.namespace),
                        self.ttl,
                        replicas=self.replicas,
                    )
                    self.ttl = self._bucket.ttl
        return self._bucket

    async def restore_if_lost(self) -> None:
        """The broker lost its store: make the leases' bucket again (the leases in
        it are gone: their holders find them lost at the next renewal)."""
        if self._bucket is not None:
            await self._bucket.restore_if_lost(self.js)

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
        bucket = await self.bucket()
        key = _key(address)
        for _ in range(3):  # taken and expired between our two reads: try again
            lease = await bucket.acquire(key, self.holder)
            if lease is not None:
                self._held[address] = lease
                self._ensure_renewer()
                return None
            holder = await bucket.holder(key)
            if holder is not None:
                if len(self._owners) >= 100_000:
                    self._owners.clear()  # a bound, not an LRU: forwards re-learn cheaply
                self._owners[address] = holder
                return holder
        raise LeaseLostError(key, self.holder, "could not take or read the activation lease")

    async def release(self, address: str) -> None:
        lease = self._held.pop(address, None)
        if lease is not None and self._bucket is not None:
            with contextlib.suppress(Exception):
                await self._bucket.release(lease)

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = supervise("activation lease renewal", self._renew_forever, logger=log)

    async def _renew_forever(self) -> None:
        while self._held:
            await asyncio.sleep(self.ttl / 3)
            bucket = await self.bucket()
            for address, lease in list(self._held.items()):
                if self._held.get(address) is not lease:
                    continue  # released meanwhile
                try:
                    self._held[address] = await bucket.renew(lease)
                except LeaseLostError:
                    # Another process holds it now (we were cut off for longer
                    # than ttl): this instance must stop being the one.
                    self._held.pop(address, None)
                    log.warning("activation of %s lost to another process; stopping it", address)
                    await self.on_lost(address)
                except Exception as exc:  # NATS away: try again next round
                    log.debug("renewing activation of %s: %r", address, exc)

    async def close(self) -> None:
        await stop_task(self._renewer, what="activation lease renewal")
        for address in list(self._held):
            await self.release(address)


def _key(address: str) -> str:
    type_, _, key = address.partition("/")
    return lease_key("act", type_, key)
