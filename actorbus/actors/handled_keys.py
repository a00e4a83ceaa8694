"""The idempotency keys a durable reader has handled: the namespace's key-value
bucket, read and written through a cluster's leader elections, and the keys
this process handled but could not write yet.

A key handled but not written lets its message be handled again. That happens
when a node dies at the wrong moment: the ack dies with it, the message comes
back, and only the bucket says it was handled. So a write rides through an
election (for up to the settings' ``start_timeout``), and a write that still
fails is remembered here: the message coming back to this process is answered
from memory, and the key is written then.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from actorbus.bus.jetstream import patiently
from actorbus.codecs.errors import ActorBusError

log = logging.getLogger("actorbus.durable")

T = TypeVar("T")
_REMEMBERED = 4096  # unwritten keys kept in memory (the oldest are forgotten first)


class HandledKeys:
    """One reader's view of the handled-keys bucket."""

    def __init__(self, bucket: KeyValue, patience: float, what: str) -> None:
        self.bucket = bucket
        self.patience = patience  # seconds a read or write is retried through an election
        self.what = what  # for logs: an address or 'type/*'
        self.unwritten: OrderedDict[str, bytes] = OrderedDict()

    async def get(self, entry: str) -> bytes | None:
        """The key's record if it was handled already, else None. A broker that
        stays away raises its error (the message is then delivered again later)."""
        remembered = self.unwritten.get(entry)
        if remembered is not None:
            await self.put(entry, remembered)  # a second chance to write it
            return remembered
        try:
            found = await self._through_election(partial(self.bucket.get, entry))
        except nats.js.errors.KeyNotFoundError:
            return None
        return found.value or b""

    async def put(self, entry: str, record: bytes) -> None:
        """Record a handled key. Never raises for the broker: a key that cannot be
        written now is remembered in this process and written again later."""
        try:
            await self._through_election(partial(self.bucket.put, entry, record))
        except (nats.errors.Error, TimeoutError, ConnectionError) as exc:
            self.unwritten[entry] = record
            self.unwritten.move_to_end(entry)
            while len(self.unwritten) > _REMEMBERED:
                self.unwritten.popitem(last=False)
            log.warning(
                "%s: a handled idempotency key could not be recorded (%r); this process "
                "remembers it and writes it again when its message comes back",
                self.what,
                exc,
            )
            return
        self.unwritten.pop(entry, None)

    async def _through_election(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await patiently(call, self.patience, f"{self.what}: the handled-keys bucket")
        except ActorBusError as err:  # still electing after all that time
            if isinstance(err.__cause__, nats.errors.Error):
                raise err.__cause__ from err
            raise
