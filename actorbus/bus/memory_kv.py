"""A key-value bucket in memory, for the in-process bus (``bus/local.py``).

It keeps what actorbus relies on in a JetStream bucket: revisions that only
grow, compare-and-set (``create`` only when absent, ``update`` and ``delete``
at a given revision), a bucket's time to live counted from an entry's last
write, and watches (the current values, ``None`` when they are all in, then
every change). It raises nats-py's own errors, so code written against a
JetStream bucket (leases, declared state, the registry's records) runs on it
unchanged. A bucket lives as long as its bus.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.js.api import StreamConfig, StreamInfo, StreamState
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from actorbus.bus.subjects import subject_matches

_WRONG_LAST_SEQUENCE = 10071  # the server's error code for a failed compare-and-set


@dataclass
class _Value:
    value: bytes
    revision: int
    written: float  # time.monotonic() of the write
    created: dt.datetime  # the wall clock of the write, as an entry says it


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class _MemoryWatcher(KeyValue.KeyWatcher):
    """A watch on a :class:`MemoryKeyValue`: the current values, the ``None``
    that says they are all in, then every change as it is made."""

    def __init__(self, kv: MemoryKeyValue, keys: str, ignore_deletes: bool) -> None:
        super().__init__(None)  # type: ignore[no-untyped-call]
        self._updates = asyncio.Queue()  # unbounded: a slow reader misses nothing
        self.kv = kv
        self.keys = keys
        self.ignore_deletes = ignore_deletes

    def offer(self, entry: KeyValue.Entry) -> None:
        if subject_matches(self.keys, entry.key) and not (
            self.ignore_deletes and entry.operation is not None
        ):
            self._updates.put_nowait(entry)

    async def stop(self) -> None:
        self.kv.watchers.discard(self)
        self._updates.put_nowait(KeyValue.KeyWatcher.STOP_ITER)


class MemoryKeyValue(KeyValue):
    """A key-value bucket in memory with the revisions, compare-and-set and
    time-to-live of a JetStream bucket, raising nats-py's own errors."""

    def __init__(self, name: str, ttl: float, history: int) -> None:
        super().__init__(name, f"KV_{name}", f"$KV.{name}.", None, False)  # type: ignore[arg-type]
        self.ttl = ttl
        self._history = history
        self._values: dict[str, _Value] = {}
        self._revision = 0
        self._born = _now()
        self.watchers: set[_MemoryWatcher] = set()

    def _live(self, key: str) -> _Value | None:
        entry = self._values.get(key)
        if entry is not None and self.ttl and time.monotonic() - entry.written > self.ttl:
            del self._values[key]
            return None
        return entry

    def _write(self, key: str, value: bytes) -> int:
        self._revision += 1
        entry = _Value(value, self._revision, time.monotonic(), _now())
        self._values[key] = entry
        self._tell(self._entry(key, entry, None))
        return self._revision

    def _remove(self, key: str, operation: str) -> None:
        self._values.pop(key, None)
        self._revision += 1
        self._tell(self._entry(key, _Value(b"", self._revision, 0.0, _now()), operation))

    def _entry(
        self, key: str, entry: _Value, operation: str | None, delta: int = 0
    ) -> KeyValue.Entry:
        # nats-py annotates ``created`` as an int; what it gives (and readers use) is a datetime
        created: Any = entry.created
        return KeyValue.Entry(
            self._name, key, entry.value, entry.revision, delta, created, operation
        )

    def _tell(self, entry: KeyValue.Entry) -> None:
        for watcher in list(self.watchers):
            watcher.offer(entry)

    @staticmethod
    def _wrong_last(key: str, entry: _Value | None) -> nats.js.errors.APIError:
        err = nats.js.errors.KeyWrongLastSequenceError(
            description=f"wrong last sequence for {key}: {entry.revision if entry else 0}"
        )
        err.err_code = _WRONG_LAST_SEQUENCE
        return err

    async def get(
        self, key: str, revision: int | None = None, validate_keys: bool = True
    ) -> KeyValue.Entry:
        entry = self._live(key)
        if entry is None or (revision is not None and revision != entry.revision):
            raise nats.js.errors.KeyNotFoundError()
        return self._entry(key, entry, None)

    async def put(self, key: str, value: bytes, validate_keys: bool = True) -> int:
        return self._write(key, value)

    async def create(
        self, key: str, value: bytes, validate_keys: bool = True, msg_ttl: float | None = None
    ) -> int:
        entry = self._live(key)
        if entry is not None:
            raise self._wrong_last(key, entry)
        return self._write(key, value)

    async def update(
        self, key: str, value: bytes, last: int | None = None, validate_keys: bool = True
    ) -> int:
        return await self._update(key, value, last, validate_keys)

    async def _update(
        self,
        key: str,
        value: bytes,
        last: int | None = None,
        validate_keys: bool = True,
        msg_ttl: float | None = None,
    ) -> int:
        # A per-entry ttl is not kept: one process leaves no crashed holder's
        # records behind (what it is for on a server).
        entry = self._live(key)
        if (entry.revision if entry else 0) != (last or 0):
            raise self._wrong_last(key, entry)
        return self._write(key, value)

    async def delete(
        self,
        key: str,
        last: int | None = None,
        validate_keys: bool = True,
        msg_ttl: float | None = None,
    ) -> bool:
        entry = self._live(key)
        if last and (entry is None or entry.revision != last):
            raise self._wrong_last(key, entry)
        self._remove(key, KV_DEL)
        return True

    async def purge(self, key: str, msg_ttl: float | None = None) -> bool:
        self._remove(key, KV_PURGE)
        return True

    async def watch(
        self,
        keys: str,
        headers_only: bool = False,
        include_history: bool = False,
        ignore_deletes: bool = False,
        meta_only: bool = False,
        inactive_threshold: float | None = None,
    ) -> KeyValue.KeyWatcher:
        watcher = _MemoryWatcher(self, keys, ignore_deletes)
        current = sorted(
            (e.revision, k) for k in list(self._values) if (e := self._live(k)) is not None
        )
        current = [(rev, k) for rev, k in current if subject_matches(keys, k)]
        for left, (_, key) in zip(range(len(current) - 1, -1, -1), current, strict=True):
            watcher._updates.put_nowait(self._entry(key, self._values[key], None, left))
        watcher._updates.put_nowait(None)
        self.watchers.add(watcher)
        return watcher

    async def keys(self, filters: list[str] | None = None, **kwargs: Any) -> list[str]:
        found = [k for k in list(self._values) if self._live(k) is not None]
        if filters:
            found = [k for k in found if any(f in k for f in filters)]
        if not found:
            raise nats.js.errors.NoKeysError
        return found

    async def purge_deletes(self, olderthan: int = 30 * 60) -> bool:
        return True  # deletes leave no marker here

    async def status(self) -> KeyValue.BucketStatus:
        config = StreamConfig(
            name=self._stream, max_age=self.ttl or None, max_msgs_per_subject=self._history
        )
        state = StreamState(
            messages=len(self._values),
            bytes=0,
            first_seq=0,
            last_seq=self._revision,
            consumer_count=0,
        )
        info = StreamInfo(config=config, state=state, created=self._born)
        return KeyValue.BucketStatus(info, self._name)
