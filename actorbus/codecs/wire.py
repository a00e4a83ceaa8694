"""Envelope <-> bytes, plus the NATS headers that let a hop route without decoding.

msgpack is the default body encoding (compact and fast); JSON is the second one,
for tools that want to read the bus. The encoding travels in the ``Ab-Enc``
header, absent meaning msgpack, so the hot path sends no extra header.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgspec
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import DecodeError, EncodeError, MessageTooLargeError

# Header names. Routing facts are duplicated here from the body on purpose.
H_ID = "Ab-Id"
H_SRC = "Ab-Src"
H_DST = "Ab-Dst"
H_INTENT = "Ab-Intent"
H_TRACE = "Ab-Trace"
H_PARENT = "Ab-Parent"
H_ENC = "Ab-Enc"
H_KIND = "Ab-Kind"
H_SEQ = "Ab-Seq"
H_CREDIT = "Ab-Credit"
H_BATCH = "Ab-Batch"  # a stream request: the items its consumer takes in one frame
H_FWD = "Ab-Fwd"  # forwarded to the process hosting a keyed actor: ask | tell | durable
H_STORED = "Ab-Stored"  # a durable message's stream position, set by its reader (state/record.py)
H_FIRED = "Ab-Fired"  # a reminder's firing: "<name> <next firing>" (actors/reminder_relay.py)
H_MOVED = "Ab-Moved"  # that process no longer hosts it: the holder now (or empty)
H_MSG_ID = "Nats-Msg-Id"  # JetStream deduplication


class Encoding(StrEnum):
    MSGPACK = "msgpack"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class SizeLimits:
    """Limits checked before a message leaves and after it arrives.

    The defaults keep one message under NATS's default 1 MB max_payload with
    room for headers, and the business payload under 900 KB. ``max_depth``
    bounds how deeply maps and lists nest in one message, the envelope's own
    levels included (128, as serde_json): deeper input is a DecodeError, not a
    RecursionError somewhere in a decoder, a validator or a dead-letter writer.
    """

    max_message: int = 1_000_000
    max_payload: int = 900_000
    max_depth: int = 128

    def __post_init__(self) -> None:
        if self.max_payload <= 0 or self.max_message <= 0 or self.max_depth <= 0:
            raise ValueError("size limits must be positive")
        if self.max_payload > self.max_message:
            raise ValueError("max_payload cannot exceed max_message")


DEFAULT_LIMITS = SizeLimits()


def _default(value: Any) -> Any:
    """msgpack fallback for values it has no type for (datetime, UUID, Decimal ...)."""
    try:
        return to_jsonable_python(value)
    except Exception as exc:
        raise TypeError(f"cannot encode {type(value).__name__}: {exc}") from exc


# msgspec: the fastest msgpack for Python, and the same bytes on the wire as any
# other msgpack library. Encoder and decoder are reused (their setup is not free).
_encoder = msgspec.msgpack.Encoder(enc_hook=_default)
_decoder = msgspec.msgpack.Decoder()


def pack(data: Any) -> bytes:
    """Plain data -> msgpack. TypeError or OverflowError for what cannot be encoded
    (ValueError for data nested past the interpreter's recursion limit)."""
    try:
        return _encoder.encode(data)
    except RecursionError:
        raise ValueError("data nests too deeply to encode") from None


def unpack(data: bytes) -> Any:
    return _decoder.decode(data)


def encode_body(data: dict[str, Any], encoding: Encoding) -> bytes:
    try:
        if encoding is Encoding.MSGPACK:
            return pack(data)
        return json.dumps(data, default=to_jsonable_python, separators=(",", ":")).encode()
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode envelope {data.get('intent')!r}: {exc}") from exc


def encode_envelope(
    env: Envelope,
    encoding: Encoding = Encoding.MSGPACK,
    limits: SizeLimits = DEFAULT_LIMITS,
) -> bytes:
    """Encode an envelope and enforce the size limits with a typed error."""
    data = env.to_dict()
    body = encode_body(data, encoding)
    check_size(body, data.get("content"), encoding, limits)
    return body


def check_size(body: bytes, content: Any, encoding: Encoding, limits: SizeLimits) -> None:
    size = len(body)
    if size <= limits.max_payload:
        return  # the payload is part of the body, so it cannot be larger
    payload_size = len(encode_body({"c": content}, encoding))
    if payload_size > limits.max_payload:
        raise MessageTooLargeError("payload", payload_size, limits.max_payload)
    if size > limits.max_message:
        raise MessageTooLargeError("message", size, limits.max_message)


def decode_envelope(
    body: bytes,
    encoding: Encoding = Encoding.MSGPACK,
    limits: SizeLimits = DEFAULT_LIMITS,
) -> Envelope:
    """Bytes -> Envelope, or a DecodeError that says what was wrong."""
    return envelope_from(decode_body(body, encoding, limits))


def decode_body(body: bytes, encoding: Encoding, limits: SizeLimits) -> Any:
    """Bytes -> plain data, after the size check, nested no deeper than the limit."""
    if len(body) > limits.max_message:
        raise MessageTooLargeError("message", len(body), limits.max_message)
    try:
        data = unpack(body) if encoding is Encoding.MSGPACK else json.loads(body)
    except RecursionError:
        raise too_deep(limits) from None
    except Exception as exc:
        raise DecodeError(f"body is not valid {encoding.value}: {exc}") from exc
    check_depth(body, data, encoding, limits)
    return data


def check_depth(
    body: bytes, data: Any, encoding: Encoding, limits: SizeLimits, above: int = 0
) -> None:
    """DecodeError if ``data`` (decoded from ``body``, found ``above`` levels down
    in it) nests deeper than allowed.

    Every message is checked, so the common cases answer first: a body shorter
    than the limit cannot nest that deep (each level takes a byte), and a
    scalar or a map/list of scalars is one level."""
    if len(body) <= limits.max_depth:
        return
    if type(data) is dict:
        children: Any = data.values()
    elif type(data) is list:
        children = data
    else:
        return
    for child in children:
        if type(child) is dict or type(child) is list:
            break
    else:
        return
    if nests_deeper(data, limits.max_depth - above):
        raise too_deep(limits)


def nests_deeper(data: Any, limit: int) -> bool:
    """Do maps and lists in ``data`` nest more than ``limit`` levels? (No recursion.)"""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def too_deep(limits: SizeLimits) -> DecodeError:
    return DecodeError(f"message nests maps/lists deeper than {limits.max_depth} levels")


def envelope_from(raw: Any) -> Envelope:
    """Plain data -> Envelope, validated."""
    if not isinstance(raw, dict):
        raise DecodeError(f"envelope must be a map, got {type(raw).__name__}")
    try:
        # Strict: what arrives must have the types the envelope declares (a
        # context.stream of "yes" is refused, not read as true).
        return Envelope.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise DecodeError(f"invalid envelope: {validation_summary(exc)}") from exc


def encoding_from_header(value: str | None) -> Encoding:
    if value is None or value == "msgpack":
        return Encoding.MSGPACK
    if value == "json":
        return Encoding.JSON
    raise DecodeError(f"unknown body encoding {value!r} in {H_ENC} header")


def routing_headers(env: Envelope, encoding: Encoding = Encoding.MSGPACK) -> dict[str, str]:
    headers = {H_ID: env.id, H_SRC: env.src, H_DST: env.dst, H_INTENT: env.intent}
    ctx = env.context
    if ctx.trace_id:
        headers[H_TRACE] = ctx.trace_id
    if ctx.parent_id:
        headers[H_PARENT] = ctx.parent_id
    if encoding is not Encoding.MSGPACK:
        headers[H_ENC] = encoding.value
    return headers


def validation_summary(exc: ValidationError) -> str:
    """A one-line summary of a pydantic error: which fields, what was wrong."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - 5
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)
