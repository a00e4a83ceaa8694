"""A key-value bucket mirrored in memory, kept current by a watcher.

Reads never leave the process; a waiter for news waits on an event the watcher
sets when a revision arrives (never a poll), and a writer can wait until the
mirror has seen its own write (read your writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from actorbus.bus.kv_watch import caught_up
from actorbus.bus.replicas import create_bucket
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.errors import ActorBusError

log = logging.getLogger("actorbus.registry.store")
_RESTART_TIMEOUT = 10.0  # seconds a mirror made again has to load its bucket


def now_ms() -> int:
    return int(time.time() * 1000)


def latest_only(
    bucket: str, replicas: int, description: str, ttl: float | None = None
) -> KeyValueConfig:
    """A bucket that keeps each key's latest value only, on disk."""
    return KeyValueConfig(
        bucket=bucket,
        history=1,
        storage=StorageType.FILE,
        replicas=replicas,
        ttl=ttl,
        description=description,
    )


async def open_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """Create a bucket, or bind to it when it exists with other settings (the first
    creator's settings win; a warning says so, unless it only has more replicas)."""
    try:
        return await create_bucket(js, config)
    except nats.js.errors.BadRequestError as exc:
        log.warning("bucket %s exists with other settings (%s); using it", config.bucket, exc)
        return await js.key_value(config.bucket)
    except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
        raise ActorBusError(
            f"bucket {config.bucket} needs JetStream, which this NATS server does not offer"
        ) from None


class BucketMirror:
    """An in-memory copy of a KV bucket, kept current by a watcher.

    ``apply(key, value_or_None, revision, created_ms)`` is called for every
    entry (None: deleted). ``changed`` is awaited by whoever waits for news.
    """

    def __init__(
        self, kv: KeyValue, apply: Callable[[str, bytes | None, int, int], None], name: str
    ) -> None:
        self._kv = kv
        self._apply = apply
        self._name = name
        self.last_seq = 0
        self._changed = asyncio.Event()
        self._loaded = asyncio.Event()
        self._watcher: KeyValue.KeyWatcher | None = None
        self._task: asyncio.Task[None] | None = None
        self._born: dt.datetime | None = None  # when the bucket's stream was made

    async def start(self, timeout: float) -> None:
        born = (await self._kv.status()).stream_info.created
        self._watcher = await self._kv.watchall()
        self._task = supervise(f"mirror of {self._name}", self._run, logger=log)
        async with asyncio.timeout(timeout):
            await self._loaded.wait()
        self._born = born  # only now: a start that failed is tried again

    async def _run(self) -> None:
        """Apply every change the watcher reports; restarted with a new watcher
        (which replays the current values, applied idempotently) if it fails."""
        if self._watcher is None:
            self._watcher = await self._kv.watchall()
        watcher = self._watcher
        try:
            await self._follow(watcher)
        finally:
            self._watcher = None
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        seen = 0  # entries this watcher gave
        async for entry in watcher:
            if entry is None:  # "the initial values are all in", says nats-py
                if await caught_up(watcher, seen):
                    self._loaded.set()
                continue
            seen += 1
            rev = entry.revision or 0
            deleted = entry.operation in (KV_DEL, KV_PURGE)
            created = int(entry.created.timestamp() * 1000) if entry.created else now_ms()
            try:
                self._apply(entry.key, None if deleted else entry.value, rev, created)
            except Exception:  # one bad record must not stop the mirror
                log.exception("%s: cannot apply %s@%d", self._name, entry.key, rev)
            self.last_seq = max(self.last_seq, rev)
            self._notify()
            if entry.delta == 0:
                self._loaded.set()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def next_change(self, timeout: float) -> bool:
        """Wait for the next entry (True) or the timeout (False).

        ``asyncio.timeout``, not ``wait_for``: on Python 3.11 the latter can
        swallow a cancellation that arrives as the event fires, and a renewal
        loop waiting here would then survive its ``stop()``."""
        event = self._changed
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    async def wait_seen(self, seq: int, timeout: float = 5.0) -> bool:
        """Until the mirror has applied revision ``seq`` (False after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self.last_seq < seq:
            left = deadline - time.monotonic()
            if left <= 0 or not await self.next_change(left):
                return self.last_seq >= seq
        return True

    async def restore_if_lost(
        self, js: JetStreamContext, config: KeyValueConfig, forget: Callable[[], None]
    ) -> bool:
        """Make the bucket again if it is gone (a broker back on a fresh store),
        with what was mirrored from it forgotten (``forget``) and the watcher on
        the new one; also when another member made it again first (its stream was
        born after ours). False when it is the bucket this mirror follows."""
        try:
            born = (await self._kv.status()).stream_info.created
        except nats.js.errors.NotFoundError:
            log.warning(
                "bucket %s is gone (the broker lost its store?): making it again", self._name
            )
            await self.stop()
            self._kv = await open_bucket(js, config)
        else:
            if born == self._born:
                return False
            # Another member made it again first: it is there, but empty of what we
            # mirrored, and our watcher follows the stream that was lost.
            log.warning("bucket %s was made again (the broker lost its store?)", self._name)
            await self.stop()
        self._born = None
        self.last_seq = 0
        self._loaded = asyncio.Event()
        forget()
        await self.start(_RESTART_TIMEOUT)
        return True

    async def stop(self) -> None:
        await stop_task(self._task, what=f"mirror of {self._name}")
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()  # type: ignore[no-untyped-call]
