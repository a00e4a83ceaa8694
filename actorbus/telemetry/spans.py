"""The spans of one hop: send (producer or client), receive and process.

Names and attributes follow the OpenTelemetry messaging conventions
(``messaging.system=nats``, destination, operation, message id, body size,
conversation id) plus actorbus's own (source and destination actor, intent,
protocol, delivery mode, attempt). Trace context travels as a W3C
``traceparent`` NATS header and as the envelope's ``context.trace_id``, so a
flow across processes is one trace. Content never goes into a span: its size
and a hash do, and a redacted preview only when ``ACTORBUS_TRACE_PREVIEW`` asks;
sealed (end-to-end encrypted) content is never previewed.

Callers check their system's ``Telemetry.tracing`` first; nothing here runs when
tracing is off.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
_propagator = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("actorbus")

# The span kind LLM-tracing UIs (Arize Phoenix, OpenInference) show beside each
# span; without it every span reads "unknown" there. A handler's run is the
# agent at work; a message on its way is a step of the chain.
OPENINFERENCE_KIND = "openinference.span.kind"

# Links the next sends in this task get (a replay links to the original message).
replay_of: ContextVar[str | None] = ContextVar("actorbus_replay_of", default=None)


def start_send(operation: str, destination: str, subject: str, *, expects_reply: bool) -> Span:
    """The span of an outgoing message, a child of the current one (a handler's)."""
    links = []
    original = replay_of.get()
    if original:
        sender = _propagator.extract({TRACEPARENT: original})
        links.append(
            Link(trace.get_current_span(sender).get_span_context(), {"actorbus.link": "replay"})
        )
    return _tracer.start_span(
        f"{operation} {destination}",
        kind=SpanKind.CLIENT if expects_reply else SpanKind.PRODUCER,
        attributes={
            OPENINFERENCE_KIND: "CHAIN",
            "messaging.system": "nats",
            "messaging.operation.type": "send",
            "messaging.operation.name": operation,
            "messaging.destination.name": subject,
            "actorbus.destination": destination,
        },
        links=links,
    )


def traceparent(span: Span) -> tuple[str, str]:
    """(trace id, traceparent header) of a span, for the envelope and the headers."""
    ctx = span.get_span_context()
    trace_id = format(ctx.trace_id, "032x")
    return trace_id, f"00-{trace_id}-{format(ctx.span_id, '016x')}-{int(ctx.trace_flags):02x}"


def sent(
    span: Span,
    *,
    message_id: str,
    intent: str,
    body: bytes,
    source: str,
    session_id: str | None,
    durable: bool,
    content: Any = None,
    preview: int = 0,
) -> None:
    """Attributes known once the message is encoded; the intent joins the name,
    so a trace's tree shows what was asked of whom at a glance."""
    name = _name_of(span)
    if span.is_recording() and not name.endswith(f" ({intent})"):  # once, if encoded again
        span.update_name(f"{name} ({intent})")
    span.set_attributes(
        {
            "messaging.message.id": message_id,
            "messaging.message.body.size": len(body),
            "actorbus.source": source,
            "actorbus.intent": intent,
            "actorbus.protocol": "actorbus",
            "actorbus.delivery": "durable" if durable else "core",
            "actorbus.content.sha256": hashlib.sha256(body).hexdigest()[:32],
        }
    )
    if session_id:
        span.set_attribute("messaging.message.conversation_id", session_id)
    if preview and content is not None:
        span.set_attribute("actorbus.content.preview", redacted_preview(content, preview))


def failed(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}"))


@contextlib.contextmanager
def processing(
    address: str,
    subject: str,
    headers: Mapping[str, str] | None,
    env: Any,
    body_size: int,
    arrived_ns: int,
    expects_reply: bool,
    preview: int = 0,
    attempt: int = 0,
) -> Iterator[Span]:
    """receive (arrival to the handler's start: the wait in the actor's mailbox)
    and process (the handler) spans, the second current while the handler runs,
    so what the handler sends is its child. ``attempt``: a durable reader's
    delivery count (0: delivered over core NATS)."""
    parent = _propagator.extract(dict(headers)) if headers and TRACEPARENT in headers else None
    mode, attempt = ("durable", attempt) if attempt else ("core", 1)
    links = []
    if parent is not None and attempt > 1:  # a redelivery: linked to the original send
        sender = trace.get_current_span(parent).get_span_context()
        links.append(Link(sender, {"actorbus.link": "redelivery"}))
    attrs: dict[str, Any] = {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.message.id": env.id,
        "messaging.message.body.size": body_size,
        "actorbus.source": env.src,
        "actorbus.destination": address,
        "actorbus.intent": env.intent,
        "actorbus.protocol": _protocol(env),
        "actorbus.delivery": mode,
        "actorbus.attempt": attempt,
    }
    session = env.context.session_id
    if session:
        attrs["messaging.message.conversation_id"] = session
    receive = _tracer.start_span(
        f"receive {address}",
        context=parent,
        kind=SpanKind.CONSUMER,
        start_time=arrived_ns or None,
        attributes={**attrs, OPENINFERENCE_KIND: "CHAIN", "messaging.operation.type": "receive"},
        links=links,
    )
    receive.end()
    process = _tracer.start_span(
        f"process {address} ({env.intent})",
        context=trace.set_span_in_context(receive),
        kind=SpanKind.SERVER if expects_reply else SpanKind.CONSUMER,
        attributes={**attrs, OPENINFERENCE_KIND: "AGENT", "messaging.operation.type": "process"},
    )
    if preview and not _sealed(env):
        process.set_attribute("actorbus.content.preview", redacted_preview(env.content, preview))
    token = otel_context.attach(trace.set_span_in_context(process))
    try:
        yield process
    finally:
        otel_context.detach(token)
        process.end()


@contextlib.contextmanager
def state_operation(operation: str, address: str) -> Iterator[Span]:
    """The span of loading (``load``) or saving (``save``) an actor's declared state,
    inside the span of the turn or activation that needs it."""
    with _tracer.start_as_current_span(
        f"state {operation} {address}",
        kind=SpanKind.INTERNAL,
        attributes={"actorbus.destination": address, "actorbus.state.operation": operation},
        record_exception=True,
    ) as span:
        yield span


def _name_of(span: Span) -> str:
    name = getattr(span, "name", "")  # the SDK's span has it; the API's interface does not
    return str(name)


def _protocol(env: Any) -> str:
    """The protocol a message came in by (a gateway's codec marks it), else ours."""
    meta = getattr(env, "meta", None)
    return (getattr(meta, "protocol_hint", None) if meta is not None else None) or "actorbus"


def now_ns() -> int:
    return time.time_ns()


def _sealed(env: Any) -> bool:
    meta = getattr(env, "meta", None)
    extra = getattr(meta, "model_extra", None) or {}
    return bool(extra.get("cipher") or extra.get("sealed"))


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_DIGITS = re.compile(r"\d{4,}")
_SECRET = re.compile(r"(?i)(password|secret|token|api[_-]?key)(\W+)\S+")


def redacted_preview(content: Any, limit: int) -> str:
    """The start of the content with emails, long numbers and secrets masked."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else str(content)
    text = _SECRET.sub(r"\1\2***", text)
    text = _EMAIL.sub("<email>", text)
    text = _DIGITS.sub("<number>", text)
    return text[:limit] + ("…" if len(text) > limit else "")
