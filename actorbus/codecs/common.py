"""Protocol-neutral helpers the edge codecs share.

Nothing here knows a protocol: the envelope's fields as dotted paths
(:data:`ENVELOPE_FIELDS`, what a codec's ``carries`` names), the envelope as
plain data and back (:func:`envelope_fields`, :func:`build_envelope`,
:func:`meta_builder`; :func:`extension_context` and :func:`extension_meta` for a
protocol's extension slot), the intent a native message without one gets
(:func:`content_intent`), ``$error`` envelopes (:func:`error_envelope`,
:func:`envelope_error`), a taxonomy error rebuilt from a code and a message
(:func:`rebuild_error`, on top of :func:`actorbus.codecs.errors.error_for_code`),
JSON in and out with :class:`DecodeError`/:class:`EncodeError` for bad data
(:func:`json_text`, :func:`json_value`, :func:`convert`), RFC 3339 times
(:func:`format_timestamp`), and content from a protocol without intents fitted
to an actor's handlers (:func:`fit_to_intent`).

Codecs are pure, and so is this module: no I/O, no clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel, ValidationError as PydanticValidationError

from actorbus.codecs.envelope import EMPTY_META, Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    DecodeError,
    EncodeError,
    MessageTooLargeError,
    NoRespondersError,
    error_for_code,
)
from actorbus.codecs.wire import DEFAULT_LIMITS, Encoding, SizeLimits, check_depth, too_deep

INTENT_ERROR = "$error"  # the bus's error-reply intent (actorbus.actors.messages)

#: Every envelope field as a dotted path; codecs that carry everything say so.
ENVELOPE_FIELDS: frozenset[str] = frozenset(
    {
        "id",
        "ts",
        "src",
        "dst",
        "intent",
        "content",
        *(f"context.{name}" for name in EnvelopeContext.model_fields),
        *(f"meta.{name}" for name in EnvelopeMeta.model_fields),
    }
)
#: Every envelope field but ``meta.protocol_hint``: what a codec carries when its
#: decode sets the hint to its own protocol instead of reading one.
ENVELOPE_FIELDS_BUT_HINT: frozenset[str] = ENVELOPE_FIELDS - {"meta.protocol_hint"}


def content_intent(content: Any) -> str:
    """The intent a native message without one gets, by what its content is.

    The same generic intents actors use for plain values (``text``, ``dict``,
    ``bytes``, ``data``, ``$none``), so an actor's catch-all handler for text or
    dicts receives protocol traffic without any mapping table.
    """
    if isinstance(content, str):
        return "text"
    if isinstance(content, dict):
        return "dict"
    if isinstance(content, bytes):
        return "bytes"
    if content is None:
        return "$none"
    return "data"


# Attributes that the structured error classes set in __init__, so a rebuilt one
# (which skips __init__) still answers them.
_NEUTRAL_ATTRS: dict[type[ActorBusError], dict[str, Any]] = {
    AskTimeoutError: {"address": "", "intent": "", "timeout": 0.0},
    NoRespondersError: {"address": "", "intent": ""},
    MessageTooLargeError: {"what": "", "size": 0, "limit": 0},
}


def rebuild_error(code: str, message: str, remote_type: str | None = None) -> ActorBusError:
    """The typed error for an actorbus code, with exactly ``message`` as its text.

    ``errors.error_from_wire`` prefixes the sender's address, which an edge does
    not have; unknown codes become a :class:`RemoteError` naming ``remote_type``.
    Unlike :func:`~actorbus.codecs.errors.error_for_code`, the structured errors
    (timeouts, missing responders, size limits) get neutral values for the
    attributes their ``__init__`` would set.
    """
    err = error_for_code(code, message, remote_type or None)
    neutral = _NEUTRAL_ATTRS.get(type(err))
    if neutral:
        for name, value in neutral.items():
            setattr(err, name, value)
    return err


def error_envelope(
    err: ActorBusError, *, src: str = "", dst: str = "", parent_id: str | None = None
) -> Envelope:
    """An ``$error`` envelope for a native error, as the bus sends error replies
    (``ts`` 0: a codec reads no clock)."""
    env = Envelope(src=src, dst=dst, ts=0, intent=INTENT_ERROR, content=err.to_wire())
    if parent_id is not None:
        env.context = EnvelopeContext(parent_id=parent_id)
    return env


def envelope_error(env: Envelope) -> ActorBusError:
    """The typed error an ``$error`` envelope stands for."""
    body = env.content if isinstance(env.content, dict) else {}
    return rebuild_error(
        str(body.get("code", "E_HANDLER")),
        str(body.get("message", env.content)),
        str(body.get("type", "Exception")),
    )


def json_text(value: Any) -> str:
    """Compact JSON (msgspec: about ten times faster than the stdlib here)."""
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"content is not JSON data: {exc}") from exc


def read_json(
    body: bytes | str, what: str = "the body", limits: SizeLimits = DEFAULT_LIMITS
) -> Any:
    """JSON off the wire, bounded: the one reader every edge uses. A DecodeError
    (never a UnicodeDecodeError or RecursionError) for bytes that are not UTF-8 or
    not JSON, and for maps/lists nested deeper than ``limits.max_depth``."""
    try:
        data = msgspec.json.decode(body)
    except RecursionError:
        raise too_deep(limits) from None
    except (msgspec.DecodeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise DecodeError(f"{what} is not valid JSON: {exc}") from None
    check_depth(body if isinstance(body, bytes) else body.encode(), data, Encoding.JSON, limits)
    return data


def json_value(text: str | bytes, what: str) -> Any:
    """Parsed JSON, or a DecodeError saying which part of the message was bad."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, ValueError) as exc:
        raise DecodeError(f"{what} is not valid JSON: {exc}") from exc


_T = TypeVar("_T")


def convert(obj: Any, model: type[_T], what: str) -> _T:
    """``obj`` (parsed JSON) as ``model``, or a DecodeError naming the bad field."""
    if not isinstance(obj, dict):
        raise DecodeError(f"{what} is a JSON object, not {type(obj).__name__}")
    try:
        return msgspec.convert(obj, model)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"not a valid {what}: {exc}") from exc


# -- timestamps --------------------------------------------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def format_timestamp(ts_ms: int) -> str:
    """Unix milliseconds as RFC 3339 / ISO 8601 UTC (``2026-01-27T14:30:00.250Z``;
    no fraction at .000)."""
    try:
        t = EPOCH + timedelta(milliseconds=ts_ms)
    except OverflowError as exc:
        raise EncodeError(f"timestamp {ts_ms} ms is outside the years 1..9999") from exc
    base = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    ms = t.microsecond // 1000
    return f"{base}.{ms:03d}Z" if ms else f"{base}Z"


# -- envelope <-> plain data -------------------------------------------------------------


def build_envelope(data: Mapping[str, Any], what: str) -> Envelope:
    """Validate envelope data; a bad field is the peer's fault, so a DecodeError."""
    try:
        return Envelope.model_validate(data)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DecodeError(f"{what}: envelope field {where!r}: {first['msg']}") from exc


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    return {
        name: field.get_default(call_default_factory=True, validated_data={})
        for name, field in model.model_fields.items()
    }


_CONTEXT_DEFAULTS = _defaults(EnvelopeContext)
_META_DEFAULTS = _defaults(EnvelopeMeta)


def _changed(model: BaseModel, defaults: dict[str, Any]) -> dict[str, Any]:
    """The fields set to something else than their default (only set fields can be;
    a model's extra fields, such as another protocol's facts in ``meta``, always are)."""
    out = {}
    for name in model.model_fields_set:
        value = getattr(model, name)
        if name not in defaults or value != defaults[name]:
            out[name] = value
    return out


def meta_builder(protocol: str) -> Callable[[dict[str, Any]], EnvelopeMeta]:
    """``meta(data)``: the meta model for ``data``, for a codec whose decode sets the
    hint to ``protocol``; when the hint is all there is, one shared (frozen) instance."""
    hint_only = EnvelopeMeta(protocol_hint=protocol)

    def meta(data: dict[str, Any]) -> EnvelopeMeta:
        if len(data) == 1 and data.get("protocol_hint") == protocol:
            return hint_only
        return EnvelopeMeta.model_validate(data)

    return meta


def extension_context(context: EnvelopeContext, skip: Collection[str] = ()) -> dict[str, Any]:
    """The context fields that are not defaults, for a protocol's extension slot;
    ``skip`` names (as ``context.<field>``) those the protocol's own fields carry."""
    if not context.model_fields_set:
        return {}
    dumped = context.model_dump(exclude_defaults=True)
    if not skip:
        return dumped
    return {k: v for k, v in dumped.items() if f"context.{k}" not in skip}


def add_extension(
    ext: dict[str, Any],
    env: Envelope,
    protocol: str,
    native: Collection[str],
    skip: Collection[str] = (),
) -> None:
    """Put into ``ext`` (a protocol's extension slot) the envelope's ``context``
    and ``meta`` fields that are not defaults, as :func:`extension_context` and
    :func:`extension_meta` select them; nothing when all are defaults."""
    ctx = extension_context(env.context, skip)
    if ctx:
        ext["context"] = ctx
    rest = extension_meta(env.meta, protocol, native)
    if rest:
        ext["meta"] = rest


def extension_meta(meta: EnvelopeMeta, protocol: str, native: Collection[str]) -> dict[str, Any]:
    """The meta fields and extras that are not defaults, for a protocol's extension
    slot: without the ``native`` keys (carried in the protocol's own fields) and
    without a hint naming ``protocol`` itself (its decode sets that one)."""
    if meta is EMPTY_META or not (meta.model_fields_set or meta.model_extra):
        return {}
    return {
        k: v
        for k, v in meta.model_dump(exclude_defaults=True).items()
        if k not in native and not (k == "protocol_hint" and v == protocol)
    }


def envelope_fields(env: Envelope) -> dict[str, Any]:
    """The envelope as plain data without ``content``, defaults left out.

    What ``Envelope.to_dict`` gives, built directly: this runs for every message
    a codec encodes, and model_dump costs several times more.
    """
    out: dict[str, Any] = {
        "id": env.id,
        "ts": env.ts,
        "src": env.src,
        "dst": env.dst,
        "intent": env.intent,
    }
    context = _changed(env.context, _CONTEXT_DEFAULTS)
    if context:
        out["context"] = context
    if env.meta is not EMPTY_META:
        meta = _changed(env.meta, _META_DEFAULTS)
        meta.update(env.meta.model_extra or {})
        if meta:
            out["meta"] = meta
    return out


def fit_to_intent(intents: Mapping[str, Any], intent: str, content: Any) -> tuple[str, Any]:
    """The intent to call an actor with, and ``content`` shaped for its handler.

    ``intents`` maps each intent the actor handles to the JSON schema of its
    message (as the registry lists them). A protocol's intent is often generic
    (``text``): when the actor has no such handler but exactly one handler, that
    one takes it. Text for a handler taking a model is parsed as a JSON object,
    or becomes the model's only required string field, so ``"hi"`` reaches
    ``Question(text: str)`` as ``{"text": "hi"}``.
    """
    if intent not in intents and len(intents) == 1:
        intent = next(iter(intents))
    schema = intents.get(intent)
    if isinstance(content, str) and isinstance(schema, dict):
        with contextlib.suppress(DecodeError):
            parsed = read_json(content, "the text")
            if isinstance(parsed, dict):
                return intent, parsed
        required = schema.get("required") or []
        props = schema.get("properties") or {}
        if len(required) == 1 and (props.get(required[0]) or {}).get("type") == "string":
            return intent, {required[0]: content}
    return intent, content
