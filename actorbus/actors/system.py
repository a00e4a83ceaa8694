"""ActorSystem: one process's actor runtime on one NATS connection.

It hosts actors (spawned eagerly, or registered for lazy activation on first
message), routes inbound messages to their cells, and is the client side of
``ask``/``tell``/``publish``/``stream``. See ``actorbus.bus.subjects`` for the
subject scheme and ARCHITECTURE.md for the delivery semantics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Iterable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypedDict, TypeVar, Unpack, cast, overload

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue
from opentelemetry.trace import Span

from actorbus.actors.actor import Actor, ActorContext, current_incoming
from actorbus.actors.dead_letters import (
    DeadLetter,
    QueueStats,
    drop_dead_letter,
    get_dead_letter,
    list_dead_letters,
    queue_stats,
    replay_dead_letter,
)
from actorbus.actors.delivery import DeliveryDefaults, DeliveryPolicy
from actorbus.actors.directory import Directory, Listing
from actorbus.actors.history import read_history
from actorbus.actors.hosting import Hosting
from actorbus.actors.messages import INTENT_ERROR, from_content
from actorbus.actors.outbox import store
from actorbus.actors.pipeline import (
    Outgoing,
    decode_answer,
    decode_request,
    encode_request,
)
from actorbus.actors.runtime import Runtime, StreamSettings
from actorbus.actors.streaming import StreamProducers, consume_stream
from actorbus.bus.connection import BusConnection, ConnectOptions
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.requests import NoResponders, RequestTimeout
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.bus.subjects import Address, validate_topic
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    InvalidAddressError,
    NoRespondersError,
    error_from_wire,
)
from actorbus.codecs.wire import (
    DEFAULT_LIMITS,
    Encoding,
    SizeLimits,
)
from actorbus.telemetry import STATE, configure, flush, spans
from actorbus.telemetry import metrics as meters

log = logging.getLogger("actorbus.system")

A = TypeVar("A", bound=Actor)
R = TypeVar("R")
T = TypeVar("T")


class ActorRef:
    """A handle on an address; cheap to create, safe to pass around."""

    __slots__ = ("address", "system")

    def __init__(self, system: ActorSystem, address: str) -> None:
        self.system = system
        self.address = address

    async def ask(self, message: Any, **kwargs: Any) -> Any:
        return await self.system.ask(self.address, message, **kwargs)

    async def tell(self, message: Any, **kwargs: Any) -> None:
        await self.system.tell(self.address, message, **kwargs)

    def stream(self, message: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return self.system.stream(self.address, message, **kwargs)

    def __repr__(self) -> str:
        return f"ActorRef({self.address!r})"


class SystemOptions(TypedDict, total=False):
    """What ``ActorSystem.start()`` and ``ActorSystem.connect()`` take besides the
    URL (see the README's Configuration table for the defaults)."""

    namespace: str
    encoding: Encoding
    limits: SizeLimits
    default_timeout: float
    debug: bool
    stream_window: int
    stream_credit_timeout: float
    stream_start_timeout: float
    durable: DurableSettings | None
    activation_ttl: float
    registry: bool
    name: str
    connect_options: ConnectOptions | None
    tracing: bool | None


_CONNECTION_OPTIONS = frozenset({"tracing", "name", "connect_options"})


class ActorSystem:
    """The runtime. Create with ``ActorSystem.start()`` (embedded nats-server) or
    ``ActorSystem.connect(url)``; both work with ``async with`` or ``await``."""

    def __init__(
        self,
        conn: BusConnection,
        *,
        namespace: str = "ab",
        encoding: Encoding = Encoding.MSGPACK,
        limits: SizeLimits = DEFAULT_LIMITS,
        default_timeout: float = 5.0,
        debug: bool = False,
        stream_window: int = 64,
        stream_credit_timeout: float = 300.0,
        stream_start_timeout: float = 2.0,
        durable: DurableSettings | None = None,
        activation_ttl: float = 5.0,
        registry: bool = True,
        server: EmbeddedServer | None = None,
    ) -> None:
        rt = Runtime(
            conn,
            namespace=namespace,
            encoding=encoding,
            limits=limits,
            default_timeout=default_timeout,
            debug=debug,
            streams=StreamSettings(stream_window, stream_credit_timeout, stream_start_timeout),
            durable=durable,
        )
        self.runtime = rt
        # The facade's view of the kernel (the same objects, read by services and tests).
        self.conn, self.nc, self.js, self.mux = rt.conn, rt.nc, rt.js, rt.mux
        self.subjects, self.namespace, self.system_id = rt.subjects, rt.namespace, rt.system_id
        self.encoding, self.limits, self.debug = rt.encoding, rt.limits, rt.debug
        self.default_timeout, self.durable_settings = rt.default_timeout, rt.durable_settings
        self.client_address, self.replies, self.mailboxes = (
            rt.client_address,
            rt.replies,
            rt.mailboxes,
        )
        self.stream_window = rt.stream_settings.window
        self.stream_credit_timeout = rt.stream_settings.credit_timeout
        self.stream_start_timeout = rt.stream_settings.start_timeout
        self.delivery = DeliveryDefaults()
        self.server = server
        self.directory = Directory(rt, registry)
        self.streams = StreamProducers(rt)
        # Actors talk to the world through this facade (ActorContext is its part they use).
        context = cast(ActorContext, self)
        self.hosting = Hosting(rt, context, self.streams, activation_ttl, self._hosted)
        self.placement = self.hosting.placement
        self.virtual = self.hosting.virtual
        self._subject_cache: dict[str, str] = {}
        self._system_subs: list[Subscription] = []
        self._closing = False
        self._closed = asyncio.Event()

    # -- construction ------------------------------------------------------
    @classmethod
    def start(
        cls,
        *,
        store_dir: str | Path | None = None,
        server_config: ServerConfig | None = None,
        **options: Unpack[SystemOptions],
    ) -> _Opening:
        """Start an embedded nats-server (JetStream on) and a system on it."""

        async def open_() -> ActorSystem:
            config = server_config or ServerConfig(store_dir=Path(store_dir) if store_dir else None)
            server = EmbeddedServer(config)
            await server.start()
            try:
                return await cls._open([server.url], server, options)
            except BaseException:
                await server.stop()
                raise

        return _Opening(open_())

    @classmethod
    def connect(
        cls,
        servers: str | list[str] = "nats://127.0.0.1:4222",
        **options: Unpack[SystemOptions],
    ) -> _Opening:
        """Connect to an existing NATS server or cluster."""
        urls = [servers] if isinstance(servers, str) else list(servers)
        return _Opening(cls._open(urls, None, options))

    @classmethod
    async def _open(
        cls, urls: list[str], server: EmbeddedServer | None, options: SystemOptions
    ) -> ActorSystem:
        unknown = set(options) - set(SystemOptions.__annotations__)
        if unknown:  # what mypy catches for typed callers, said at run time for the rest
            raise TypeError(f"unknown ActorSystem option(s): {', '.join(sorted(unknown))}")
        configure(options.get("tracing"))  # once per process: OTEL_*, or tracing=True
        name = options.get("name", "actorbus")
        connect_options = options.get("connect_options") or ConnectOptions(name=name)
        conn = await BusConnection.connect(dataclasses.replace(connect_options, servers=urls))
        runtime = {k: v for k, v in options.items() if k not in _CONNECTION_OPTIONS}
        # The rest are exactly __init__'s keywords (SystemOptions lists them, typed).
        system = cls(conn, server=server, **runtime)  # type: ignore[arg-type]
        await system._subscribe_system()
        if system.durable_settings.keep_topics:
            await system.durable_ready()  # topics are stored from the first publish on
        return system

    async def _subscribe_system(self) -> None:
        await self.mux.start()
        sub = await self.nc.subscribe(self.streams.control_subject, cb=self.streams.on_control)
        self._system_subs.append(sub)
        sub = await self.nc.subscribe(
            self.subjects.host_all(self.system_id), cb=self.virtual.on_forwarded
        )
        self._system_subs.append(sub)

    @property
    def url(self) -> str:
        return self.conn.options.servers[0]

    # -- hosting actors ----------------------------------------------------
    async def spawn(
        self,
        cls: type[A],
        key: str | None = None,
        *,
        replicas: int = 1,
        **kwargs: Any,
    ) -> ActorRef:
        """Start ``replicas`` instances of ``cls`` at ``type/key`` (key: generated if None).

        Replicas of one address share its messages through a NATS queue group, in
        this process or across processes.
        """
        self._check_open()
        address = await self.hosting.spawn(cls, key, replicas=replicas, **kwargs)
        return ActorRef(self, address)

    async def register(self, cls: type[Actor], **kwargs: Any) -> None:
        """Host ``cls`` lazily: an instance is created on the first message to
        ``type/<any key>`` (and to the anycast address ``type``) that reaches this process."""
        self._check_open()
        await self.hosting.register(cls, **kwargs)

    async def stop_actor(self, address: str, timeout: float = 10.0) -> None:
        """Stop every local replica of ``address`` (they finish what they are doing);
        a keyed actor's activation lease is given back."""
        await self.hosting.stop_actor(address, timeout)

    def local_actors(self) -> dict[str, int]:
        """Addresses hosted here and their replica counts."""
        return self.hosting.local_actors()

    def _hosted(self, cls: type[Actor]) -> None:
        """A type is hosted here now: senders here know its delivery defaults, and the
        registry hears of it."""
        self.learn(cls)
        self.directory.announce(cls)

    async def durable_ready(self) -> None:
        """Create the durable streams once (idempotent on the server too)."""
        await self.runtime.durable_ready()

    @property
    def handled(self) -> KeyValue | None:
        return self.runtime.handled

    @property
    def stats(self) -> KeyValue | None:
        return self.runtime.stats

    # -- events ------------------------------------------------------------
    async def emit_event(self, event: str, data: dict[str, Any]) -> None:
        """Publish a system event on ``{ns}.sys.{event}`` (best effort)."""
        await self.runtime.emit_event(event, data)

    # -- outbound ----------------------------------------------------------
    def _subject(self, address: str) -> str:
        subject = self._subject_cache.get(address)
        if subject is None:
            subject = self.subjects.direct(Address.parse(address))
            if len(self._subject_cache) < 10_000:
                self._subject_cache[address] = subject
        return subject

    def _encode(
        self,
        dst: str,
        message: Any,
        intent: str | None,
        session_id: str | None,
        idempotency_key: str | None,
        ttl_ms: int | None,
        stream: bool = False,
        durable: bool = False,
        span: Span | None = None,
    ) -> Outgoing:
        out = encode_request(
            dst,
            message,
            client_address=self.client_address,
            encoding=self.encoding,
            limits=self.limits,
            intent=intent,
            session_id=session_id,
            idempotency_key=idempotency_key,
            ttl_ms=ttl_ms,
            stream=stream,
            durable=durable,
            trace=spans.traceparent(span) if span is not None else None,
        )
        if STATE.metrics:
            src = current_incoming.get()
            meters.message_size.record(
                len(out.body), meters.labels(src.address if src else "client", dst)
            )
        if span is not None:
            inc = current_incoming.get()
            spans.sent(
                span,
                message_id=out.id,
                intent=out.intent,
                body=out.body,
                source=inc.address if inc is not None else self.client_address,
                session_id=session_id or (inc.message.context.session_id if inc else None),
                durable=durable,
                content=message,
            )
        return out

    async def _traced(
        self,
        operation: str,
        destination: str,
        subject: str,
        expects_reply: bool,
        send: Callable[[Span], Awaitable[T]],
    ) -> T:
        """Run a send inside its span (tracing is on): errors recorded, always ended."""
        span = spans.start_send(operation, destination, subject, expects_reply=expects_reply)
        try:
            return await send(span)
        except BaseException as exc:
            spans.failed(span, exc)
            raise
        finally:
            span.end()

    @overload
    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        timeout: float | None = None,
        returns: type[R],
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
    ) -> R: ...
    @overload
    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        timeout: float | None = None,
        returns: None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
    ) -> Any: ...
    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        timeout: float | None = None,
        returns: type[R] | None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
    ) -> Any:
        """Send and wait for the reply (typed as ``returns`` when given).

        ``skill=`` instead of an address asks a healthy actor type offering that
        skill (from the registry). Raises AskTimeoutError (naming the address and
        intent), NoRespondersError, or the typed error the actor replied with."""
        self._check_open()
        if skill is not None or address is None:
            address = await self._skill_address(address, skill)
        timeout = self.default_timeout if timeout is None else timeout
        subject = self._subject(address)
        if STATE.tracing:
            dst = address

            async def traced(span: Span) -> Any:
                out = self._encode(
                    dst, message, intent, session_id, idempotency_key, ttl_ms, span=span
                )
                if STATE.metrics:
                    return await self._ask_measured(dst, subject, out, timeout, returns)
                return await self._ask(dst, subject, out, timeout, returns)

            return await self._traced("ask", address, subject, True, traced)
        out = self._encode(address, message, intent, session_id, idempotency_key, ttl_ms)
        if STATE.metrics:
            return await self._ask_measured(address, subject, out, timeout, returns)
        return await self._ask(address, subject, out, timeout, returns)

    async def _ask_measured(
        self, address: str, subject: str, out: Outgoing, timeout: float, returns: type[R] | None
    ) -> Any:
        inc = current_incoming.get()
        labels = meters.labels(inc.address if inc else "client", address)
        started = time.perf_counter()
        try:
            return await self._ask(address, subject, out, timeout, returns)
        except ActorBusError as err:
            meters.failures.add(
                1, {**labels, "error.type": err.code, "messaging.operation.type": "send"}
            )
            raise
        finally:
            meters.request_duration.record(time.perf_counter() - started, labels)

    async def _ask(
        self, address: str, subject: str, out: Outgoing, timeout: float, returns: type[R] | None
    ) -> Any:
        try:
            msg = await self.mux.request(subject, out.body, out.headers, timeout)
        except RequestTimeout:
            raise AskTimeoutError(address, out.intent, timeout) from None
        except NoResponders:
            raise NoRespondersError(address, out.intent) from None
        except nats.errors.Error as exc:
            raise self.conn.translate(exc) from exc
        reply_intent, content = decode_answer(msg, address)
        if reply_intent == INTENT_ERROR:
            raise error_from_wire(content, address)
        return from_content(reply_intent, content, returns)

    async def tell(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
        durable: bool | None = None,
        timeout: float | None = None,
    ) -> None:
        """Fire and forget: at most once over core NATS; with ``durable=True``, stored
        in JetStream before this returns and delivered at least once, also to an
        actor that is not running yet. ``None`` follows the target type's defaults
        when this system knows them (``Actor.durable``, ``learn()``). ``skill=``
        picks an address from the registry, as for ``ask``."""
        self._check_open()
        if skill is not None or address is None:
            address = await self._skill_address(address, skill)
        if durable is None:
            durable = self.delivery.durable_for(address, message, intent)
        if durable:
            await self._send_durable(
                address, message, intent, session_id, idempotency_key, ttl_ms, timeout
            )
            return
        subject = self._subject(address)
        if STATE.tracing:
            dst = address

            async def traced(span: Span) -> None:
                out = self._encode(
                    dst, message, intent, session_id, idempotency_key, ttl_ms, span=span
                )
                await self.conn.publish(subject, out.body, out.headers)

            await self._traced("tell", address, subject, False, traced)
            return
        out = self._encode(address, message, intent, session_id, idempotency_key, ttl_ms)
        await self.conn.publish(subject, out.body, out.headers)

    async def _send_durable(
        self,
        address: str,
        message: Any,
        intent: str | None,
        session_id: str | None,
        idempotency_key: str | None,
        ttl_ms: int | None,
        timeout: float | None,
    ) -> None:
        addr = Address.parse(address)
        if addr.key is None:
            raise InvalidAddressError(f"durable sends need a 'type/key' address, not {address!r}")
        await self.durable_ready()
        subject = self.subjects.durable(addr)
        wait = self.durable_settings.store_timeout if timeout is None else timeout

        async def send(span: Span | None) -> None:
            out = self._encode(
                address, message, intent, session_id, idempotency_key, ttl_ms, True, True, span
            )
            await self.store(subject, out, address, wait)

        if STATE.tracing:
            await self._traced("tell", address, subject, False, send)
        else:
            await send(None)

    async def store(self, subject: str, out: Outgoing, what: str, timeout: float) -> None:
        """Publish into JetStream and wait for the publish-ack (see ``outbox.store``)."""
        await store(self.runtime, subject, out, what, timeout)

    async def publish(
        self,
        topic: str,
        message: Any,
        *,
        intent: str | None = None,
        session_id: str | None = None,
    ) -> None:
        """Publish to a pub/sub topic; every subscribed actor address gets it once.

        When topics are kept (``DurableSettings(keep_topics=True)``), this returns
        once JetStream stored the message, so history has it."""
        self._check_open()
        subject = self.subjects.topic(topic)
        keep = self.durable_settings.keep_topics
        destination = f"topic:{topic}"

        async def send(span: Span | None) -> None:
            out = self._encode(
                destination, message, intent, session_id, None, None, False, keep, span
            )
            if keep:
                timeout = self.durable_settings.store_timeout
                await self.store(subject, out, f"topic {topic!r}", timeout)
            else:
                await self.conn.publish(subject, out.body, out.headers)

        if STATE.tracing:
            await self._traced("publish", destination, subject, False, send)
        else:
            await send(None)

    def stream(
        self,
        address: str,
        message: Any,
        *,
        timeout: float | None = None,
        returns: type[Any] | None = None,
        intent: str | None = None,
        session_id: str | None = None,
    ) -> AsyncIterator[Any]:
        """Call a streaming handler and iterate its items in order.

        ``timeout`` bounds the wait for each item. Leaving the loop early (break,
        exception, or ``aclose()``) cancels the producer.
        """
        self._check_open()
        subject = self._subject(address)
        span = None
        if STATE.tracing:  # the span of the request; items are children of the producer's
            span = spans.start_send("stream", address, subject, expects_reply=True)
        try:
            out = self._encode(address, message, intent, session_id, None, None, True, False, span)
        finally:
            if span is not None:
                span.end()
        timeout = self.default_timeout if timeout is None else timeout
        return consume_stream(self.runtime, address, subject, out, timeout, returns)

    # -- durable queues ----------------------------------------------------
    async def dead_letters(self, address: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """Dead letters of one address (or all), oldest first."""
        return await list_dead_letters(self.runtime, address, limit)

    async def get_dead_letter(self, seq: int) -> DeadLetter:
        return await get_dead_letter(self.runtime, seq)

    async def replay_dead_letter(self, seq: int) -> None:
        """Send a dead letter's original message to its actor again and drop it."""
        await replay_dead_letter(self.runtime, seq)

    async def drop_dead_letter(self, seq: int) -> None:
        await drop_dead_letter(self.runtime, seq)

    def history(
        self,
        *,
        address: str | None = None,
        session_id: str | None = None,
        topic: str | None = None,
        since_seq: int | None = None,
        since: datetime | None = None,
    ) -> AsyncIterator[Envelope]:
        """The stored messages of one actor (its durable messages), one session, or
        one topic (when kept), oldest first, from a stream sequence or a time."""
        return read_history(
            self.runtime,
            address=address,
            session_id=session_id,
            topic=topic,
            since_seq=since_seq,
            since=since,
        )

    async def rerun(self, messages: AsyncIterator[Envelope], address: str) -> int:
        """Send stored messages again, to ``address`` (say, a new version of an agent),
        durably and in order; returns how many were sent."""
        sent = 0
        async for env in messages:
            extra = env.meta.model_extra or {}
            token = spans.replay_of.set(extra.get("traceparent")) if STATE.tracing else None
            try:
                await self.tell(
                    address,
                    env.content,
                    intent=env.intent,
                    session_id=env.context.session_id,
                    idempotency_key=env.context.idempotency_key,
                    durable=True,
                )
            finally:
                if token is not None:
                    spans.replay_of.reset(token)
            sent += 1
        return sent

    async def queue_stats(self, address: str) -> QueueStats:
        """Queue depth and consumer lag of an address's durable queue."""
        return await queue_stats(self.runtime, address)

    # -- discovery ---------------------------------------------------------
    async def discover(
        self,
        *,
        skill: str | None = None,
        tags: Iterable[str] = (),
        protocol: str | None = None,
        name: str | None = None,
        healthy: bool = True,
    ) -> list[Listing]:
        """Agents in the registry offering a skill, carrying every tag, speaking a
        protocol (``"actorbus"``, ``"a2a"``...), by name; healthy ones unless told."""
        self._check_open()
        return await self.directory.discover(
            skill=skill, tags=tags, protocol=protocol, name=name, healthy=healthy
        )

    async def _skill_address(self, address: str | None, skill: str | None) -> str:
        if (address is None) == (skill is None):
            raise TypeError("give an address or skill=, not both or neither")
        assert skill is not None
        return await self.directory.address_for(skill)

    def learn(self, *types: type[Actor]) -> None:
        """Know these actor types' delivery defaults when sending to them (types
        hosted by this system are known already)."""
        for cls in types:
            self.delivery.learn(cls.type_name, DeliveryPolicy.of(cls))

    def ref(self, address: str) -> ActorRef:
        Address.parse(address)
        return ActorRef(self, address)

    async def subscribe(
        self, topic: str, callback: Callable[[Envelope], Awaitable[None]], *, system: bool = False
    ) -> Callable[[], Awaitable[None]]:
        """Watch a topic (or, with ``system=True``, system events such as
        ``actor.failed``) from outside any actor. Returns an unsubscribe function."""
        self._check_open()
        if system:
            subject = self.subjects.system(validate_topic(topic, wildcards=True))
        else:
            subject = self.subjects.topic(topic, wildcards=True)

        async def on_msg(msg: Msg) -> None:
            try:  # the pipeline's decoder: JSON or msgpack, as the sender chose
                env = decode_request(msg, subject, self.limits).envelope
            except ActorBusError as err:
                log.warning("subscriber on %s: %s", subject, err)
                return
            try:
                await callback(env)
            except Exception:
                log.exception("subscriber callback on %s failed", subject)

        sub = await self.nc.subscribe(subject, cb=on_msg)
        return sub.unsubscribe

    # -- shutdown ----------------------------------------------------------
    def _check_open(self) -> None:
        if self._closing:
            raise ActorBusError("the actor system is closed")
        if self.conn.lost_error is not None:
            raise self.conn.lost_error

    def _spawn_task(self, coro: Coroutine[Any, Any, Any], what: str = "actorbus task") -> None:
        self.runtime.spawn_task(coro, what)

    async def close(self, timeout: float = 10.0) -> None:
        """Graceful shutdown: stop accepting, let in-flight handlers finish (bounded
        by ``timeout``), run on_stop, drain the connection, stop an embedded server."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            try:
                # Each step is bounded; this bounds them together, so that the
                # connection and an embedded server are always closed below.
                async with asyncio.timeout(3 * timeout):
                    await self._stop_hosting(timeout)
            except TimeoutError:
                log.error("actors did not stop within %gs; closing the connection", 3 * timeout)
            await self.conn.close(timeout)
            if STATE.tracing:
                await asyncio.to_thread(flush, timeout)  # this process may end now
        finally:
            if self.server is not None:
                await self.server.stop()
            self._closed.set()

    async def _stop_hosting(self, timeout: float) -> None:
        """Stop discovery, readers, actors and leases, each bounded by ``timeout``."""
        await self.directory.close(timeout)  # discovery stops offering us at once
        await self.hosting.close(timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class _Opening:
    """``await ActorSystem.start()`` or ``async with ActorSystem.start() as system``."""

    def __init__(self, coro: Awaitable[ActorSystem]) -> None:
        self._coro = coro
        self._system: ActorSystem | None = None

    def __await__(self) -> Generator[Any, None, ActorSystem]:
        return self._coro.__await__()

    async def __aenter__(self) -> ActorSystem:
        self._system = await self._coro
        return self._system

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._system is not None:
            await self._system.close()
