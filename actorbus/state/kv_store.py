"""Actor state in JetStream key-value: the embedded default, nothing new to run.

One bucket per namespace, ``actorbus-{ns}-state``, an entry per actor
``<type>.<key>``: under the type, so that a broker lets only the type's hosts
write it (``security/broker.py``'s per-type buckets), file storage, R1 on one
node and R3 on a cluster. The bucket keeps ``history`` revisions (1: the current
state only), drops an entry ``ttl`` seconds after its last write when one is
set, and ``delete`` purges every revision. Compare-and-set is the key-value
store's own (``update`` with the last revision; ``create`` when there is none).
Given the system's request path (``request``), an update goes out on it as the
key-value update it is (a publish with ``Nats-Expected-Last-Subject-Sequence``)
instead of through nats-py's key-value client: the write every stateful turn
makes, at a third of the client's cost.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from actorbus.bus.bucket_mirror import open_bucket
from actorbus.bus.kv_watch import current_entries
from actorbus.bus.requests import NoResponders
from actorbus.codecs.errors import StateTooLargeError
from actorbus.state.store import StoredState, revision_conflict

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ENCODED = "="  # a key with characters a key-value key cannot hold: "=" + base32
_HEADROOM = 1024  # bytes of max_payload the message's own headers may take
_STREAM_NOT_FOUND = 10059
_WRONG_LAST_SEQUENCE = 10071
_TIMEOUT = 5.0  # seconds a write may wait for its publish-ack (nats-py's default too)

# Sends a request and returns the answer: (subject, body, headers, timeout).
Request = Callable[[str, bytes, dict[str, str], float], Awaitable[Any]]


def state_bucket(ns: str) -> str:
    return f"actorbus-{ns}-state"


def state_entry(type_: str, key: str) -> str:
    """The key-value key for an actor: readable where the actor key allows."""
    if _PLAIN_KEY.match(key):
        return f"{type_}.{key}"
    encoded = base64.b32encode(key.encode()).decode().rstrip("=").lower()
    return f"{type_}.{_ENCODED}{encoded}"


def actor_key_of(entry_key: str) -> str:
    """The actor key back from the part of an entry after ``<type>.``."""
    if not entry_key.startswith(_ENCODED):
        return entry_key
    encoded = entry_key[1:].upper()
    return base64.b32decode(encoded + "=" * (-len(encoded) % 8)).decode()


class KeyValueStateStore:
    """:class:`~actorbus.state.store.StateStore` on a JetStream key-value bucket."""

    def __init__(
        self,
        js: JetStreamContext,
        config: KeyValueConfig,
        max_payload: int,
        request: Request | None = None,
    ) -> None:
        self._js = js
        self._config = config
        self._kv: KeyValue | None = None
        self._max_size = max_payload - _HEADROOM
        self._request = request

    @classmethod
    def for_namespace(
        cls,
        js: JetStreamContext,
        ns: str,
        max_payload: int,
        *,
        history: int = 1,
        ttl: float | None = None,
        replicas: int = 1,
        request: Request | None = None,
    ) -> KeyValueStateStore:
        config = KeyValueConfig(
            bucket=state_bucket(ns),
            history=history,
            ttl=ttl,
            storage=StorageType.FILE,
            replicas=replicas,
            description="actorbus actor state (sealed to each actor type's key)",
        )
        return cls(js, config, max_payload, request)

    @property
    def max_size(self) -> int:
        return self._max_size

    async def _bucket(self, again: bool = False) -> KeyValue:
        """The bucket, made on first use (and again when the broker lost it)."""
        if self._kv is None or again:
            self._kv = await open_bucket(self._js, self._config)
        return self._kv

    async def load(self, type_: str, key: str) -> StoredState | None:
        entry = state_entry(type_, key)
        for again in (False, True):
            kv = await self._bucket(again)
            try:
                got = await kv.get(entry)
            except nats.js.errors.KeyNotFoundError:  # KeyDeletedError too
                return None
            except nats.js.errors.NotFoundError as exc:
                if exc.err_code != _STREAM_NOT_FOUND or again:
                    raise
                continue  # the bucket is gone (a fresh store): made again, and empty
            return StoredState(got.value or b"", got.revision or 0)
        return None

    async def save(self, type_: str, key: str, data: bytes, revision: int | None) -> int:
        if len(data) > self._max_size:
            raise StateTooLargeError(
                f"the state of {type_}/{key} is {len(data):,} bytes; the key-value store "
                f"takes {self._max_size:,} at most (raise the server's max_payload, or keep "
                "large data elsewhere and its reference in the state)"
            )
        entry = state_entry(type_, key)
        kv = await self._bucket()
        try:
            if revision is None:
                return await kv.create(entry, data)
            if self._request is not None:
                written = await self._update(entry, data, revision)
                if written is not None:
                    return written
            return await kv.update(entry, data, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise revision_conflict(type_, key, revision) from None

    async def _update(self, entry: str, data: bytes, revision: int) -> int | None:
        """The update on the system's request path: the new revision; None when
        nothing was stored for another reason than a revision conflict (the
        key-value client then does it again and reports it its own way)."""
        assert self._request is not None
        subject = f"$KV.{self._config.bucket}.{entry}"
        headers = {"Nats-Expected-Last-Subject-Sequence": str(revision)}
        try:
            answer = await self._request(subject, data, headers, _TIMEOUT)
        except NoResponders:  # nothing was stored: the client tries (and says why)
            return None
        ack = json.loads(answer.data or b"{}")
        error = ack.get("error") if isinstance(ack, dict) else None
        if error is None and isinstance(ack, dict) and isinstance(ack.get("seq"), int):
            return int(ack["seq"])
        if isinstance(error, dict) and error.get("err_code") == _WRONG_LAST_SEQUENCE:
            raise nats.js.errors.KeyWrongLastSequenceError()
        return None

    async def delete(self, type_: str, key: str) -> None:
        kv = await self._bucket()
        await kv.purge(state_entry(type_, key))

    async def keys(self, type_: str) -> AsyncIterator[str]:
        kv = await self._bucket()
        # Filtered by the server (nats-py's keys() filters by substring).
        entries = await current_entries(kv, f"{type_}.>")
        for key in sorted(actor_key_of(entry.key.partition(".")[2]) for entry in entries):
            yield key

    async def close(self) -> None:
        self._kv = None  # the connection is the system's
