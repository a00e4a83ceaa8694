"""Sending: ask, tell (core or durable), publish and stream, on the runtime kernel.

Two senders with one interface. :class:`Sender` is the plain one, the hot path
with nothing in it that is not needed. :class:`ObservedSender` wraps each send
in its OpenTelemetry span (the trace context rides in the envelope and its
``traceparent`` header) and records the metrics; the ActorSystem picks one of
the two once, when it opens, from the telemetry configuration, so a system
without tracing pays nothing for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
from opentelemetry.trace import Span

from actorbus.actors.actor import current_incoming
from actorbus.actors.messages import INTENT_ERROR, from_content
from actorbus.actors.outbox import store_or_hold
from actorbus.actors.pipeline import Outgoing, decode_answer, encode_request
from actorbus.actors.runtime import Runtime
from actorbus.actors.streaming import consume_stream
from actorbus.bus.requests import NoResponders, RequestTimeout
from actorbus.bus.subjects import Address
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    InvalidAddressError,
    NoRespondersError,
    error_from_wire,
)
from actorbus.security.sessions import OutboundSession
from actorbus.security.topic_keys import TopicSender
from actorbus.telemetry import metrics as meters, spans

R = TypeVar("R")
T = TypeVar("T")

# Encodes a request again, sealed on a session found after it was first sent.
Reseal = Callable[[OutboundSession], Outgoing]

# Seconds (at most half an ask's timeout) within which a no-responders answer is
# asked again before it counts: a fresh subscription, or a host reconnecting.
_NO_RESPONDERS_GRACE = 0.5


@dataclass(frozen=True, slots=True)
class SendOptions:
    """The optional facts a caller gives a send; they ride in the envelope's context."""

    intent: str | None = None
    session_id: str | None = None
    idempotency_key: str | None = None
    ttl_ms: int | None = None


class Sender:
    """The plain sender: encode (the pipeline), then the bus."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._subjects: dict[str, str] = {}

    def subject(self, address: str) -> str:
        """The direct subject of an address (cached: the same few recur)."""
        subject = self._subjects.get(address)
        if subject is None:
            subject = self.rt.subjects.direct(Address.parse(address))
            if len(self._subjects) < 10_000:
                self._subjects[address] = subject
        return subject

    def encode(
        self,
        dst: str,
        message: Any,
        opts: SendOptions,
        stream: bool = False,
        durable: bool = False,
        span: Span | None = None,
        session: OutboundSession | None = None,
        topic_key: TopicSender | None = None,
    ) -> Outgoing:
        rt = self.rt
        sealing = session is not None or topic_key is not None
        return encode_request(
            dst,
            message,
            client_address=rt.client_address,
            encoding=rt.encoding,
            limits=rt.limits,
            intent=opts.intent,
            session_id=opts.session_id,
            idempotency_key=opts.idempotency_key,
            ttl_ms=opts.ttl_ms,
            stream=stream,
            durable=durable,
            trace=spans.traceparent(span) if span is not None else None,
            session=session,
            seal=sealing and rt.security.seals,
            topic_key=topic_key,
        )

    def session(self, dst: str, *, queued: bool = False) -> Awaitable[OutboundSession | None]:
        """The security session to ``dst`` (None: the system is not secured, or no
        key for ``dst`` is known). ``queued``: the message waits in JetStream for
        a host that may not have started yet (``Guard.session_for``)."""
        inc = current_incoming.get()
        src = inc.address if inc else self.rt.client_address
        return self.rt.security.session_for(src, dst, provision=queued)

    async def topic_key(self, topic: str) -> TopicSender | None:
        """The sender key to seal a publish to ``topic`` with (None: not secured)."""
        inc = current_incoming.get()
        src = inc.address if inc else self.rt.client_address
        return await self.rt.security.topic_sender(src, topic)

    # -- the operations ------------------------------------------------------------
    async def ask(
        self,
        address: str,
        message: Any,
        timeout: float,
        returns: type[R] | None,
        opts: SendOptions,
    ) -> Any:
        subject = self.subject(address)
        session = await self.session(address) if self.rt.security.secured else None
        out = self.encode(address, message, opts, session=session)

        def reseal(fresh: OutboundSession) -> Outgoing:
            return self.encode(address, message, opts, session=fresh)

        return await self.request(address, subject, out, timeout, returns, session, reseal)

    async def tell(
        self,
        address: str,
        message: Any,
        opts: SendOptions,
    ) -> None:
        session = await self.session(address)
        out = self.encode(address, message, opts, session=session)
        await self.rt.conn.publish(self.subject(address), out.body, out.headers)

    async def tell_durable(
        self,
        address: str,
        message: Any,
        opts: SendOptions,
        timeout: float | None,
    ) -> None:
        subject, wait = await self._durable_target(address, timeout)
        session = await self.session(address, queued=True)
        out = self.encode(address, message, opts, durable=True, session=session)
        await store_or_hold(self.rt, subject, out, address, wait)

    async def publish(self, topic: str, message: Any, opts: SendOptions) -> None:
        rt = self.rt
        keep = rt.durable_settings.keep_topics
        key = await self.topic_key(topic)
        out = self.encode(f"topic:{topic}", message, opts, False, keep, topic_key=key)
        await self._publish(topic, out)

    def stream(
        self,
        address: str,
        message: Any,
        timeout: float,
        returns: type[Any] | None,
        opts: SendOptions,
    ) -> AsyncIterator[Any]:
        subject = self.subject(address)
        prepare = self._stream_request(address, message, opts)
        return consume_stream(self.rt, address, subject, prepare, timeout, returns)

    def _stream_request(
        self, address: str, message: Any, opts: SendOptions, span: Span | None = None
    ) -> Callable[[], Awaitable[tuple[Outgoing, OutboundSession | None]]]:
        """How a stream's request is made when the caller starts to iterate: its
        session found first, so the request goes out on it."""

        async def prepare() -> tuple[Outgoing, OutboundSession | None]:
            session = await self.session(address) if self.rt.security.secured else None
            return self.encode(address, message, opts, True, span=span, session=session), session

        return prepare

    # -- the steps both senders share ---------------------------------------------
    async def request(
        self,
        address: str,
        subject: str,
        out: Outgoing,
        timeout: float,
        returns: type[R] | None,
        session: OutboundSession | None = None,
        reseal: Reseal | None = None,
    ) -> Any:
        """Ask and decode the answer. A no-responders answer is asked again briefly;
        a message that went unsealed because no key of its type was known yet is
        sealed afresh (``reseal``) for that: its host may have just published it."""
        rt = self.rt
        accept = rt.security.reply_check(session)
        grace = deadline = 0.0  # set at the first no-responders answer: the happy path pays nothing
        pause = 0.01
        while True:
            try:
                msg = await rt.mux.request(subject, out.body, out.headers, timeout, accept)
                break
            except RequestTimeout:
                raise AskTimeoutError(address, out.intent, timeout) from None
            except NoResponders:
                # Nobody got it, so asking again is safe. A subscription made a
                # moment ago in another connection may not be known to this one's
                # server yet, and a host may be reconnecting: ask again briefly.
                now = asyncio.get_running_loop().time()
                if not deadline:
                    deadline = now + timeout
                    grace = now + min(_NO_RESPONDERS_GRACE, timeout / 2)
                if now + pause > grace:
                    raise NoRespondersError(address, out.intent) from None
                await asyncio.sleep(pause)
                pause *= 2
                timeout = deadline - asyncio.get_running_loop().time()
                if reseal is not None and session is None:
                    session = await self.session(address)
                    if session is not None:
                        out = reseal(session)
                        accept = rt.security.reply_check(session)
            except nats.errors.Error as exc:
                raise rt.conn.translate(exc) from exc
        reply_intent, content = decode_answer(msg, address, session)
        if reply_intent == INTENT_ERROR:
            raise error_from_wire(content, address)
        return from_content(reply_intent, content, returns)

    async def _durable_target(self, address: str, timeout: float | None) -> tuple[str, float]:
        addr = Address.parse(address)
        if addr.key is None:
            raise InvalidAddressError(f"durable sends need a 'type/key' address, not {address!r}")
        rt = self.rt
        await rt.durable.queue(addr.type)
        wait = rt.durable_settings.store_timeout if timeout is None else timeout
        return rt.subjects.durable(addr), wait

    async def _publish(self, topic: str, out: Outgoing) -> None:
        """Kept topics are stored (history has them), others go over core NATS."""
        rt = self.rt
        subject = rt.subjects.topic(topic)
        if rt.durable_settings.keep_topics:
            timeout = rt.durable_settings.store_timeout
            await store_or_hold(rt, subject, out, f"topic {topic!r}", timeout)
        else:
            await rt.conn.publish(subject, out.body, out.headers)


class ObservedSender(Sender):
    """The sender when tracing or metrics are on: every send in its span, message
    sizes, request durations and failures recorded."""

    def encode(
        self,
        dst: str,
        message: Any,
        opts: SendOptions,
        stream: bool = False,
        durable: bool = False,
        span: Span | None = None,
        session: OutboundSession | None = None,
        topic_key: TopicSender | None = None,
    ) -> Outgoing:
        out = super().encode(dst, message, opts, stream, durable, span, session, topic_key)
        inc = current_incoming.get()
        telemetry = self.rt.telemetry
        if telemetry.metrics:
            labels = meters.labels(inc.address if inc else "client", dst)
            meters.message_size.record(len(out.body), labels)
        if span is not None:
            spans.sent(
                span,
                message_id=out.id,
                intent=out.intent,
                body=out.body,
                source=inc.address if inc is not None else self.rt.client_address,
                session_id=opts.session_id or (inc.message.context.session_id if inc else None),
                durable=durable,
                content=message,
                preview=telemetry.preview,
            )
        return out

    async def ask(
        self,
        address: str,
        message: Any,
        timeout: float,
        returns: type[R] | None,
        opts: SendOptions,
    ) -> Any:
        subject = self.subject(address)
        session = await self.session(address)

        async def send(span: Span | None) -> Any:
            out = self.encode(address, message, opts, span=span, session=session)

            def reseal(fresh: OutboundSession) -> Outgoing:
                return self.encode(address, message, opts, span=span, session=fresh)

            if self.rt.telemetry.metrics:
                return await self._measured(
                    address, subject, out, timeout, returns, session, reseal
                )
            return await self.request(address, subject, out, timeout, returns, session, reseal)

        return await self._spanned("ask", address, subject, True, send)

    async def tell(
        self,
        address: str,
        message: Any,
        opts: SendOptions,
    ) -> None:
        subject = self.subject(address)
        session = await self.session(address)

        async def send(span: Span | None) -> None:
            out = self.encode(address, message, opts, span=span, session=session)
            await self.rt.conn.publish(subject, out.body, out.headers)

        await self._spanned("tell", address, subject, False, send)

    async def tell_durable(
        self,
        address: str,
        message: Any,
        opts: SendOptions,
        timeout: float | None,
    ) -> None:
        subject, wait = await self._durable_target(address, timeout)
        session = await self.session(address, queued=True)

        async def send(span: Span | None) -> None:
            out = self.encode(address, message, opts, durable=True, span=span, session=session)
            await store_or_hold(self.rt, subject, out, address, wait)

        await self._spanned("tell", address, subject, False, send)

    async def publish(self, topic: str, message: Any, opts: SendOptions) -> None:
        keep = self.rt.durable_settings.keep_topics
        destination = f"topic:{topic}"

        key = await self.topic_key(topic)

        async def send(span: Span | None) -> None:
            out = self.encode(destination, message, opts, False, keep, span, topic_key=key)
            await self._publish(topic, out)

        await self._spanned("publish", destination, self.rt.subjects.topic(topic), False, send)

    def stream(
        self,
        address: str,
        message: Any,
        timeout: float,
        returns: type[Any] | None,
        opts: SendOptions,
    ) -> AsyncIterator[Any]:
        subject = self.subject(address)
        span = None
        if self.rt.telemetry.tracing:  # the request's span; items are the producer's children
            span = spans.start_send("stream", address, subject, expects_reply=True)
        prepare = self._stream_request(address, message, opts, span)
        items = consume_stream(self.rt, address, subject, prepare, timeout, returns)
        return items if span is None else _lasting(span, items)

    async def _spanned(
        self,
        operation: str,
        destination: str,
        subject: str,
        expects_reply: bool,
        send: Callable[[Span | None], Awaitable[T]],
    ) -> T:
        """Run a send inside its span (when tracing): errors recorded, always ended."""
        if not self.rt.telemetry.tracing:  # metrics only
            return await send(None)
        span = spans.start_send(operation, destination, subject, expects_reply=expects_reply)
        try:
            return await send(span)
        except BaseException as exc:
            spans.failed(span, exc)
            raise
        finally:
            span.end()

    async def _measured(
        self,
        address: str,
        subject: str,
        out: Outgoing,
        timeout: float,
        returns: type[R] | None,
        session: OutboundSession | None,
        reseal: Reseal,
    ) -> Any:
        inc = current_incoming.get()
        labels = meters.labels(inc.address if inc else "client", address)
        started = time.perf_counter()
        try:
            return await self.request(address, subject, out, timeout, returns, session, reseal)
        except ActorBusError as err:
            meters.failures.add(
                1, {**labels, "error.type": err.code, "messaging.operation.type": "send"}
            )
            raise
        finally:
            meters.request_duration.record(time.perf_counter() - started, labels)


async def _lasting(span: Span, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """``items``, with ``span`` ended when the stream is (its last item, an error,
    or the caller leaving early): a stream's span lasts as long as the stream."""
    try:
        async for item in items:
            yield item
    except Exception as exc:
        spans.failed(span, exc)
        raise
    finally:
        try:
            close = getattr(items, "aclose", None)  # leaving early closes the stream
            if close is not None:
                await close()
        finally:
            span.end()
