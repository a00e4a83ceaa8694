"""The sending side: a value to send becomes an envelope plus its routing headers,
and a reply becomes the value the caller gets.

Inside a handler, the message being handled is the parent of what the handler
sends: the trace id and the session travel along and ``parent_id`` points back,
so nobody threads a context by hand.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from nats.aio.msg import Msg

from actorbus.actors.actor import current_incoming
from actorbus.actors.messages import to_content
from actorbus.bus.client import EncodedHeaders, encode_headers
from actorbus.codecs.envelope import new_id, new_trace_id, now_ms
from actorbus.codecs.errors import DecodeError
from actorbus.codecs.inbound import decode_reply
from actorbus.codecs.wire import (
    H_DST,
    H_ENC,
    H_ID,
    H_INTENT,
    H_MSG_ID,
    H_PARENT,
    H_SRC,
    H_TRACE,
    Encoding,
    SizeLimits,
    check_size,
    encode_body,
    encoding_from_header,
)
from actorbus.telemetry.spans import TRACEPARENT


class Outgoing(NamedTuple):
    body: bytes
    headers: EncodedHeaders
    intent: str
    id: str


def encode_request(
    dst: str,
    message: Any,
    *,
    client_address: str,
    encoding: Encoding,
    limits: SizeLimits,
    intent: str | None = None,
    session_id: str | None = None,
    idempotency_key: str | None = None,
    ttl_ms: int | None = None,
    stream: bool = False,
    durable: bool = False,
    trace: tuple[str, str] | None = None,
) -> Outgoing:
    """Build and encode an outgoing envelope with its routing headers.

    ``trace`` (trace id, W3C traceparent) comes from the send's span when tracing
    is on: the envelope's ``trace_id`` is then the OpenTelemetry trace's."""
    intent, content = to_content(message, intent)
    inc = current_incoming.get()
    ctx: dict[str, Any]
    if inc is None:
        src = client_address
        ctx = {"trace_id": trace[0] if trace else new_trace_id()}
    else:
        parent = inc.message
        src = inc.address
        trace_id = trace[0] if trace else parent.context.trace_id or new_trace_id()
        ctx = {"trace_id": trace_id, "parent_id": parent.id}
        session_id = session_id or parent.context.session_id
    if session_id is not None:
        ctx["session_id"] = session_id
    if idempotency_key is not None:
        ctx["idempotency_key"] = idempotency_key
    if ttl_ms is not None:
        ctx["ttl_ms"] = ttl_ms
    if stream:
        ctx["stream"] = True
    msg_id = new_id()
    data = {
        "id": msg_id,
        "ts": now_ms(),
        "src": src,
        "dst": dst,
        "intent": intent,
        "content": content,
        "context": ctx,
    }
    body = encode_body(data, encoding)
    check_size(body, content, encoding, limits)
    headers = {H_ID: msg_id, H_SRC: src, H_DST: dst, H_INTENT: intent, H_TRACE: ctx["trace_id"]}
    if "parent_id" in ctx:
        headers[H_PARENT] = ctx["parent_id"]
    if encoding is not Encoding.MSGPACK:
        headers[H_ENC] = encoding.value
    if durable:  # JetStream drops a repeat of this id within its duplicate window
        headers[H_MSG_ID] = msg_id
    if trace:
        headers[TRACEPARENT] = trace[1]
    return Outgoing(body, encode_headers(headers), intent, msg_id)


def read_reply(msg: Msg, address: str) -> tuple[str, Any]:
    """A reply's (intent, content): only those matter to the caller."""
    try:
        headers = msg.headers
        enc = encoding_from_header(headers.get(H_ENC)) if headers else Encoding.MSGPACK
        return decode_reply(msg.data, enc)
    except Exception as exc:
        raise DecodeError(f"malformed reply from {address}: {exc!r}") from exc
