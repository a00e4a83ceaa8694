"""The NATS connection an ActorSystem runs on, with the failure behaviour users expect.

nats-py reconnects on its own but with a fixed wait and no overall deadline.
Here: exponential backoff with jitter between attempts, publishes buffered
while disconnected (``buffer_bytes``), and once ``reconnect_deadline`` passes
without a server the connection is closed and every later call raises
:class:`ConnectionLostError` saying when and where the link was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.client import RawCredentials, Server
from nats.errors import SlowConsumerError

from actorbus._nats_import import enable_websockets
from actorbus.bus.client import Client, EncodedHeaders
from actorbus.bus.loopwatch import LoopWatch
from actorbus.bus.tasks import backoff_delay
from actorbus.codecs.errors import ConnectionLostError

log = logging.getLogger("actorbus.bus")


class _SslEofNoise(logging.Filter):
    """asyncio logs a warning each time a TLS connection nats-py made is closed by
    its peer ("returning true from eof_received() has no effect when using ssl"):
    harmless, and on every secured connection. Only that line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_SslEofNoise())


@dataclass
class ConnectOptions:
    """How to reach NATS and how hard to try when the link drops."""

    servers: list[str] = field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    name: str = "actorbus"
    connect_timeout: float = 5.0
    reconnect_deadline: float = 60.0  # give up (and fail calls) after this long without a server
    connect_attempts: int = 3  # tries per server for the first connect
    backoff_initial: float = 0.05
    backoff_max: float = 2.0
    buffer_bytes: int = 8 * 1024 * 1024  # publishes kept while reconnecting
    drain_timeout: float = 10.0
    user: str | None = None
    password: str | None = None
    token: str | None = None
    credentials_file: str | None = None
    credentials: str | None = None  # the text of a creds file (JWT and seed), kept in memory
    tls: Any = None  # ssl.SSLContext
    inbox_prefix: str = "_INBOX"

    def nats_credentials(self) -> str | RawCredentials | None:
        """The credentials as ``nats.connect(user_credentials=...)`` takes them."""
        if self.credentials is not None:
            return RawCredentials(self.credentials)
        return self.credentials_file


class BusConnection:
    """A nats-py client plus the reconnect deadline and error mapping."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.nc = Client()
        self._lost_since: float | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._lost_error: ConnectionLostError | None = None
        self.on_disconnect: list[Callable[[], Awaitable[None]]] = []
        self.on_reconnect: list[Callable[[], Awaitable[None]]] = []
        self.on_lost: list[Callable[[ConnectionLostError], None]] = []
        # A subscription's pending limit was reached and nats-py dropped a message.
        self.on_slow_consumer: list[Callable[[SlowConsumerError], Awaitable[None]]] = []
        self.loop_watch: LoopWatch | None = None  # the event loop's, once connected
        self._refused: asyncio.Future[Exception] | None = None  # while first connecting

    @classmethod
    async def connect(cls, options: ConnectOptions) -> BusConnection:
        conn = cls(options)
        await conn._connect()
        return conn

    async def _connect(self) -> None:
        o = self.options
        enable_websockets(o.servers)
        # nats-py annotates this as int but sleeps on any number.
        kwargs: dict[str, Any] = {"reconnect_time_wait": o.backoff_initial}
        credentials = o.nats_credentials()
        if credentials:
            kwargs["user_credentials"] = credentials
        # nats-py reports a refused TLS handshake or an authorization violation
        # to error_cb and then keeps its first connect() waiting for good; an
        # error that no retry can cure ends the first connect at once instead.
        self._refused = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(o.connect_timeout * o.connect_attempts * len(o.servers) + 5):
                await self._first_connect(kwargs)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await self.nc.close()
            if not isinstance(exc, Exception):
                raise
            cause = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            cause = cause or type(exc).__name__
            lost = ConnectionLostError(
                f"cannot connect to NATS at {', '.join(o.servers)}: {cause}{_advice(exc)}"
            )
            lost.refused = _refusal(exc)
            raise lost from exc
        self._refused = None
        self.nc.options["max_reconnect_attempts"] = -1
        self.watch_loop()

    def watch_loop(self) -> None:
        """Start telling when the event loop was blocked (a slow consumer's cause)."""
        self.loop_watch = LoopWatch.join(self._received)

    def _received(self) -> int:
        return int(self.nc.stats["in_msgs"])

    async def _first_connect(self, kwargs: dict[str, Any]) -> None:
        o = self.options
        refused = self._refused
        assert refused is not None
        connecting = asyncio.ensure_future(
            self.nc.connect(
                servers=o.servers,
                name=o.name,
                connect_timeout=max(1, round(o.connect_timeout)),
                allow_reconnect=True,
                # nats-py applies the reconnect limit to the first connect too:
                # keep it small there so an unreachable URL fails fast, then lift
                # it (below); the reconnect deadline bounds retries after that.
                max_reconnect_attempts=o.connect_attempts,
                reconnect_to_server_handler=self._pick_server,
                pending_size=o.buffer_bytes,
                drain_timeout=max(1, round(o.drain_timeout)),
                user=o.user,
                password=o.password,
                token=o.token,
                tls=o.tls,
                inbox_prefix=o.inbox_prefix,
                # Subjects are built from validated addresses and topics
                # (actorbus.bus.subjects), so nats-py need not re-check each publish.
                skip_subject_validation=True,
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
                **kwargs,
            )
        )
        try:
            waiting: set[asyncio.Future[Any]] = {connecting, refused}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not connecting.done():
                connecting.cancel()
                with contextlib.suppress(BaseException):
                    await connecting
        if refused.done():
            raise refused.result()
        connecting.result()

    def _pick_server(
        self, servers: list[Server], info: dict[str, Any]
    ) -> tuple[Server | None, float]:
        server = min(servers, key=lambda s: s.reconnects)
        delay = backoff_delay(
            server.reconnects, self.options.backoff_initial, self.options.backoff_max
        )
        return server, delay

    async def _on_error(self, exc: Exception) -> None:
        refused = self._refused
        if (
            refused is not None
            and not refused.done()
            and not self.nc.is_connected
            and (_incurable(exc))
        ):
            refused.set_result(exc)  # the first connect: no retry will do better
            return
        if isinstance(exc, SlowConsumerError):  # one subscription full: its owner's business
            for cb in self.on_slow_consumer:
                await cb(exc)
            if not self.on_slow_consumer:
                log.warning("%s", exc)
            return
        if self._lost_since is None and self.nc.is_connected:
            log.warning("%s", exc or type(exc).__name__)
        else:
            log.debug("while reconnecting: %s", exc or type(exc).__name__)

    async def _on_disconnected(self) -> None:
        if self.nc.is_closed or self._lost_since is not None:
            return
        self._lost_since = time.monotonic()
        blocked = self.loop_watch.blocked_for() if self.loop_watch is not None else 0.0
        if blocked:
            log.error(
                "lost connection to NATS right after the event loop was blocked for %.2fs: "
                "most likely cut off as a slow consumer. Core NATS messages sent to this "
                "process meanwhile (tells, asks) are lost; durable ones wait in JetStream. "
                "Move blocking work off the loop (asyncio.to_thread).",
                blocked,
            )
        log.warning(
            "lost connection to NATS; reconnecting for up to %gs", self.options.reconnect_deadline
        )
        self._watchdog = asyncio.create_task(self._give_up_after_deadline())
        for cb in self.on_disconnect:
            await cb()

    async def _on_reconnected(self) -> None:
        if self._lost_since is not None:
            log.info("reconnected to NATS after %.2fs", time.monotonic() - self._lost_since)
        self._lost_since = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for cb in self.on_reconnect:
            await cb()

    async def _give_up_after_deadline(self) -> None:
        await asyncio.sleep(self.options.reconnect_deadline)
        if self.nc.is_connected:
            return
        self._lost_error = ConnectionLostError(
            f"connection to NATS ({', '.join(self.options.servers)}) lost and not back "
            f"within {self.options.reconnect_deadline:g}s"
        )
        log.error("%s", self._lost_error)
        for cb in self.on_lost:
            cb(self._lost_error)
        with contextlib.suppress(Exception):
            await self.nc.close()

    @property
    def lost_error(self) -> ConnectionLostError | None:
        """Set once the reconnect deadline passed: the connection is closed for good."""
        return self._lost_error

    @property
    def connected(self) -> bool:
        return self.nc.is_connected

    def translate(self, exc: BaseException) -> BaseException:
        """Map nats-py connection errors onto ConnectionLostError."""
        if isinstance(
            exc,
            nats.errors.ConnectionClosedError
            | nats.errors.ConnectionDrainingError
            | nats.errors.OutboundBufferLimitError
            | nats.errors.StaleConnectionError,
        ):
            if self._lost_error is not None:
                return self._lost_error
            if isinstance(exc, nats.errors.OutboundBufferLimitError):
                return ConnectionLostError(
                    f"NATS is unreachable and the {self.options.buffer_bytes}-byte "
                    "reconnect buffer is full"
                )
            return ConnectionLostError(f"NATS connection is closed ({type(exc).__name__})")
        return exc

    def publish_now(
        self,
        subject: str,
        body: bytes,
        headers: EncodedHeaders | None = None,
        reply: str = "",
        at_once: bool = False,
    ) -> bool:
        """Queue a publish at once, with no coroutine, when nothing needs waiting
        for (``Client.publish_now``); False, with nothing done, when ``publish``
        must take it (not connected, the buffer full ...): the hot path of every
        reply and stream frame."""
        return self.nc.publish_now(subject, body, reply, headers, at_once)

    async def publish(
        self, subject: str, body: bytes, headers: Any = None, reply: str = ""
    ) -> None:
        """Publish, with connection failures raised as ConnectionLostError.

        ``headers``: a dict, or an EncodedHeaders block from actorbus.bus.client.
        """
        try:
            await self.nc.publish(subject, body, reply=reply, headers=headers)
        except nats.errors.Error as exc:
            raise self.translate(exc) from exc

    async def close(self, timeout: float | None = None) -> None:
        """Drain: flush publishes, let subscriptions finish what they hold, then close.

        ``timeout`` (default: the drain timeout) bounds the drain, also when the
        server died a moment ago and the client has not noticed yet."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.loop_watch is not None:
            await self.loop_watch.leave(self._received)
        if self.nc.is_closed:
            return
        bound = self.options.drain_timeout if timeout is None else timeout
        deadline = time.monotonic() + bound
        try:
            async with asyncio.timeout(bound):
                if self.nc.is_connected:
                    await self.nc.drain()
                else:
                    await self.nc.close()
        except Exception as exc:  # drain can time out; closing is what matters now
            log.debug("drain: %s", exc)
            # A reconnect attempt in progress can hold close() up: bounded too.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(max(0.5, deadline - time.monotonic())):
                    await self.nc.close()


def _incurable(exc: Exception) -> bool:
    """A refusal that retrying the same server with the same options repeats."""
    return isinstance(exc, ssl.SSLError) or "authorization violation" in str(exc).lower()


def _refusal(exc: BaseException) -> str | None:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "untrusted-certificate"
    if isinstance(exc, ssl.SSLError):
        return "tls"
    if "authorization violation" in str(exc).lower():
        return "unauthorized"
    return None


def _advice(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            " (the server's certificate is not trusted: give ConnectOptions(tls=...) an "
            "SSL context with its CA)"
        )
    if isinstance(exc, ssl.SSLError):
        return " (TLS was refused: does the URL's scheme match the server, tls:// or nats://?)"
    if "authorization violation" in str(exc).lower():
        return (
            " (the server takes only authenticated members: give ConnectOptions "
            "credentials it trusts, e.g. credentials_file=...)"
        )
    return ""
