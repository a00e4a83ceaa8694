"""The one message pipeline: every envelope that leaves is built here, every one
that arrives is decoded here.

Leaving, in three stages::

    encode   the envelope and its NATS headers: a request (``encode_request``),
             an answer to one (``encode_answer``: replies, errors, stream frames)
             or a system event (``encode_event``)
    seal     with a session (``security/sealing.py``): the content sealed to the
             recipient (AES-256-GCM, bound to id, src, dst, ts, intent), the
             whole body tagged, the session named in ``Ab-Session``/``Ab-Auth``;
             a topic's with the sender key of its listeners, the body signed
             (``Ab-Topic``/``Ab-Sig``, ``security/topic_keys.py``)
    send     the bus: ``BusConnection.publish``, the request mux, or the
             retrying JetStream store (``bus.jetstream.store_message``)

Arriving, in three stages::

    decode   ``decode_request`` (an envelope for an actor: honours ``Ab-Enc``,
             refuses a malformed header block, checks the ttl) and
             ``decode_answer`` (what a caller needs of a reply)
    open     ``Guard.admit`` checks the session, the tag, the sender's right to
             the ``src``, replay and clock; ``security.sealing`` unseals
    dispatch the cell (``ActorCell.deliver``), a durable reader, a subscriber

Inside a handler, the message being handled is the parent of what the handler
sends: the trace id and the session travel along and ``parent_id`` points back,
so nobody threads a context by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from nats.aio.msg import Msg

from actorbus.actors.actor import current_incoming
from actorbus.actors.messages import to_content
from actorbus.bus.client import BadHeaders, EncodedHeaders, LazyHeaders, encode_headers
from actorbus.codecs.envelope import new_id, new_trace_id, now_ms
from actorbus.codecs.errors import AuthError, DecodeError, ExpiredError
from actorbus.codecs.inbound import Inbound, decode_inbound, decode_reply
from actorbus.codecs.wire import (
    DEFAULT_LIMITS,
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
    pack,
    unpack,
)
from actorbus.security.sealing import opened_answer, seal_content, session_of
from actorbus.security.sessions import (
    AUTH_HEADER,
    SESSION_HEADER,
    OutboundSession,
    sealing_aad,
    tag_body,
    unseal,
)
from actorbus.security.topic_keys import SIGNATURE_HEADER, TOPIC_HEADER, TopicSender
from actorbus.telemetry.spans import TRACEPARENT


class Outgoing(NamedTuple):
    body: bytes
    headers: EncodedHeaders
    intent: str
    id: str


# -- leaving ----------------------------------------------------------------------


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
    session: OutboundSession | None = None,
    seal: bool = False,
    topic_key: TopicSender | None = None,
) -> Outgoing:
    """An outgoing request (tell, ask, stream, publish, durable store): the envelope
    and its routing headers. ``session`` authenticates it (and, with ``seal``,
    seals it) to one recipient; ``topic_key`` to a topic's listeners, signed.

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
    sealed = False
    if seal and encoding is Encoding.MSGPACK:
        if session is not None:
            seal_content(data, session.keys.forward)
            sealed = True
        elif topic_key is not None:
            seal_content(data, topic_key.aead)
    body = encode_body(data, encoding)
    check_size(body, content, encoding, limits)
    if session is not None:
        session.sent += 1
    # A plain request, or one sealed on a session (its session line is the same on
    # every message of the session), takes the shortcut; any other the general way.
    routed = (session is None or sealed) and topic_key is None and not (durable or trace)
    if routed and encoding is Encoding.MSGPACK:
        routing = _routing_headers(
            msg_id,
            src,
            dst,
            intent,
            ctx["trace_id"],
            ctx.get("parent_id"),
            session.header_line if session is not None else "",
        )
        if routing is not None:
            return Outgoing(body, routing, intent, msg_id)
    headers = {H_ID: msg_id, H_SRC: src, H_DST: dst, H_INTENT: intent, H_TRACE: ctx["trace_id"]}
    if "parent_id" in ctx:
        headers[H_PARENT] = ctx["parent_id"]
    if encoding is not Encoding.MSGPACK:
        headers[H_ENC] = encoding.value
    if durable:  # JetStream drops a repeat of this id within its duplicate window
        headers[H_MSG_ID] = msg_id
    if trace:
        headers[TRACEPARENT] = trace[1]
    if session is not None:
        headers[SESSION_HEADER] = session.header
        if not sealed:  # sealed content authenticates the envelope by itself
            headers[AUTH_HEADER] = tag_body(session.keys.forward, body)
    elif topic_key is not None:  # listeners hold the key: the signature names the sender
        headers[TOPIC_HEADER] = topic_key.header
        headers[SIGNATURE_HEADER] = topic_key.sign(body)
    return Outgoing(body, encode_headers(headers), intent, msg_id)


_ROUTES: dict[tuple[str, str, str], str] = {}  # (src, dst, intent) -> their header lines
_ROUTES_KEPT = 4096


def _routing_headers(
    msg_id: str,
    src: str,
    dst: str,
    intent: str,
    trace_id: str,
    parent_id: str | None,
    session_line: str = "",
) -> EncodedHeaders | None:
    """The header block of a request with nothing but its routing facts (and the
    session line of one sealed on a session), the bytes ``encode_headers``
    writes: its src, dst and intent lines are checked and encoded once per route
    and kept, the session's once per session; the trace and parent (which may
    come from a message that arrived) are checked here. None when one of them
    needs cleaning (a line break, surrounding spaces): encode_headers does that.

    Every plain or sealed ask and tell takes this path; encoding the five headers
    one by one was a tenth of a caller's work."""
    lines = _ROUTES.get((src, dst, intent))
    if lines is None:
        block = encode_headers({H_SRC: src, H_DST: dst, H_INTENT: intent})
        lines = block[len(_BLOCK_START) : -2].decode()
        if len(_ROUTES) < _ROUTES_KEPT:
            _ROUTES[(src, dst, intent)] = lines
    if not _clean(trace_id):
        return None
    if parent_id is None:
        text = f"NATS/1.0\r\n{H_ID}: {msg_id}\r\n{lines}{H_TRACE}: {trace_id}\r\n{session_line}\r\n"
    elif _clean(parent_id):
        text = (
            f"NATS/1.0\r\n{H_ID}: {msg_id}\r\n{lines}{H_TRACE}: {trace_id}\r\n"
            f"{H_PARENT}: {parent_id}\r\n{session_line}\r\n"
        )
    else:
        return None
    return EncodedHeaders(text.encode())


def _clean(value: str) -> bool:
    """Can ``value`` go into a header line as it is?"""
    return "\r" not in value and "\n" not in value and value == value.strip()


_BLOCK_START = b"NATS/1.0\r\n"
_ENC_NAME = H_ENC.encode()


def _no_encoding_line(headers: Mapping[str, str]) -> bool:
    """An actorbus header block with no ``Ab-Enc`` line (the usual case), told
    from its raw bytes: no parse, no lookup through the Mapping."""
    return type(headers) is LazyHeaders and _ENC_NAME not in headers.raw


def encode_answer(
    to: Inbound | None,
    src: str,
    intent: str,
    content: Any,
    encoding: Encoding,
    limits: SizeLimits,
    headers: dict[str, str] | None = None,
) -> tuple[bytes, EncodedHeaders | None]:
    """An answer to ``to`` (a reply, an error, a stream frame), in the encoding the
    request came in: the body and the headers to send it with (encoded here, as
    a request's are, so that it takes the client's direct publish path).

    The plain msgpack reply is the hot path of the whole system: no headers, one
    pack; its size is only measured when it could be too large. EncodeError or
    MessageTooLargeError when the answer itself cannot be sent."""
    data = {
        "id": new_id(),
        "ts": now_ms(),
        "src": src,
        "dst": to.src if to else "",
        "intent": intent,
        "content": content,
        "context": {"trace_id": to.context.trace_id, "parent_id": to.id} if to else {},
    }
    session = session_of(to) if to is not None else None
    if session is None:  # the plain path: nothing else to look up
        body = encode_body(data, encoding)
        if len(body) > limits.max_payload:
            check_size(body, content, encoding, limits)
        if encoding is not Encoding.MSGPACK:
            headers = {**(headers or {}), H_ENC: encoding.value}
        return body, encode_headers(headers) if headers else None
    sealed = bool(to.__dict__.get("_opened")) and encoding is Encoding.MSGPACK
    if sealed:
        seal_content(data, session.keys.back)
    body = encode_body(data, encoding)
    if len(body) > limits.max_payload:
        check_size(body, content, encoding, limits)
    if encoding is not Encoding.MSGPACK:
        headers = {**(headers or {}), H_ENC: encoding.value}
    if not sealed:
        headers = {**(headers or {}), AUTH_HEADER: tag_body(session.keys.back, body)}
    return body, encode_headers(headers) if headers else None


def encode_event(src: str, event: str, data: dict[str, Any]) -> bytes:
    """A system event (``{ns}.sys.{event}``): an envelope, msgpack, no headers."""
    body = {
        "id": new_id(),
        "ts": now_ms(),
        "src": src,
        "dst": f"sys.{event}",
        "intent": event,
        "content": data,
    }
    return pack(body)


# -- arriving ----------------------------------------------------------------------


def request_encoding(msg: Msg | None) -> Encoding:
    """The encoding a request came in (msgpack unless its Ab-Enc header says
    otherwise, or is unreadable): what its answer is sent in."""
    headers: Mapping[str, str] | None = msg.headers if msg is not None else None
    if headers is None or _no_encoding_line(headers) or H_ENC not in headers:
        return Encoding.MSGPACK
    try:
        return encoding_from_header(headers[H_ENC])
    except DecodeError:
        return Encoding.MSGPACK


def decode_request(msg: Msg, address: str, limits: SizeLimits) -> Inbound:
    """What arrived for ``address``, or the typed error to answer with: a DecodeError
    (malformed header block, unknown encoding, bad body) or ExpiredError."""
    env = decode_stored(msg.data, msg.headers, limits)
    ttl = env.context.ttl_ms
    if ttl is not None and now_ms() > env.ts + ttl:
        raise ExpiredError(f"message {env.id} to {address} expired ({ttl} ms ttl)")
    return env


def decode_stored(
    data: bytes, headers: Mapping[str, str] | None, limits: SizeLimits = DEFAULT_LIMITS
) -> Inbound:
    """An envelope as sent or stored (a history entry, a dead letter's original),
    decoded in the encoding its headers name; a DecodeError if it is not one."""
    if headers is None or _no_encoding_line(headers):
        enc = Encoding.MSGPACK
    elif H_ENC in headers:
        enc = encoding_from_header(headers[H_ENC])  # an unknown one is a DecodeError
    elif type(headers) is BadHeaders:
        raise DecodeError(headers.problem)
    else:
        enc = Encoding.MSGPACK
    return decode_inbound(data, enc, limits)


def decode_answer(
    msg: Msg, address: str, session: OutboundSession | None = None
) -> tuple[str, Any]:
    """A reply's (intent, content): only those matter to the caller. Sealed content
    is opened with ``session``'s answer key."""
    if session is not None:
        opened = opened_answer(msg)
        if opened is not None:  # the reply check opened it already
            return opened
    try:
        headers = msg.headers
        enc = encoding_from_header(headers.get(H_ENC)) if headers else Encoding.MSGPACK
        intent, content, sealed = decode_reply(msg.data, enc)
    except Exception as exc:
        raise DecodeError(f"malformed reply from {address}: {exc!r}") from exc
    if sealed is not None:
        if session is None or not isinstance(content, bytes):
            raise AuthError(f"a sealed reply from {address} that this caller cannot open")
        content = unpack(unseal(session.keys.back, content, sealing_aad(*sealed)))
    return intent, content
