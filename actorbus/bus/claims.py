"""Claims on names that last as long as their holder lives.

A lease per name (``bus/leases.py``) costs a write per name at every renewal.
Keyed actors took one each: a process holding 20,000 activations with the
default 5 s ttl would have needed 12,000 writes a second only to keep them,
could not, and lost all of them within seconds (measured: 20,000 activations,
none left 8 s later). Here a holder renews one lease, its own liveness (a key
in the ``hosts`` bucket, whose ``max_age`` is the ttl), and each name it claims
is a record naming it in the ``placement`` bucket, which has no ttl:

- :meth:`ClaimTable.claim` is a KV *create* of the record. When the record is
  there, its holder is read: a live holder keeps it (the claimant is told who);
  a holder whose liveness lapsed (it died, or was cut off for longer than the
  ttl) loses it to the first claimant whose compare-and-set *update* on the
  record's revision succeeds, so two claimants never both win.
- :meth:`ClaimTable.release` deletes the record if it is still ours.
- :meth:`ClaimTable.renew` extends the holder's liveness. When that fails with
  :class:`LeaseLostError`, every claim it held may have been taken over: the
  holder must stop acting on all of them.

What a crashed holder leaves are records naming a dead holder, taken over (and
so cleaned) by the next claim of each name.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from actorbus.bus.leases import WRONG_LAST_SEQUENCE, Lease, LeaseBucket, LeaseLostError, lease_key


@dataclass(frozen=True)
class Claim:
    """Who holds a name: ``revision`` is set when it is this table's holder (the
    record's revision, which releasing it needs)."""

    holder: str
    revision: int | None


class ClaimTable:
    """Names claimed by holders that renew one liveness lease each."""

    def __init__(
        self, liveness: LeaseBucket, records: KeyValue, config: KeyValueConfig, holder: str
    ) -> None:
        self.liveness = liveness
        self.records = records
        self.config = config  # the records bucket's, as made again after a store loss
        self.holder = holder
        self.ttl = liveness.ttl
        self._alive: Lease | None = None
        self._liveness_turn = asyncio.Lock()  # one write of our liveness at a time

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        hosts: str,
        records: str,
        ttl: float,
        holder: str,
        *,
        replicas: int = 1,
    ) -> ClaimTable:
        """Bind to (or create) the liveness bucket ``hosts`` and the records bucket
        ``records``; ``ttl`` as ``LeaseBucket.open`` takes it."""
        liveness = await LeaseBucket.open(js, hosts, ttl, replicas=replicas)
        config = KeyValueConfig(
            bucket=records, history=1, storage=StorageType.FILE, replicas=replicas
        )
        try:
            kv = await js.create_key_value(config)
        except nats.js.errors.BadRequestError:
            kv = await js.key_value(records)
        return cls(liveness, kv, config, holder)

    async def claim(self, name: str) -> Claim:
        """The record of ``name``: taken for this holder when free or its holder is
        dead; else who holds it."""
        await self._stay_alive()
        me = self.holder.encode()
        for _ in range(4):  # released, expired or taken between two of our steps: again
            try:
                return Claim(self.holder, await self.records.create(name, me))
            except nats.js.errors.KeyWrongLastSequenceError:
                pass
            except nats.js.errors.KeyNotFoundError:
                continue  # deleted between nats-py's two steps: free now
            try:
                entry = await self.records.get(name)
            except nats.js.errors.KeyNotFoundError:
                continue
            holder = entry.value.decode() if entry.value else ""
            if holder == self.holder and entry.revision is not None:
                return Claim(holder, entry.revision)  # ours from before: adopted
            if holder and await self.is_alive(holder):
                return Claim(holder, None)
            try:  # its holder is gone: take it over, unless someone just did
                return Claim(self.holder, await self.records.update(name, me, last=entry.revision))
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
        raise LeaseLostError(name, self.holder, "could not take or read its record")

    async def release(self, name: str, revision: int) -> bool:
        """Give ``name`` up if it is still ours (True)."""
        try:
            await self.records.delete(name, last=revision)
        except nats.js.errors.APIError as err:
            if err.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def is_alive(self, holder: str) -> bool:
        return await self.liveness.holder(_liveness_key(holder)) is not None

    async def renew(self) -> None:
        """Extend this holder's liveness; LeaseLostError when it had lapsed (its
        claims may be someone else's now)."""
        async with self._liveness_turn:
            alive = self._alive
            if alive is None:
                self._alive = await self._acquire_liveness()
                return
            try:
                self._alive = await self.liveness.renew(alive)
            except LeaseLostError:
                self._alive = None
                raise

    async def leave(self) -> None:
        """Give up liveness (after releasing the claims): what is left is free."""
        alive, self._alive = self._alive, None
        if alive is not None:
            with contextlib.suppress(Exception):
                await self.liveness.release(alive)

    async def restore_if_lost(self, js: JetStreamContext) -> None:
        """Make both buckets again if a broker came back without its store."""
        await self.liveness.restore_if_lost(js)
        try:
            await self.records.status()
        except nats.js.errors.NotFoundError:
            self.records = await js.create_key_value(self.config)

    async def _stay_alive(self) -> None:
        if self._alive is not None:
            return
        async with self._liveness_turn:  # claims made at once take it once
            if self._alive is None:
                self._alive = await self._acquire_liveness()

    async def _acquire_liveness(self) -> Lease:
        key = _liveness_key(self.holder)
        lease = await self.liveness.acquire(key, self.holder)
        if lease is None:
            raise LeaseLostError(key, self.holder, "its liveness key is held by another")
        return lease


def _liveness_key(holder: str) -> str:
    return lease_key("host", holder)
