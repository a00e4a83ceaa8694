"""Claims on names that last as long as their holder lives.

A lease per name (``bus/leases.py``) costs a write per name at every renewal.
Keyed actors took one each: a process holding 20,000 activations with the
default 5 s ttl would have needed 12,000 writes a second only to keep them,
could not, and lost all of them within seconds (measured: 20,000 activations,
none left 8 s later). Here a holder renews one lease, its own liveness (a key
in the ``hosts`` bucket, whose ``max_age`` is the ttl), and each name it claims
is a record naming it in the ``placement`` bucket (whose ttl, below, is long):

- :meth:`ClaimTable.claim` is a KV *create* of the record (written in one
  atomic batch with the creates made beside it, ``bus/record_batches.py``).
  When the record is there, its holder is read: a live holder keeps it (the
  claimant is told who);
  a holder whose liveness lapsed (it died, or was cut off for longer than the
  ttl) loses it to the first claimant whose compare-and-set *update* on the
  record's revision succeeds, so two claimants never both win.
- :meth:`ClaimTable.release` deletes the record if it is still ours.
- :meth:`ClaimTable.renew` extends the holder's liveness. When that fails with
  :class:`LeaseLostError`, every claim it held may have been taken over: the
  holder must stop acting on all of them.

A record also lives no longer than ``record_ttl`` (a per-message TTL, nats-server
2.11+): what a crashed holder leaves behind, records naming a dead holder, is
taken over by the next claim of its name or gone by then, so names that are
never claimed again (a conversation's id) do not pile up in the bucket. A live
holder writes each of its records again (:meth:`ClaimTable.refresh`) before half
of that has passed; one it finds changed or gone was lost, and it must stop
acting on that name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from actorbus.bus.jetstream import patiently
from actorbus.bus.leases import WRONG_LAST_SEQUENCE, Lease, LeaseBucket, LeaseLostError, lease_key
from actorbus.bus.record_batches import RecordCreates, create_records_bucket

RECORD_TTL = 3600.0  # seconds a claim record outlives its holder at most
SETTLING = 10.0  # seconds a claim waits for its bucket's stream to have a leader


@dataclass(frozen=True)
class Claim:
    """Who holds a name: ``revision`` is set when it is this table's holder (the
    record's revision, which releasing it needs)."""

    holder: str
    revision: int | None


class ClaimTable:
    """Names claimed by holders that renew one liveness lease each."""

    def __init__(
        self,
        liveness: LeaseBucket,
        records: KeyValue,
        config: KeyValueConfig,
        holder: str,
        record_ttl: float = RECORD_TTL,
        creates: RecordCreates | None = None,
    ) -> None:
        if record_ttl < max(2.0, 4 * liveness.ttl):
            raise ValueError(
                f"a claim record's ttl ({record_ttl:g}s) must be at least 2 s and four "
                f"times the liveness ttl ({liveness.ttl:g}s): a holder refreshes its "
                "records at half of it, between two renewals of its liveness"
            )
        self.liveness = liveness
        self.records = records
        self.config = config  # the records bucket's, as made again after a store loss
        self.holder = holder
        self.ttl = liveness.ttl
        self.record_ttl = record_ttl
        # Its records' creates: batched where the server can (``bus/record_batches.py``).
        self.creates = creates or RecordCreates(records, holder.encode(), record_ttl)
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
        record_ttl: float = RECORD_TTL,
    ) -> ClaimTable:
        """Bind to (or create) the liveness bucket ``hosts`` and the records bucket
        ``records``; ``ttl`` as ``LeaseBucket.open`` takes it."""
        liveness = await LeaseBucket.open(js, hosts, ttl, replicas=replicas)
        config = KeyValueConfig(
            bucket=records, history=1, storage=StorageType.FILE, replicas=replicas
        )
        try:
            kv = await create_records_bucket(js, config)
        except nats.js.errors.BadRequestError:
            kv = await js.key_value(records)
            await _allow_record_ttl(js, kv)
        creates = await RecordCreates.open(js, kv, holder.encode(), record_ttl)
        return cls(liveness, kv, config, holder, record_ttl, creates)

    async def claim(self, name: str) -> Claim:
        """The record of ``name``: taken for this holder when free or its holder is
        dead; else who holds it. While the bucket's stream has no leader (a
        cluster electing one: a bucket just made, a node gone) its writes get no
        answer, and the claim is tried again for up to ``SETTLING`` seconds
        (each step is safe to repeat: a record this holder did write is
        adopted)."""
        await self._stay_alive()
        return await patiently(lambda: self._claim(name), SETTLING, f"claiming {name}")

    async def _claim(self, name: str) -> Claim:
        for _ in range(4):  # released, expired or taken between two of our steps: again
            try:
                return Claim(self.holder, await self.creates.create(name))
            except nats.js.errors.KeyWrongLastSequenceError:
                pass
            except nats.js.errors.KeyNotFoundError:
                continue  # deleted between nats-py's two steps: free now
            try:
                entry = await self.records.get(name)
            except nats.js.errors.KeyNotFoundError:
                continue
            holder = entry.value.decode() if entry.value else ""
            if holder and holder != self.holder and await self.is_alive(holder):
                return Claim(holder, None)
            # Ours from before (adopted, its ttl made whole), or its holder is gone:
            # take it over, unless someone just did.
            revision = await self.refresh(name, entry.revision or 0)
            if revision is not None:
                return Claim(self.holder, revision)
        raise LeaseLostError(name, self.holder, "could not take or read its record")

    async def refresh(self, name: str, revision: int) -> int | None:
        """Write the record of ``name`` again for this holder, with its whole ttl,
        if it is still at ``revision``: its new revision; None when it changed or
        is gone (taken over, or expired: the name may be someone else's now)."""
        try:
            # nats-py's update() takes no ttl; the method it calls does.
            return await self.records._update(
                name, self.holder.encode(), last=revision, msg_ttl=self.record_ttl
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            return None

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

    async def leave(self, *, tell: bool = True) -> None:
        """Give up liveness (after releasing the claims): what is left is free.
        ``tell=False``: with no broker to tell, it runs out by itself."""
        await self.creates.close()
        alive, self._alive = self._alive, None
        if alive is not None and tell:
            with contextlib.suppress(Exception):
                await self.liveness.release(alive)

    async def restore_if_lost(self, js: JetStreamContext) -> None:
        """Make both buckets again if a broker came back without its store."""
        await self.liveness.restore_if_lost(js)
        try:
            await self.records.status()
        except nats.js.errors.NotFoundError:
            self.records = await create_records_bucket(js, self.config)
            stale, self.creates = (
                self.creates,
                await RecordCreates.open(js, self.records, self.holder.encode(), self.record_ttl),
            )
            await stale.close()

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


async def _allow_record_ttl(js: JetStreamContext, kv: KeyValue) -> None:
    """A records bucket made before its records had a ttl (or by a client that did
    not allow one) is changed to take them: the server refuses a TTL otherwise."""
    info = (await kv.status()).stream_info
    if not info.config.allow_msg_ttl:
        await js.update_stream(dataclasses.replace(info.config, allow_msg_ttl=True))


def _liveness_key(holder: str) -> str:
    return lease_key("host", holder)
