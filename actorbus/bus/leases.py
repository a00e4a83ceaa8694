"""Leases in a JetStream key-value bucket: "at most one holder of this key at a time".

A :class:`LeaseBucket` is a KV bucket whose ``max_age`` is the lease time to live.
The key's value names the holder, and its revision proves who holds it:

- :meth:`LeaseBucket.acquire` is a KV *create*. It succeeds only when the key is
  absent: never taken, released, or expired because its holder stopped renewing
  within ``ttl`` (the server drops the entry by ``max_age``). Acquiring a key you
  hold already (same holder name, say after a quick restart) adopts it.
- :meth:`LeaseBucket.renew` is a KV *update* against the lease's last revision.
  If anyone else wrote the key, or the entry expired meanwhile, the revision no
  longer matches and :class:`LeaseLostError` says the lease is gone. Renew well
  within ``ttl`` (every ``ttl / 3``): the server starts the countdown again at
  each write.
- :meth:`LeaseBucket.release` deletes the key if it is still ours, so the next
  candidate does not wait out the ``ttl``.

The bucket replicates like any stream (``replicas=3`` on a cluster), so the
lease outlives the loss of a server. A holder must stop acting as the holder
when a renewal fails and ``ttl`` may have passed since its last good renewal;
:class:`LeaderElection` does that bookkeeping.

Uses: the registry's leader election (one key, many candidates), and the
liveness of the systems hosting keyed virtual actors (``bus/claims.py``: one
key per system, however many actors it hosts). Keys are KV keys; build them
from arbitrary names with :func:`lease_key`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from actorbus.bus.kvkeys import key as _kv_key
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.errors import ActorBusError

log = logging.getLogger("actorbus.leases")

WRONG_LAST_SEQUENCE = (10071, 10164)
_RELEASE_WAIT = 1.0  # seconds a stopping holder waits for its lease's release


class LeaseLostError(ActorBusError):
    """The lease expired or someone else holds it now: stop acting as its holder."""

    code = "E_LEASE_LOST"

    def __init__(self, key: str, holder: str, why: str) -> None:
        super().__init__(f"lease {key!r} of {holder!r} lost: {why}")
        self.key = key
        self.holder = holder


def lease_key(*names: str) -> str:
    """A lease key from arbitrary names: ``lease_key("echo", "user 1")``."""
    return _kv_key("lease", *names)


@dataclass(frozen=True)
class Lease:
    """A held lease: pass it to renew and release. ``renewed_at`` is the
    ``time.monotonic()`` just before the write that (re)took it, so
    ``renewed_at + ttl`` is a safe lower bound for when it would expire."""

    key: str
    holder: str
    revision: int
    renewed_at: float

    def expires_within(self, ttl: float) -> float:
        """Seconds left before the lease may have expired (can be negative)."""
        return self.renewed_at + ttl - time.monotonic()


class LeaseBucket:
    """Leases with one time to live, in the KV bucket ``name``."""

    def __init__(self, kv: KeyValue, config: KeyValueConfig) -> None:
        self.kv = kv
        self.config = config  # as made again after a broker lost its store
        self.name = config.bucket or ""
        self.ttl = config.ttl or 0.0

    @classmethod
    async def open(
        cls, js: JetStreamContext, name: str, ttl: float, *, replicas: int = 1
    ) -> LeaseBucket:
        """Create (or bind to) the bucket. If it exists with another ``ttl``, the
        existing one wins (it is what the other holders use) and ``.ttl`` says so."""
        if ttl <= 0:
            raise ValueError("a lease ttl must be positive")
        config = KeyValueConfig(
            bucket=name, history=1, ttl=ttl, storage=StorageType.FILE, replicas=replicas
        )
        try:
            kv = await js.create_key_value(config)
        except nats.js.errors.BadRequestError:
            kv = await js.key_value(name)
            actual = (await kv.status()).ttl or ttl
            if actual != ttl:
                log.warning("lease bucket %s has ttl %gs, not %gs; using it", name, actual, ttl)
            config = replace(config, ttl=actual)
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
            raise ActorBusError(
                "leases need JetStream, which this NATS server does not offer"
            ) from None
        return cls(kv, config)

    async def restore_if_lost(self, js: JetStreamContext) -> bool:
        """Make the bucket again if it is gone (a broker back on a fresh store): the
        leases in it are gone too, so their holders find them lost and compete
        again; False when it is there."""
        try:
            await self.kv.status()
            return False
        except nats.js.errors.NotFoundError:
            pass
        log.warning(
            "lease bucket %s is gone (the broker lost its store?): making it again", self.name
        )
        self.kv = await js.create_key_value(self.config)
        return True

    async def acquire(self, key: str, holder: str) -> Lease | None:
        """Take the lease on ``key`` for ``holder``; None if someone else holds it."""
        started = time.monotonic()
        for _ in range(2):
            try:
                rev = await self.kv.create(key, holder.encode())
                return Lease(key, holder, rev, started)
            except nats.js.errors.KeyWrongLastSequenceError:
                break
            except nats.js.errors.KeyNotFoundError:
                # nats-py's create looks the key up after a conflict; it expired
                # in between: it is free now, so try once more.
                continue
        try:  # taken: by us (a restart within ttl)? then adopt it
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None  # expired just now; the next attempt will get it
        if entry.value is None or entry.value.decode() != holder or entry.revision is None:
            return None
        try:
            return await self.renew(Lease(key, holder, entry.revision, started))
        except LeaseLostError:
            return None

    async def renew(self, lease: Lease) -> Lease:
        """Extend the lease by ``ttl`` from now; LeaseLostError if it is not ours any more."""
        started = time.monotonic()
        try:
            rev = await self.kv.update(lease.key, lease.holder.encode(), last=lease.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise LeaseLostError(lease.key, lease.holder, "expired or taken over") from None
        return replace(lease, revision=rev, renewed_at=started)

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if it is still ours (True), so others need not wait."""
        try:
            await self.kv.delete(lease.key, last=lease.revision)
        except nats.js.errors.APIError as err:
            if err.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def holder(self, key: str) -> str | None:
        """Who holds ``key`` now (None: nobody)."""
        try:
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None


Callback = Callable[[], Awaitable[None]]


class LeaderElection:
    """Be the one leader among candidates sharing ``key`` in a lease bucket.

    A background task tries to acquire the lease every ``ttl / 3`` while not
    leading, and renews it every ``ttl / 3`` while leading. ``on_elected`` runs
    when this candidate becomes leader, ``on_lost`` when it stops being one:
    the lease was taken over, or renewals failed for so long (``2/3 ttl``) that
    another candidate may be about to take over. ``leading`` is an event set
    while leader. :meth:`stop` releases the lease, so a successor takes over
    at its next attempt instead of after ``ttl``.

    Failover time after a leader dies: up to ``ttl`` for its lease to expire,
    plus up to ``ttl / 3`` until a candidate's next attempt.
    """

    def __init__(
        self,
        leases: LeaseBucket,
        key: str,
        holder: str,
        *,
        on_elected: Callback | None = None,
        on_lost: Callback | None = None,
    ) -> None:
        self.leases = leases
        self.key = key
        self.holder = holder
        self.on_elected = on_elected
        self.on_lost = on_lost
        self.interval = leases.ttl / 3
        self.leading = asyncio.Event()
        self.terms = 0  # how many times this candidate became leader
        self._lease: Lease | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    async def start(self) -> None:
        """Try once right away (so a lone candidate leads when this returns), then
        keep going in the background."""
        await self._step()
        self._task = supervise(f"leader election {self.key}", self._run, logger=log)

    async def wait_elected(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.leading.wait()
        return self.is_leader

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.interval)
            await self._step()

    async def _step(self) -> None:
        try:
            if self._lease is None:
                async with asyncio.timeout(self.interval):
                    lease = await self.leases.acquire(self.key, self.holder)
                if lease is not None and not self._stopping:
                    self._lease = lease
                    await self._elected()
            else:
                async with asyncio.timeout(self.interval):
                    self._lease = await self.leases.renew(self._lease)
        except LeaseLostError as err:
            log.warning("%s", err)
            await self._lost()
        except Exception as exc:  # NATS unreachable, timeouts: try again next round
            log.debug("leader election %s: %r", self.key, exc)
            if self._lease is not None and self._lease.expires_within(self.leases.ttl) < (
                self.leases.ttl / 3
            ):
                log.warning("leader %s cannot renew its lease; stepping down", self.holder)
                await self._lost()

    async def _elected(self) -> None:
        self.terms += 1
        self.leading.set()
        log.info("%s is now the leader of %s", self.holder, self.key)
        if self.on_elected is not None:
            try:
                await self.on_elected()
            except Exception:
                log.exception("on_elected of %s failed", self.key)

    async def _lost(self) -> None:
        self._lease = None
        if not self.leading.is_set():
            return
        self.leading.clear()
        log.info("%s is no longer the leader of %s", self.holder, self.key)
        if self.on_lost is not None:
            try:
                await self.on_lost()
            except Exception:
                log.exception("on_lost of %s failed", self.key)

    async def stop(self) -> None:
        """Stop campaigning; a leader steps down (``on_lost``) and releases the lease."""
        self._stopping = True
        await stop_task(self._task, what=f"leader election {self.key}")
        lease = self._lease
        await self._lost()
        if lease is not None:
            # A courtesy to the next holder (else it waits out the ttl): not worth
            # more than a moment when the broker does not answer.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_RELEASE_WAIT):
                    await self.leases.release(lease)
