"""The in-process bus: the actor runtime with no server, for fast tests.

A :class:`LocalBus` routes subjects in memory among the clients opened on it.
Each :class:`LocalClient` is actorbus's own NATS client (``bus/client.py``,
nats-py underneath) with only its wire replaced: where the NATS client writes
``PUB`` to a socket and a server writes ``MSG`` back, the local one hands the
message to the bus, which gives it to every matching subscription through
nats-py's own ``_process_msg``, read from the client's own inbound queue by a
reader task that yields between reads as a socket's read loop does: a
publisher never runs a receiver's code, and a flood arrives in chunks, not all
before a subscription's task runs. So everything above the wire is the very
code that runs against a server: subscriptions and their callback tasks,
pending limits and slow-consumer reports, header parsing, ``Msg`` objects and
their ``respond()``, queue groups, ``503`` no-responders replies, payload
limits, drain and close. That is what makes it faithful enough to run the
actor semantics suite on both transports (``tests/actors/``), as FastStream's
``TestNatsBroker`` stands in for a broker in its users' tests.

What a server keeps is not all here: JetStream streams (durable delivery,
reminders, history, dead letters) get the answer a server without JetStream
gives, so they fail with the same typed errors. Key-value buckets are kept in
memory (``bus/memory_kv.py``), enough for activation leases, declared state and
the registry's records, so keyed actors are placed across the systems of one
bus as across processes and ``discover()`` finds what they host.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.aio.client import Client as _NatsClient
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from actorbus.bus.client import Client, EncodedHeaders, encode_headers
from actorbus.bus.connection import BusConnection, ConnectOptions
from actorbus.bus.memory_kv import MemoryKeyValue
from actorbus.bus.subjects import tokens_match
from actorbus.bus.tasks import stop_task, supervise

log = logging.getLogger("actorbus.bus")

_NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"
_READ_SIZE = 32 * 1024  # what nats-py reads off a socket at once
MAX_PAYLOAD = 1024 * 1024  # as nats-server's default


def _is_wildcard(subject: str) -> bool:
    return "*" in subject.split(".") or subject.endswith(">")


@dataclass(frozen=True)
class _Interest:
    client: LocalClient
    sid: int
    subject: str
    queue: str
    tokens: tuple[str, ...]  # of a wildcard subject, split once


class LocalBus:
    """Subjects routed in memory among the clients opened on it, and the
    key-value buckets they share. One bus is one "server": systems opened on
    the same bus see each other; separate buses are separate worlds."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        # every interest by (client, sid); those on one exact subject found by
        # it, the few wildcard ones (request inboxes, streams' controls) matched
        self._interests: dict[tuple[int, int], _Interest] = {}
        self._exact: dict[str, dict[tuple[int, int], _Interest]] = defaultdict(dict)
        self._wildcards: dict[tuple[int, int], _Interest] = {}
        self._buckets: dict[str, MemoryKeyValue] = {}
        self._clients = 0

    def client(self) -> LocalClient:
        """A new client on this bus (connected at once)."""
        self._clients += 1
        return LocalClient(self, self._clients)

    def subscribe(self, client: LocalClient, sub: Subscription) -> None:
        subject, key = sub._subject, (client.number, sub._id)
        wildcard = _is_wildcard(subject)
        tokens = tuple(subject.split(".")) if wildcard else ()
        interest = _Interest(client, sub._id, subject, sub._queue or "", tokens)
        self._interests[key] = interest
        if wildcard:
            self._wildcards[key] = interest
        else:
            self._exact[subject][key] = interest

    def unsubscribe(self, client: LocalClient, sid: int) -> None:
        key = (client.number, sid)
        interest = self._interests.pop(key, None)
        if interest is None:
            return
        if interest.tokens:
            del self._wildcards[key]
            return
        exact = self._exact[interest.subject]
        del exact[key]
        if not exact:
            del self._exact[interest.subject]

    def forget(self, client: LocalClient) -> None:
        for number, sid in list(self._interests):
            if number == client.number:
                self.unsubscribe(client, sid)

    def route(self, subject: str, reply: str, data: bytes, headers: bytes) -> int:
        """Deliver to every plain subscription that matches and to one member of
        each matching queue group; returns how many got it."""
        matching = list(self._exact.get(subject, {}).values())
        if self._wildcards:
            tokens = subject.split(".")
            matching += [i for i in self._wildcards.values() if tokens_match(i.tokens, tokens)]
        if len(matching) == 1 or not any(i.queue for i in matching):
            chosen = matching
        else:
            chosen = [i for i in matching if not i.queue]
            groups: dict[tuple[str, str], list[_Interest]] = defaultdict(list)
            for interest in matching:
                if interest.queue:
                    groups[(interest.subject, interest.queue)].append(interest)
            chosen += [random.choice(members) for members in groups.values()]
        for interest in chosen:
            interest.client.deliver(interest.sid, subject, reply, data, headers)
        return len(chosen)

    def bucket(self, config: KeyValueConfig, *, create: bool) -> MemoryKeyValue:
        name = config.bucket or ""
        kv = self._buckets.get(name)
        if kv is None:
            if not create:
                raise nats.js.errors.BucketNotFoundError()
            kv = self._buckets[name] = MemoryKeyValue(name, config.ttl or 0.0, config.history)
        return kv


_Delivery = tuple[int, bytes, bytes, bytes, bytes]  # sid, subject, reply, data, headers


class LocalClient(Client):
    """actorbus's NATS client with the socket swapped for a :class:`LocalBus`."""

    def __init__(self, bus: LocalBus, number: int) -> None:
        super().__init__()
        self.bus = bus
        self.number = number
        self._max_payload = bus.max_payload
        self._skip_subject_validation = True
        # what the bus sent this client and the reader has not read yet (a
        # socket's receive buffer), and flush() markers behind it (PONGs)
        self._inbound: asyncio.Queue[_Delivery | asyncio.Future[None]] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    def open(self, options: ConnectOptions, error_cb: Any) -> None:
        """Connected, as far as everything above the wire can tell."""
        self.options["name"] = options.name
        self.options["drain_timeout"] = options.drain_timeout
        self._inbox_prefix = bytearray(options.inbox_prefix.encode())
        self._error_cb = error_cb
        self._status = _NatsClient.CONNECTED
        what = f"in-process bus reader of {options.name}"
        self._reader = supervise(what, self._read, logger=log)

    def deliver(self, sid: int, subject: str, reply: str, data: bytes, headers: bytes) -> None:
        """A message for one of this client's subscriptions, to be read."""
        if not self.is_closed:
            self._inbound.put_nowait((sid, subject.encode(), reply.encode(), data, headers))

    async def _read(self) -> None:
        """The read loop: from here on a message's path is nats-py's own, in
        reads of at most ``_READ_SIZE`` bytes with a yield between them."""
        while True:
            read = 0
            item = await self._inbound.get()
            while True:
                if isinstance(item, asyncio.Future):
                    if not item.done():
                        item.set_result(None)
                else:
                    read += len(item[3]) + len(item[4]) + 64
                    try:
                        if not self.deliver_now(*item):
                            await self._process_msg(*item)
                    except Exception as exc:  # as a socket's reader: never stops
                        log.error("in-process bus: a message could not be read: %r", exc)
                if read >= _READ_SIZE or self._inbound.empty():
                    break
                item = self._inbound.get_nowait()
            await asyncio.sleep(0)

    # -- the wire ------------------------------------------------------------
    def publish_now(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        headers: EncodedHeaders | None = None,
        at_once: bool = False,
    ) -> bool:
        """Routed at once, as ``publish`` does here (no buffer, no flusher), so
        ``at_once`` changes nothing."""
        if not self.is_connected or not subject or len(payload) > self._max_payload:
            return False
        self._route(subject, reply, payload, len(payload), headers)
        return True

    async def _send_publish(
        self, subject: str, reply: str, payload: bytes, payload_size: int, headers: Any
    ) -> None:
        if not subject:
            raise nats.errors.BadSubjectError
        self._route(subject, reply, payload, payload_size, headers)

    def _route(
        self, subject: str, reply: str, payload: bytes, payload_size: int, headers: Any
    ) -> None:
        if headers is None:
            block = b""
        elif isinstance(headers, EncodedHeaders):
            block = bytes(headers)
        else:
            block = bytes(encode_headers(dict(headers)))
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        delivered = self.bus.route(subject, reply, payload, block)
        if not delivered and reply:  # as a server does for a client that asks for it
            self.bus.route(reply, "", b"", _NO_RESPONDERS)

    async def _send_subscribe(self, sub: Subscription) -> None:
        self.bus.subscribe(self, sub)

    async def _send_unsubscribe(self, sid: int, limit: int = 0) -> None:
        if limit == 0:
            self.bus.unsubscribe(self, sid)

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        super()._remove_sub(sid, max_msgs)
        self.bus.unsubscribe(self, sid)

    async def flush(self, timeout: int = 10) -> None:
        """Everything published is routed as it is sent; what the bus sent this
        client before now has been read once this returns (a PING's PONG)."""
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        read: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inbound.put_nowait(read)
        try:
            await asyncio.wait_for(read, timeout)
        except TimeoutError:
            raise nats.errors.FlushTimeoutError from None

    async def _close(self, status: int, do_cbs: bool = True) -> None:
        if self.is_closed:
            return
        self._status = _NatsClient.CLOSED
        self.bus.forget(self)
        await stop_task(self._reader, what="in-process bus reader")
        for sub in list(self._subs.values()):
            sub._stop_processing()
        self._subs.clear()

    def jetstream(self, **opts: Any) -> JetStreamContext:
        return LocalJetStream(self, **opts)


class LocalJetStream(JetStreamContext):
    """JetStream on the in-process bus: key-value buckets in memory; every other
    call is a request nobody answers, as on a server without JetStream."""

    def __init__(self, client: LocalClient, **opts: Any) -> None:
        super().__init__(client, **opts)
        self._bus = client.bus

    async def create_key_value(
        self, config: KeyValueConfig | None = None, **params: Any
    ) -> KeyValue:
        config = config or KeyValueConfig(**params)
        return self._bus.bucket(config, create=True)

    async def key_value(self, bucket: str) -> KeyValue:
        return self._bus.bucket(KeyValueConfig(bucket=bucket), create=False)


class LocalConnection(BusConnection):
    """A :class:`BusConnection` whose client is on a :class:`LocalBus`: the same
    publishing, error mapping and bounded drain, with no server to lose."""

    def __init__(self, bus: LocalBus, options: ConnectOptions) -> None:
        super().__init__(options)
        self.bus = bus
        self.nc: LocalClient = bus.client()

    @classmethod
    async def open(cls, bus: LocalBus, options: ConnectOptions) -> LocalConnection:
        conn = cls(bus, options)
        conn.nc.open(options, conn._on_error)
        conn.watch_loop()
        return conn
