"""The transport seam: what the actor runtime needs from a bus, and nothing more.

``actors/`` is written against these two protocols, not against a NATS
connection. Two transports implement them:

- :class:`~actorbus.bus.connection.BusConnection`: NATS (an embedded server,
  a cluster, a secured broker), for everything that runs for real;
- :class:`~actorbus.bus.local.LocalConnection`: a :class:`~actorbus.bus.local.LocalBus`
  in this process, for fast tests of actor behaviour (``ActorSystem.in_process()``).

Messages travel as nats-py ``Msg`` values on both: a plain record of subject,
reply, headers and data whose ``respond()`` publishes through the client that
received it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import SlowConsumerError
from nats.js import JetStreamContext

from actorbus.bus.client import Client, EncodedHeaders
from actorbus.bus.connection import ConnectOptions
from actorbus.codecs.errors import ConnectionLostError

MessageCallback = Callable[[Msg], Awaitable[None]]


class Messaging(Protocol):
    """Publish, subscribe and the stores: the client side of a transport."""

    @property
    def max_payload(self) -> int:
        """The largest message body the bus takes."""
        ...

    @property
    def is_connected(self) -> bool: ...

    async def publish(
        self, subject: str, payload: bytes = b"", reply: str = "", headers: Any = None
    ) -> None:
        """Send one message (``headers``: a dict or an encoded block)."""
        ...

    def publish_now(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        headers: EncodedHeaders | None = None,
        at_once: bool = False,
    ) -> bool:
        """Send one message at once, with no coroutine, if nothing needs waiting
        for; False (nothing done): ``publish`` must take it. ``at_once``: written
        now rather than with the loop pass's other messages (latency over
        batching, for a message that comes alone)."""
        ...

    async def subscribe(
        self,
        subject: str,
        queue: str = "",
        cb: MessageCallback | None = None,
        future: Any = None,
        max_msgs: int = 0,
        pending_msgs_limit: int = ...,
        pending_bytes_limit: int = ...,
    ) -> Subscription:
        """Receive ``subject`` (wildcards allowed) in ``cb``, one message at a time;
        members of one ``queue`` share the messages. Past a pending limit, new
        messages are dropped and reported as a slow consumer."""
        ...

    async def flush(self, timeout: int = ...) -> None:
        """Return once the bus has everything published so far."""
        ...

    def new_inbox(self) -> str: ...

    def jetstream(self, **opts: Any) -> JetStreamContext:
        """Streams and key-value buckets: what is stored and consumed."""
        ...


class Transport(Protocol):
    """A connection to a bus, with the lifecycle the runtime follows."""

    options: ConnectOptions
    on_reconnect: list[Callable[[], Awaitable[None]]]
    on_lost: list[Callable[[ConnectionLostError], None]]
    on_slow_consumer: list[Callable[[SlowConsumerError], Awaitable[None]]]

    @property
    def nc(self) -> Client:
        """The client, whole: the runtime keeps only its :class:`Messaging` side;
        users reach the rest through ``ActorSystem.nc``."""
        ...

    @property
    def lost_error(self) -> ConnectionLostError | None:
        """Set once the connection is gone for good."""
        ...

    @property
    def connected(self) -> bool: ...

    def translate(self, exc: BaseException) -> BaseException:
        """A transport failure as the typed error callers see."""
        ...

    def publish_now(
        self,
        subject: str,
        body: bytes,
        headers: EncodedHeaders | None = None,
        reply: str = "",
        at_once: bool = False,
    ) -> bool:
        """Publish at once if nothing needs waiting for; False (nothing done):
        ``publish`` must take it. ``at_once``: written now, not with the loop
        pass's other messages (``Messaging.publish_now``)."""
        ...

    async def publish(
        self, subject: str, body: bytes, headers: Any = None, reply: str = ""
    ) -> None:
        """Publish, with transport failures raised as ConnectionLostError."""
        ...

    async def close(self, timeout: float | None = None) -> None:
        """Drain and close, bounded by ``timeout``."""
        ...
