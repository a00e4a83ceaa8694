"""AgentAnycast: the A2A data model over P2P, its ``A2AEnvelope`` in proto3 JSON form.

AgentAnycast sends protobuf ``A2AEnvelope`` messages (package ``agentanycast.v1``)
between peers; this codec speaks their canonical proto3 JSON form: lowerCamelCase
field names (snake_case accepted on input, as proto3 JSON parsers must), enum
values by name (``ENVELOPE_TYPE_SEND_TASK``; the short ``SEND_TASK`` and the
numbers are accepted), timestamps as RFC 3339 strings, bytes as base64, fields
at their default left out, unknown fields ignored::

    {"envelopeId": "...", "type": "ENVELOPE_TYPE_SEND_TASK",
     "timestamp": "2026-01-27T14:30:00Z",
     "sendTask": {"taskId": "...", "contextId": "...", "targetSkillId": "...",
                  "message": {"messageId": "...", "role": "MESSAGE_ROLE_USER",
                              "parts": [{"textPart": {"text": "hi"}}]}},
     "traceParent": "00-<trace id>-<span id>-01"}

The eleven envelope types: SEND_TASK, TASK_STATUS_UPDATE, TASK_COMPLETE,
TASK_FAIL, TASK_CANCEL, GET_TASK, GET_TASK_RESPONSE, ACK, STREAM_START,
STREAM_CHUNK, STREAM_END.

Mapping (envelope <-> A2AEnvelope):

======================  ===========================================================
envelope                AgentAnycast
======================  ===========================================================
id / ts                 envelopeId / timestamp (and the message's messageId)
dst                     sendTask.targetSkillId: skill anycast addressing (a
                        ``peer:`` or URL address rides the extension instead)
context.session_id      sendTask.contextId (the conversation thread)
context.parent_id       taskId of replies (TASK_COMPLETE, TASK_FAIL, control frames)
context.trace_id        traceParent (W3C ``00-trace-span-01``) when it is 32 hex
content                 message / artifact parts: str -> textPart, bytes ->
                        rawPart, dict -> dataPart, None -> no part, other JSON
                        values -> dataPart ``{"value": ...}``
src, intent, other      the ``actorbus`` key of the first part's ``metadata`` (a
context and meta        ``map<string,string>``, the protocol's extension slot),
                        as a compact JSON string, only when not derivable
meta.anycast (extra)    what AgentAnycast has and the envelope does not (type,
                        taskId, artifact ids, trace state...): decode fills it,
                        encode reads it
======================  ===========================================================

Which frame :func:`encode` writes: ``$error`` -> TASK_FAIL; the control intents
(``$status``, ``$cancel``, ``$get_task``, ``$task``, ``$ack``, ``$stream_start``,
``$stream_chunk``, ``$end``) -> their frame, with the envelope's content as the
payload (what :func:`decode` produces for them); an envelope decoded from a
TASK_COMPLETE -> TASK_COMPLETE; anything else -> SEND_TASK. :func:`reply_to`
answers a SEND_TASK. Decoding a frame without the extension sets
``meta.protocol_hint`` to ``"anycast"``.

Errors: AgentAnycast has no error codes, only ``TaskFailPayload.error_message``
and ``ErrorDetail {code, message, metadata}``; :func:`error_to` puts the
taxonomy code in an ErrorDetail carried as a data part of the failure's
message, so actorbus peers get the exact error back and others read
``errorMessage``.

:class:`AnycastTasks` is the pure task and stream state machine.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import msgspec
from pydantic import ValidationError as PydanticValidationError

from actorbus.codecs.common import (
    ENVELOPE_FIELDS_BUT_HINT,
    EPOCH,
    content_intent,
    extension_context,
    extension_meta,
    meta_builder,
)
from actorbus.codecs.common import format_timestamp as format_timestamp
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    EncodeError,
    ProtocolError,
    RemoteError,
    StreamCancelledError,
    UnsupportedError,
    error_for_code,
)

PROTOCOL = "anycast"
EXTENSION_KEY = "actorbus"
FACTS_KEY = "anycast"
A2A_PROTOCOL_ID = "/agentanycast/a2a/1.0"

ENVELOPE_TYPES = (
    "SEND_TASK",
    "TASK_STATUS_UPDATE",
    "TASK_COMPLETE",
    "TASK_FAIL",
    "TASK_CANCEL",
    "GET_TASK",
    "GET_TASK_RESPONSE",
    "ACK",
    "STREAM_START",
    "STREAM_CHUNK",
    "STREAM_END",
)
TASK_STATES = (
    "SUBMITTED",
    "WORKING",
    "INPUT_REQUIRED",
    "COMPLETED",
    "FAILED",
    "CANCELED",
    "REJECTED",
)
STREAM_END_REASONS = ("COMPLETE", "CANCELED", "ERROR")

#: Control intents <-> the frames they stand for (payload = envelope content).
CONTROL_INTENTS: dict[str, str] = {
    "$status": "TASK_STATUS_UPDATE",
    "$cancel": "TASK_CANCEL",
    "$get_task": "GET_TASK",
    "$task": "GET_TASK_RESPONSE",
    "$ack": "ACK",
    "$stream_start": "STREAM_START",
    "$stream_chunk": "STREAM_CHUNK",
    "$end": "STREAM_END",
}
_INTENT_OF_TYPE = {v: k for k, v in CONTROL_INTENTS.items()} | {"TASK_FAIL": "$error"}
_INTENT_ERROR = "$error"
DEDUP_WINDOW = 1024  # the reference's LRU of envelope ids

# -- the proto3 JSON schema, as field tables ------------------------------------------------

_ENUMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "type": ("ENVELOPE_TYPE_", ENVELOPE_TYPES),
    "status": ("TASK_STATUS_", TASK_STATES),
    "role": ("MESSAGE_ROLE_", ("USER", "AGENT")),
    "reason": ("STREAM_END_REASON_", STREAM_END_REASONS),
}

Spec = dict[str, Any]  # camelCase field -> kind: "str", "int", "bool", "bytes", "ts",
# "map", "struct", ("enum", name), ("msg", Spec), ("list", Spec)

_TEXT: Spec = {"text": "str"}
_DATA: Spec = {"data": "struct"}
_URL: Spec = {"url": "str", "filename": "str"}
_RAW: Spec = {"data": "bytes", "filename": "str"}
_PART: Spec = {
    "textPart": ("msg", _TEXT),
    "dataPart": ("msg", _DATA),
    "urlPart": ("msg", _URL),
    "rawPart": ("msg", _RAW),
    "mediaType": "str",
    "metadata": "map",
}
_PART_KINDS = ("textPart", "dataPart", "urlPart", "rawPart")
_MESSAGE: Spec = {
    "messageId": "str",
    "role": ("enum", "role"),
    "parts": ("list", _PART),
    "createdAt": "ts",
}
_ARTIFACT: Spec = {"artifactId": "str", "name": "str", "parts": ("list", _PART)}
_TASK: Spec = {
    "taskId": "str",
    "contextId": "str",
    "status": ("enum", "status"),
    "messages": ("list", _MESSAGE),
    "artifacts": ("list", _ARTIFACT),
    "createdAt": "ts",
    "updatedAt": "ts",
    "targetSkillId": "str",
    "originatorPeerId": "str",
}
_PAYLOADS: dict[str, tuple[str, Spec]] = {
    "SEND_TASK": (
        "sendTask",
        {
            "taskId": "str",
            "contextId": "str",
            "message": ("msg", _MESSAGE),
            "targetSkillId": "str",
        },
    ),
    "TASK_STATUS_UPDATE": (
        "taskStatusUpdate",
        {"taskId": "str", "status": ("enum", "status"), "message": ("msg", _MESSAGE)},
    ),
    "TASK_COMPLETE": (
        "taskComplete",
        {"taskId": "str", "artifacts": ("list", _ARTIFACT), "message": ("msg", _MESSAGE)},
    ),
    "TASK_FAIL": (
        "taskFail",
        {"taskId": "str", "errorMessage": "str", "message": ("msg", _MESSAGE)},
    ),
    "TASK_CANCEL": ("taskCancel", {"taskId": "str"}),
    "GET_TASK": ("getTask", {"taskId": "str"}),
    "GET_TASK_RESPONSE": ("getTaskResponse", {"task": ("msg", _TASK)}),
    "ACK": ("ack", {"acknowledgedEnvelopeId": "str"}),
    "STREAM_START": (
        "streamStart",
        {
            "taskId": "str",
            "artifactId": "str",
            "artifactName": "str",
            "mediaType": "str",
            "totalChunks": "int",
            "metadata": "map",
        },
    ),
    "STREAM_CHUNK": (
        "streamChunk",
        {
            "taskId": "str",
            "artifactId": "str",
            "sequence": "int",
            "data": "bytes",
            "isLast": "bool",
        },
    ),
    "STREAM_END": (
        "streamEnd",
        {"taskId": "str", "artifactId": "str", "reason": ("enum", "reason")},
    ),
}
_ENVELOPE: Spec = {
    "envelopeId": "str",
    "type": ("enum", "type"),
    "timestamp": "ts_ms",
    **{name: ("msg", spec) for name, spec in _PAYLOADS.values()},
    "traceParent": "str",
    "traceState": "str",
}
_PAYLOAD_FIELDS = tuple(name for name, _ in _PAYLOADS.values())


def _snake(camel: str) -> str:
    """Proto field name for a JSON name (``artifactId`` -> ``artifact_id``)."""
    return re.sub(r"([A-Z])", r"_\1", camel).lower()


_LOOKUPS: dict[int, dict[str, tuple[str, Any]]] = {}


def _lookup(spec: Spec) -> dict[str, tuple[str, Any]]:
    """Both JSON spellings of every field of ``spec`` -> (camelCase name, kind)."""
    found = _LOOKUPS.get(id(spec))
    if found is None:
        found = {}
        for camel, kind in spec.items():
            found[camel] = found[_snake(camel)] = (camel, kind)
        _LOOKUPS[id(spec)] = found
    return found


_INT32 = (-(2**31), 2**31 - 1)


def _fail(where: str, what: str) -> DecodeError:
    return DecodeError(f"AgentAnycast {where} {what}")


def _norm(obj: Any, spec: Spec, where: str) -> dict[str, Any]:
    """A proto3 JSON object read by its field table: camelCase keys, typed values;
    unknown fields are ignored and ``null`` means "default". One loop with the
    kinds inline: this runs for every nested message of every frame."""
    if type(obj) is not dict:
        raise _fail(where, "must be a JSON object")
    lookup = _lookup(spec)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        known = lookup.get(key)
        if known is None or value is None:
            continue
        camel, kind = known
        if kind == "str":
            if type(value) is not str:
                raise _fail(f"{where}.{camel}", "must be a string")
            out[camel] = value
        elif type(kind) is tuple:
            out[camel] = _norm_composite(value, kind, f"{where}.{camel}")
        else:
            out[camel] = _SCALARS[kind](value, f"{where}.{camel}")
    return out


def _norm_composite(value: Any, kind: tuple[str, Any], where: str) -> Any:
    tag, arg = kind
    if tag == "msg":
        return _norm(value, arg, where)
    if tag == "list":
        if type(value) is not list:
            raise _fail(where, "must be a JSON array")
        return [_norm(item, arg, f"{where}[{i}]") for i, item in enumerate(value)]
    return _enum_name(value, arg, where)


def _enum_name(value: Any, enum: str, where: str) -> str:
    prefix, names = _ENUMS[enum]
    if type(value) is int:
        if 0 < value <= len(names):
            return names[value - 1]
        if value == 0:
            return "UNSPECIFIED"
    elif type(value) is str:
        short = value.removeprefix(prefix)
        if short in names or short == "UNSPECIFIED":
            return short
    raise _fail(where, f"is not a {prefix.rstrip('_')} value: {value!r:.60}")


def _int32(value: Any, where: str) -> int:
    if type(value) is str and re.fullmatch(r"-?\d{1,10}", value):
        value = int(value)  # proto3 JSON allows int32 as a string
    if type(value) is not int or not _INT32[0] <= value <= _INT32[1]:
        raise _fail(where, "must be an int32")
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise _fail(where, "must be true or false")
    return value


def _bytes(value: Any, where: str) -> bytes:
    if type(value) is not str:
        raise _fail(where, "must be a base64 string")
    try:  # proto3 JSON accepts standard and URL-safe base64, padded or not
        text = value.replace("-", "+").replace("_", "/").rstrip("=")
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _fail(where, f"is not base64: {exc}") from exc


def _timestamp(value: Any, where: str) -> str:
    if type(value) is not str:
        raise _fail(where, "must be an RFC 3339 string")
    parse_timestamp(value, where)
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    if type(value) is not dict or not all(type(v) is str for v in value.values()):
        raise _fail(where, "must be an object of strings")
    return value


def _struct(value: Any, where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _fail(where, "must be a JSON object (google.protobuf.Struct)")
    return value


def _timestamp_ms(value: Any, where: str) -> int:
    if type(value) is not str:
        raise _fail(where, "must be an RFC 3339 string")
    return parse_timestamp(value, where)


_SCALARS = {
    "ts_ms": _timestamp_ms,
    "int": _int32,
    "bool": _bool,
    "bytes": _bytes,
    "ts": _timestamp,
    "map": _string_map,
    "struct": _struct,
}


def _emit(norm: Mapping[str, Any], spec: Spec) -> dict[str, Any]:
    """A normalized object back to canonical proto3 JSON (full enum names, base64)."""
    out: dict[str, Any] = {}
    for key, value in norm.items():
        kind = spec.get(key)
        if kind is None:
            raise EncodeError(f"AgentAnycast has no field {key!r} here")
        out[key] = _emit_value(value, kind, key)
    return out


def _emit_value(value: Any, kind: Any, key: str) -> Any:
    if isinstance(kind, tuple):
        tag, arg = kind
        if tag == "msg":
            return _emit(_mapping(value, key), arg)
        if tag == "list":
            return [_emit(_mapping(v, key), arg) for v in _sequence(value, key)]
        return _enum_full(value, arg)
    if kind == "bytes":
        if not isinstance(value, bytes | bytearray | memoryview):
            raise EncodeError(f"AgentAnycast field {key!r} needs bytes")
        return base64.b64encode(value).decode("ascii")
    return value


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise EncodeError(f"AgentAnycast field {key!r} needs an object")
    return value


def _sequence(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise EncodeError(f"AgentAnycast field {key!r} needs a list")
    return list(value)


def _enum_full(value: Any, enum: str) -> str:
    prefix, names = _ENUMS[enum]
    if value not in names and value != "UNSPECIFIED":
        raise EncodeError(f"{value!r} is not a {prefix.rstrip('_')} value")
    return f"{prefix}{value}"


# -- timestamps -----------------------------------------------------------------------------
#
# format_timestamp (imported above) is the shared one in actorbus.codecs.common.


def parse_timestamp(text: str, where: str = "timestamp") -> int:
    """RFC 3339 (nanoseconds allowed) -> Unix milliseconds."""
    try:
        t = datetime.fromisoformat(text)  # 3.11 reads nanoseconds (and drops the last 3)
    except (ValueError, TypeError) as exc:
        raise _fail(where, f"is not RFC 3339: {text!r:.60}") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    delta = t - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


# -- frames -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnycastFrame:
    """One A2AEnvelope, checked and normalized (camelCase keys, short enum names,
    bytes decoded). ``payload`` is the oneof payload for ``type``."""

    envelope_id: str
    type: str
    ts_ms: int | None
    payload: dict[str, Any]
    trace_parent: str | None = None
    trace_state: str | None = None

    @property
    def task_id(self) -> str:
        if self.type == "GET_TASK_RESPONSE":
            return str(self.payload.get("task", {}).get("taskId", ""))
        return str(self.payload.get("taskId", ""))


def parse_frame(obj: Any) -> AnycastFrame:
    """An A2AEnvelope in JSON form, checked: exactly one payload, matching ``type``."""
    env = _norm(obj, _ENVELOPE, "envelope")
    present = [name for name in _PAYLOAD_FIELDS if name in env]
    if len(present) != 1:
        raise _fail("envelope", f"must carry exactly one payload, not {present or 'none'}")
    kind = env.get("type")
    payload_field, _ = _PAYLOADS.get(kind or "", ("", {}))
    if payload_field != present[0]:
        raise _fail("envelope", f"of type {kind} cannot carry {present[0]}")
    assert kind is not None
    return AnycastFrame(
        envelope_id=env.get("envelopeId", ""),
        type=kind,
        ts_ms=env.get("timestamp"),
        payload=env[present[0]],
        trace_parent=env.get("traceParent"),
        trace_state=env.get("traceState"),
    )


def frame(
    kind: str,
    payload: Mapping[str, Any],
    *,
    envelope_id: str,
    ts_ms: int | None = None,
    trace_parent: str | None = None,
    trace_state: str | None = None,
) -> dict[str, Any]:
    """Any A2AEnvelope in JSON form, from a normalized payload (short enum names, bytes)."""
    if kind not in _PAYLOADS:
        raise EncodeError(f"{kind!r} is not an AgentAnycast envelope type")
    name, spec = _PAYLOADS[kind]
    out: dict[str, Any] = {"envelopeId": envelope_id, "type": f"ENVELOPE_TYPE_{kind}"}
    if ts_ms is not None:
        out["timestamp"] = format_timestamp(ts_ms)
    out[name] = _emit(payload, spec)
    if trace_parent:
        out["traceParent"] = trace_parent
    if trace_state:
        out["traceState"] = trace_state
    return out


def status_update(
    task_id: str, status: str, *, envelope_id: str, ts_ms: int | None = None
) -> dict[str, Any]:
    """A TASK_STATUS_UPDATE frame (``status`` by short name: ``WORKING`` ...)."""
    return frame(
        "TASK_STATUS_UPDATE",
        {"taskId": task_id, "status": status},
        envelope_id=envelope_id,
        ts_ms=ts_ms,
    )


def ack(acknowledged: str, *, envelope_id: str, ts_ms: int | None = None) -> dict[str, Any]:
    """An ACK for the envelope ``acknowledged``."""
    return frame(
        "ACK", {"acknowledgedEnvelopeId": acknowledged}, envelope_id=envelope_id, ts_ms=ts_ms
    )


def stream_start(
    task_id: str,
    artifact_id: str,
    *,
    envelope_id: str,
    ts_ms: int | None = None,
    artifact_name: str = "",
    media_type: str = "",
    total_chunks: int = 0,
    metadata: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """STREAM_START (``total_chunks`` 0 = open-ended)."""
    payload: dict[str, Any] = {"taskId": task_id, "artifactId": artifact_id}
    for key, value in (
        ("artifactName", artifact_name),
        ("mediaType", media_type),
        ("totalChunks", total_chunks),
        ("metadata", dict(metadata or {})),
    ):
        if value:
            payload[key] = value
    return frame("STREAM_START", payload, envelope_id=envelope_id, ts_ms=ts_ms)


def stream_chunk(
    task_id: str,
    artifact_id: str,
    sequence: int,
    data: bytes,
    *,
    envelope_id: str,
    is_last: bool = False,
    ts_ms: int | None = None,
) -> dict[str, Any]:
    """STREAM_CHUNK number ``sequence`` (0-indexed)."""
    payload: dict[str, Any] = {"taskId": task_id, "artifactId": artifact_id, "data": data}
    if sequence:
        payload["sequence"] = sequence
    if is_last:
        payload["isLast"] = True
    return frame("STREAM_CHUNK", payload, envelope_id=envelope_id, ts_ms=ts_ms)


def stream_end(
    task_id: str,
    artifact_id: str,
    reason: str = "COMPLETE",
    *,
    envelope_id: str,
    ts_ms: int | None = None,
) -> dict[str, Any]:
    """STREAM_END with ``reason`` COMPLETE, CANCELED or ERROR."""
    payload = {"taskId": task_id, "artifactId": artifact_id, "reason": reason}
    return frame("STREAM_END", payload, envelope_id=envelope_id, ts_ms=ts_ms)


def send_task_request(env: Envelope) -> dict[str, Any]:
    """The node's gRPC ``SendTaskRequest`` (JSON) for an envelope: the oneof target is
    ``peerId`` for a ``peer:<id>`` dst, ``url`` for an http(s) dst, else ``skillId``
    (anycast by capability)."""
    target_kind, target = address_of(env.dst)
    no_dst = env.model_copy(update={"dst": ""})  # the target field says it
    message = _send_task(no_dst, _facts(env.meta))["sendTask"]["message"]
    return {target_kind: target, "message": message}


def address_of(dst: str) -> tuple[str, str]:
    """Which SendTaskRequest target a dst names: (``peerId``|``url``|``skillId``, value)."""
    if dst.startswith("peer:"):
        return "peerId", dst[5:]
    if dst.startswith(("http://", "https://")):
        return "url", dst
    return "skillId", dst


# -- content <-> parts -------------------------------------------------------------------------


def _parts(content: Any, ext: dict[str, Any]) -> list[dict[str, Any]]:
    """Parts (JSON form) for a content value; a value without a part type is marked."""
    if isinstance(content, str):
        return [{"textPart": {"text": content}}]
    if isinstance(content, bytes | bytearray | memoryview):
        return [{"rawPart": {"data": base64.b64encode(content).decode("ascii")}}]
    if isinstance(content, dict):
        return [{"dataPart": {"data": content}, "mediaType": "application/json"}]
    if content is None:
        return []
    ext["content"] = "value"
    return [{"dataPart": {"data": {"value": content}}, "mediaType": "application/json"}]


def _part_value(part: Mapping[str, Any]) -> Any:
    if "textPart" in part:
        return part["textPart"].get("text", "")
    if "dataPart" in part:
        return part["dataPart"].get("data", {})
    if "rawPart" in part:
        return part["rawPart"].get("data", b"")
    if "urlPart" in part:
        return dict(part["urlPart"])
    return None


def _content_of(parts: list[dict[str, Any]], form: Any) -> Any:
    if form == "none" or not parts:
        return None
    if form == "value":
        data = _part_value(parts[0])
        if not isinstance(data, dict) or "value" not in data:
            raise DecodeError("AgentAnycast part marked as a wrapped value has no 'value'")
        return data["value"]
    if len(parts) == 1:
        return _part_value(parts[0])
    return [_part_value(p) for p in parts]


def _attach(parts: list[dict[str, Any]], ext: dict[str, Any]) -> list[dict[str, Any]]:
    """Put the extension in the first part's metadata (adding an empty part if none)."""
    if not ext:
        return parts
    if not parts:
        ext["content"] = "none"
        parts = [{"dataPart": {"data": {}}}]
    first = dict(parts[0])
    first["metadata"] = {**first.get("metadata", {}), EXTENSION_KEY: _dump_ext(ext)}
    return [first, *parts[1:]]


def _dump_ext(ext: Mapping[str, Any]) -> str:
    try:
        return msgspec.json.encode(ext).decode("utf-8")
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"envelope fields cannot be written as JSON: {exc}") from exc


def _load_ext(parts: list[dict[str, Any]]) -> dict[str, Any]:
    raw = parts[0].get("metadata", {}).get(EXTENSION_KEY) if parts else None
    if raw is None:
        return {}
    try:
        ext = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"AgentAnycast part metadata 'actorbus' is not JSON: {exc}") from exc
    if not isinstance(ext, dict):
        raise DecodeError("AgentAnycast part metadata 'actorbus' is not a JSON object")
    return ext


# -- envelope -> AgentAnycast ---------------------------------------------------------------------


def encode(env: Envelope) -> dict[str, Any]:
    """An envelope as an A2AEnvelope (JSON form); the module docstring says which type."""
    facts = _facts(env.meta)
    if env.intent == _INTENT_ERROR:
        return _task_fail(env, facts, _task_id(env, facts, env.context.parent_id or ""))
    control = CONTROL_INTENTS.get(env.intent)
    if control is not None:
        return _control(env, control, facts)
    if facts.get("type") == "TASK_COMPLETE":
        return _task_complete(env, facts, _task_id(env, facts, env.context.parent_id or ""))
    return _send_task(env, facts)


def reply_to(request: Mapping[str, Any] | AnycastFrame, env: Envelope) -> dict[str, Any]:
    """The TASK_COMPLETE (or TASK_FAIL, for ``$error``) answering a SEND_TASK frame."""
    req = request if isinstance(request, AnycastFrame) else parse_frame(request)
    if req.type != "SEND_TASK":
        raise EncodeError(f"reply_to answers a SEND_TASK, not a {req.type}")
    facts = _facts(env.meta)
    if env.intent == _INTENT_ERROR:
        return _task_fail(env, facts, req.task_id)
    return _task_complete(env, facts, req.task_id)


def _facts(meta: EnvelopeMeta) -> dict[str, Any]:
    extra = meta.model_extra
    facts = extra.get(FACTS_KEY) if extra else None
    return facts if isinstance(facts, dict) else {}


def _task_id(env: Envelope, facts: Mapping[str, Any], default: str) -> str:
    task = facts.get("task_id", default)
    return task if isinstance(task, str) else default


def _head(env: Envelope, kind: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "envelopeId": env.id,
        "type": f"ENVELOPE_TYPE_{kind}",
        "timestamp": format_timestamp(env.ts),
    }
    trace = _trace_parent(env, facts)
    if trace:
        out["traceParent"] = trace
    if isinstance(facts.get("trace_state"), str):
        out["traceState"] = facts["trace_state"]
    return out


_HEX32 = re.compile(r"[0-9a-f]{32}")


def _w3c_trace(trace_id: str | None) -> bool:
    """Whether a trace id can ride a W3C traceparent (32 lowercase hex, not all zero)."""
    return trace_id is not None and bool(_HEX32.fullmatch(trace_id)) and trace_id != "0" * 32


def _derived_trace_parent(trace_id: str, envelope_id: str) -> str:
    span = hashlib.blake2b(envelope_id.encode(), digest_size=8).hexdigest()
    return f"00-{trace_id}-{span}-01"


def _trace_parent(env: Envelope, facts: Mapping[str, Any]) -> str | None:
    """W3C traceparent for the envelope's trace id: the one received when it still
    names this trace, else one with a span id derived from the envelope id."""
    trace_id = env.context.trace_id
    if trace_id is None or not _w3c_trace(trace_id):
        return None
    received = facts.get("trace_parent")
    if isinstance(received, str) and received[3:35] == trace_id:
        return received
    return _derived_trace_parent(trace_id, env.id)


def _send_task(env: Envelope, facts: Mapping[str, Any]) -> dict[str, Any]:
    ext: dict[str, Any] = {}
    target_kind, _ = address_of(env.dst)
    payload: dict[str, Any] = {"taskId": _task_id(env, facts, env.id)}
    if env.context.session_id:
        payload["contextId"] = env.context.session_id
    parts = _parts(env.content, ext)
    _fill_ext(env, ext, facts, skip=_derived(env, "SEND_TASK", target_kind))
    payload["message"] = _message(env, facts, "USER", _attach(parts, ext))
    if env.dst and target_kind == "skillId":
        payload["targetSkillId"] = env.dst
    return {**_head(env, "SEND_TASK", facts), "sendTask": payload}


def _task_complete(env: Envelope, facts: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    ext: dict[str, Any] = {}
    parts = _parts(env.content, ext)
    _fill_ext(env, ext, facts, skip=_derived(env, "TASK_COMPLETE", "", task_id))
    artifact: dict[str, Any] = {
        "artifactId": _fact_str(facts, "artifact_id", env.id),
        "parts": _attach(parts, ext),
    }
    if isinstance(facts.get("artifact_name"), str):
        artifact["name"] = facts["artifact_name"]
    payload: dict[str, Any] = {"artifacts": [artifact, *_more(facts, "more_artifacts")]}
    if task_id:
        payload["taskId"] = task_id
    if isinstance(facts.get("message"), dict):
        payload["message"] = _emit(facts["message"], _MESSAGE)
    return {**_head(env, "TASK_COMPLETE", facts), "taskComplete": payload}


def _more(facts: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    extra = facts.get(key)
    return [_emit(a, _ARTIFACT) for a in extra] if isinstance(extra, list) else []


def _task_fail(env: Envelope, facts: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    body = _error_body(env.content)
    ext: dict[str, Any] = {}
    _fill_ext(env, ext, facts, skip=_derived(env, "TASK_FAIL", "", task_id))
    payload: dict[str, Any] = {"errorMessage": str(body.get("message", ""))}
    if not (facts.get("plain") and not ext and body.get("code") == "E_HANDLER"):
        detail = _error_detail(body)
        parts = _attach([{"dataPart": {"data": detail}, "mediaType": "application/json"}], ext)
        payload["message"] = _message(env, facts, "AGENT", parts)
    if task_id:
        payload["taskId"] = task_id
    return {**_head(env, "TASK_FAIL", facts), "taskFail": payload}


def _control(env: Envelope, kind: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    content = env.content
    if content is None:
        task = env.context.parent_id or ""
        content = (
            {"taskId": task} if kind != "STREAM_END" else {"taskId": task, "reason": "COMPLETE"}
        )
    if not isinstance(content, Mapping):
        raise EncodeError(f"a {env.intent} envelope needs its {kind} payload as content")
    name, spec = _PAYLOADS[kind]
    return {**_head(env, kind, facts), name: _emit(content, spec)}


def _message(
    env: Envelope, facts: Mapping[str, Any], role: str, parts: list[dict[str, Any]]
) -> dict[str, Any]:
    recorded = facts.get("message_head")
    head = recorded if isinstance(recorded, dict) else {}
    message: dict[str, Any] = {
        "messageId": head.get("messageId", env.id),
        "role": f"MESSAGE_ROLE_{head.get('role', role)}",
        "parts": parts,
    }
    if isinstance(head.get("createdAt"), str):
        message["createdAt"] = head["createdAt"]
    return message


def _fact_str(facts: Mapping[str, Any], key: str, default: str) -> str:
    value = facts.get(key, default)
    return value if isinstance(value, str) else default


def _derived(env: Envelope, kind: str, target_kind: str, task_id: str = "") -> frozenset[str]:
    """Envelope fields this frame already carries natively (left out of the extension)."""
    skip = {"context.trace_id"} if _w3c_trace(env.context.trace_id) else set()
    if kind == "SEND_TASK":
        if env.context.session_id:  # contextId holds it ("" is left out as a default)
            skip.add("context.session_id")
        if target_kind == "skillId":
            skip.add("dst")
    elif task_id and task_id == env.context.parent_id:
        skip.add("context.parent_id")
    return frozenset(skip)


_META_NATIVE = frozenset({FACTS_KEY})


def _fill_ext(
    env: Envelope, ext: dict[str, Any], facts: Mapping[str, Any], *, skip: frozenset[str]
) -> None:
    """What the envelope has and the frame cannot say: src, dst, intent, context, meta."""
    if env.src:
        ext["src"] = env.src
    if env.dst and "dst" not in skip:
        ext["dst"] = env.dst
    if env.intent not in (_INTENT_ERROR, content_intent(env.content)):
        ext["intent"] = env.intent
    ctx = extension_context(env.context, skip)
    if ctx:
        ext["context"] = ctx
    rest = extension_meta(env.meta, PROTOCOL, _META_NATIVE)
    if rest:
        ext["meta"] = rest


# -- AgentAnycast -> envelope ----------------------------------------------------------------------


def decode(obj: Any) -> Envelope:
    """An A2AEnvelope (JSON form, or an :class:`AnycastFrame`) as an envelope."""
    frm = obj if isinstance(obj, AnycastFrame) else parse_frame(obj)
    facts: dict[str, Any] = {}
    fields: dict[str, Any] = {"id": frm.envelope_id or None, "ts": frm.ts_ms, "dst": ""}
    ext = _DECODERS.get(frm.type, _decode_control)(frm, fields, facts)
    context = {**_trace_context(frm, facts), **fields.pop("context", {})}
    given = ext.get("context", {})
    if not isinstance(given, dict):
        raise DecodeError("AgentAnycast extension 'context' is not an object")
    context.update(given)
    if frm.trace_state:
        facts["trace_state"] = frm.trace_state
    for key in ("src", "dst", "intent"):
        if isinstance(ext.get(key), str):
            fields[key] = ext[key]
    try:
        if context:
            fields["context"] = EnvelopeContext.model_validate(context)
        fields["meta"] = _decode_meta(ext, facts)
        return Envelope.model_validate({k: v for k, v in fields.items() if v is not None})
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DecodeError(
            f"AgentAnycast frame does not make an envelope: {where}: {err['msg']}"
        ) from exc


def _trace_context(frm: AnycastFrame, facts: dict[str, Any]) -> dict[str, Any]:
    parent = frm.trace_parent
    if not parent:
        return {}
    parts = parent.split("-")
    if len(parts) != 4 or not _w3c_trace(parts[1]):
        facts["trace_parent"] = parent  # not one we can read: keep it as it came
        return {}
    if parent != _derived_trace_parent(parts[1], frm.envelope_id):
        facts["trace_parent"] = parent  # someone else's span: send it on unchanged
    return {"trace_id": parts[1]}


def _decode_send_task(
    frm: AnycastFrame, fields: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    p = frm.payload
    message = p.get("message", {})
    parts = message.get("parts", [])
    ext = _load_ext(parts)
    _record_message_head(message, frm.envelope_id, "USER", facts)
    if p.get("taskId", "") != frm.envelope_id:
        facts["task_id"] = p.get("taskId", "")
    content = _content_of(parts, ext.get("content"))
    fields.update(dst=p.get("targetSkillId", ""), content=content)
    fields["intent"] = content_intent(content)
    if p.get("contextId"):
        fields["context"] = {"session_id": p["contextId"]}
    return ext


def _decode_task_complete(
    frm: AnycastFrame, fields: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    p = frm.payload
    facts["type"] = "TASK_COMPLETE"
    artifacts = p.get("artifacts", [])
    first = artifacts[0] if artifacts else {}
    parts = first.get("parts") if first else p.get("message", {}).get("parts", [])
    ext = _load_ext(parts or [])
    if first:
        if first.get("artifactId", "") != frm.envelope_id:
            facts["artifact_id"] = first.get("artifactId", "")
        if "name" in first:
            facts["artifact_name"] = first["name"]
        if "message" in p:
            facts["message"] = p["message"]
    if len(artifacts) > 1:
        facts["more_artifacts"] = artifacts[1:]
    content = _content_of(parts or [], ext.get("content"))
    fields.update(content=content, intent=content_intent(content))
    _task_parent(p.get("taskId", ""), fields)
    return ext


def _decode_task_fail(
    frm: AnycastFrame, fields: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    p = frm.payload
    message = p.get("message", {})
    parts = message.get("parts", [])
    ext = _load_ext(parts)
    _record_message_head(message, frm.envelope_id, "AGENT", facts)
    detail = _part_value(parts[0]) if parts else None
    if "message" not in p:
        facts["plain"] = True  # errorMessage only: answer the same way
    fields.update(intent=_INTENT_ERROR, content=_error_content(detail, p.get("errorMessage", "")))
    _task_parent(p.get("taskId", ""), fields)
    return ext


def _decode_control(
    frm: AnycastFrame, fields: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    fields.update(intent=_INTENT_OF_TYPE[frm.type], content=frm.payload)
    if frm.task_id:
        fields["context"] = {"parent_id": frm.task_id}
    if frm.type == "ACK" and frm.payload.get("acknowledgedEnvelopeId"):
        fields["context"] = {"parent_id": frm.payload["acknowledgedEnvelopeId"]}
    return {}


_DECODERS = {
    "SEND_TASK": _decode_send_task,
    "TASK_COMPLETE": _decode_task_complete,
    "TASK_FAIL": _decode_task_fail,
}


def _task_parent(task_id: str, fields: dict[str, Any]) -> None:
    if task_id:
        fields["context"] = {"parent_id": task_id}


def _record_message_head(
    message: Mapping[str, Any], envelope_id: str, role: str, facts: dict[str, Any]
) -> None:
    head = {k: message[k] for k in ("messageId", "role", "createdAt") if k in message}
    if head.get("messageId") == envelope_id:
        del head["messageId"]
    if head.get("role") == role:
        del head["role"]
    if head:
        facts["message_head"] = head


def _decode_meta(ext: Mapping[str, Any], facts: dict[str, Any]) -> EnvelopeMeta:
    given = ext.get("meta")
    meta: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
    meta.setdefault("protocol_hint", PROTOCOL)
    if facts:
        meta[FACTS_KEY] = facts
    return _meta(meta)


# Every envelope decoded with just the protocol hint shares one meta.
_meta = meta_builder(PROTOCOL)


# -- errors --------------------------------------------------------------------------------------

#: What the SDK's exceptions (TaskFailedError ...) mean in the taxonomy, for foreign
#: ErrorDetail codes written in their style.
NATIVE_CODES: dict[str, str] = {
    "TASK_NOT_FOUND": "E_NOT_FOUND",
    "TASK_TIMEOUT": "E_TIMEOUT",
    "TASK_CANCELED": "E_CANCELLED",
    "TASK_REJECTED": "E_UNSUPPORTED",
    "PEER_NOT_FOUND": "E_NO_RESPONDERS",
    "PEER_DISCONNECTED": "E_CONN",
    "PEER_AUTHENTICATION_FAILED": "E_AUTH",
}


def error_to(err: ActorBusError) -> dict[str, Any]:
    """A ``TaskFailPayload`` (JSON form) for an error: ``errorMessage`` for any peer,
    an ErrorDetail data part with the taxonomy code and retry_after for actorbus."""
    body = err.to_wire()
    retry = getattr(err, "retry_after", None)
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        body["retry_after"] = retry
    return {
        "errorMessage": body["message"],
        "message": {
            "role": "MESSAGE_ROLE_AGENT",
            "parts": [{"dataPart": {"data": _error_detail(body)}, "mediaType": "application/json"}],
        },
    }


def _error_body(content: Any) -> dict[str, Any]:
    return content if isinstance(content, dict) else {"message": str(content)}


def _error_detail(body: Mapping[str, Any]) -> dict[str, Any]:
    """An actorbus error body as ``ErrorDetail {code, message, metadata<string,string>}``."""
    metadata = {"type": str(body.get("type", "Exception"))}
    retry = body.get("retry_after")
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        metadata["retry_after"] = repr(retry)
    return {
        "code": str(body.get("code", "E_HANDLER")),
        "message": str(body.get("message", "")),
        "metadata": metadata,
    }


def _error_content(detail: Any, error_message: str) -> dict[str, Any]:
    """A TASK_FAIL as an actorbus error body (from its ErrorDetail when it has one)."""
    if not (
        isinstance(detail, dict)
        and isinstance(detail.get("code"), str)
        and isinstance(detail.get("message", ""), str)
    ):
        return {"code": "E_HANDLER", "type": "TaskFailedError", "message": error_message}
    metadata = detail.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    code = NATIVE_CODES.get(detail["code"], detail["code"])
    body: dict[str, Any] = {
        "code": code,
        "type": str(metadata.get("type", detail["code"])),
        "message": detail.get("message", error_message),
    }
    retry = _float(metadata.get("retry_after"))
    if retry is not None:
        body["retry_after"] = retry
    return body


def _float(value: Any) -> float | int | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() and "." not in value else number


def error_from(obj: Any) -> ActorBusError:
    """The typed error for a TASK_FAIL frame, a TaskFailPayload or an ErrorDetail.

    Malformed input gives a ProtocolError (returned, not raised); a
    ``retry_after`` the failure carried becomes an attribute of the error.
    """
    try:
        body = _failure_body(obj)
    except DecodeError as exc:
        return ProtocolError(f"malformed AgentAnycast failure: {exc}")
    code, message = str(body["code"]), str(body["message"])
    err = error_for_code(code, message, str(body.get("type") or code))
    if "retry_after" in body:
        err.retry_after = body["retry_after"]  # type: ignore[attr-defined]
    return err


def _failure_body(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict) and ("type" in obj or "envelopeId" in obj or "envelope_id" in obj):
        frm = parse_frame(obj)
        if frm.type != "TASK_FAIL":
            raise DecodeError(f"a {frm.type} frame is not a failure")
        payload = frm.payload
    elif isinstance(obj, dict) and "code" in obj:
        return _error_content(
            _norm(obj, {"code": "str", "message": "str", "metadata": "map"}, "ErrorDetail"), ""
        )
    else:
        payload = _norm(obj, _PAYLOADS["TASK_FAIL"][1], "TaskFailPayload")
    parts = payload.get("message", {}).get("parts", [])
    return _error_content(_part_value(parts[0]) if parts else None, payload.get("errorMessage", ""))


def error_for_status(status: str, message: str = "") -> ActorBusError | None:
    """The error a terminal task status means for the caller (None for COMPLETED or
    a non-terminal status): REJECTED -> UnsupportedError, CANCELED ->
    StreamCancelledError, FAILED -> RemoteError."""
    if status == "REJECTED":
        return UnsupportedError(message or "the agent rejected the task")
    if status == "CANCELED":
        return StreamCancelledError(message or "the task was canceled")
    if status == "FAILED":
        return RemoteError(message or "the task failed", remote_type="TaskFailedError")
    return None


# -- the task state machine ----------------------------------------------------------------------


class TaskState(StrEnum):
    SUBMITTED = "SUBMITTED"
    WORKING = "WORKING"
    INPUT_REQUIRED = "INPUT_REQUIRED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    REJECTED = "REJECTED"


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
# Which statuses a TASK_STATUS_UPDATE may move a task to, from each live state.
_STATUS_MOVES: dict[TaskState, frozenset[TaskState]] = {
    TaskState.SUBMITTED: frozenset({TaskState.WORKING, TaskState.REJECTED, TaskState.CANCELED}),
    TaskState.WORKING: frozenset(
        {TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.REJECTED, TaskState.CANCELED}
    ),
    TaskState.INPUT_REQUIRED: frozenset(
        {TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.REJECTED, TaskState.CANCELED}
    ),
}


@dataclass
class _Stream:
    total: int
    received: int = 0
    last_seen: bool = False
    ended: bool = False


@dataclass
class AnycastTask:
    """One task's lifecycle and its artifact streams (see :class:`AnycastTasks`)."""

    task_id: str
    state: TaskState = TaskState.SUBMITTED
    streams: dict[str, _Stream] = field(default_factory=dict)

    def open_streams(self) -> list[str]:
        return [a for a, s in self.streams.items() if not s.ended]

    def illegal(self, frm: AnycastFrame, why: str) -> ProtocolError:
        return ProtocolError(
            f"AgentAnycast task {self.task_id!r} in state {self.state.value} cannot take "
            f"{frm.type} (envelope {frm.envelope_id!r}): {why}"
        )

    def apply(self, frm: AnycastFrame) -> TaskState:
        if frm.type in ("GET_TASK", "GET_TASK_RESPONSE"):
            return self.state
        if self.state in TERMINAL_STATES:
            raise self.illegal(frm, "the task has ended")
        step = getattr(self, "_on_" + frm.type.lower())
        self.state = step(frm)
        return self.state

    def _on_send_task(self, frm: AnycastFrame) -> TaskState:
        if self.state is not TaskState.INPUT_REQUIRED:
            raise self.illegal(frm, "a task takes more input only when it asked for it")
        return TaskState.WORKING

    def _on_task_status_update(self, frm: AnycastFrame) -> TaskState:
        status = frm.payload.get("status", "UNSPECIFIED")
        if (
            status not in TaskState.__members__
            or TaskState(status) not in _STATUS_MOVES[self.state]
        ):
            raise self.illegal(frm, f"status {status} does not follow {self.state.value}")
        return TaskState(status)

    def _on_task_complete(self, frm: AnycastFrame) -> TaskState:
        if self.state is TaskState.INPUT_REQUIRED:
            raise self.illegal(frm, "the task is waiting for input")
        if self.open_streams():
            raise self.illegal(frm, f"streams {self.open_streams()} have not ended")
        return TaskState.COMPLETED

    def _on_task_fail(self, frm: AnycastFrame) -> TaskState:
        self._end_streams()
        return TaskState.FAILED

    def _on_task_cancel(self, frm: AnycastFrame) -> TaskState:
        self._end_streams()
        return TaskState.CANCELED

    def _on_ack(self, frm: AnycastFrame) -> TaskState:
        return self.state

    def _end_streams(self) -> None:
        for stream in self.streams.values():
            stream.ended = True

    def _on_stream_start(self, frm: AnycastFrame) -> TaskState:
        artifact = frm.payload.get("artifactId", "")
        if self.state is TaskState.INPUT_REQUIRED:
            raise self.illegal(frm, "the task is waiting for input")
        if artifact in self.streams:
            raise self.illegal(frm, f"artifact {artifact!r} was already streamed")
        total = frm.payload.get("totalChunks", 0)
        if total < 0:
            raise self.illegal(frm, "totalChunks cannot be negative")
        self.streams[artifact] = _Stream(total=total)
        return self.state

    def _stream(self, frm: AnycastFrame) -> _Stream:
        artifact = frm.payload.get("artifactId", "")
        stream = self.streams.get(artifact)
        if stream is None or stream.ended:
            raise self.illegal(frm, f"no open stream for artifact {artifact!r}")
        return stream

    def _on_stream_chunk(self, frm: AnycastFrame) -> TaskState:
        stream = self._stream(frm)
        seq = frm.payload.get("sequence", 0)
        last = frm.payload.get("isLast", False)
        if stream.last_seen:
            raise self.illegal(frm, "a chunk after the one marked isLast")
        if seq != stream.received:
            raise self.illegal(frm, f"chunk #{seq} where #{stream.received} was expected")
        if stream.total and (seq >= stream.total or (last and seq != stream.total - 1)):
            raise self.illegal(frm, f"chunk #{seq} does not fit totalChunks {stream.total}")
        stream.received += 1
        stream.last_seen = last
        return self.state

    def _on_stream_end(self, frm: AnycastFrame) -> TaskState:
        stream = self._stream(frm)
        reason = frm.payload.get("reason", "UNSPECIFIED")
        if reason == "COMPLETE":
            short = stream.total and stream.received < stream.total
            unmarked = not stream.total and stream.received and not stream.last_seen
            if short or unmarked:
                raise self.illegal(frm, f"stream ended COMPLETE after {stream.received} chunks")
        stream.ended = True
        return self.state


class AnycastTasks:
    """The pure state machine of AgentAnycast tasks, one per taskId.

    Per the reference: SEND_TASK creates a task (SUBMITTED);
    TASK_STATUS_UPDATE* moves it (WORKING, INPUT_REQUIRED, REJECTED,
    CANCELED); another SEND_TASK answers INPUT_REQUIRED (-> WORKING);
    TASK_COMPLETE (from SUBMITTED or WORKING, every stream ended) or
    TASK_FAIL ends it; TASK_CANCEL cancels a live task; GET_TASK and its
    response change nothing; nothing else is taken once it has ended. Streams:
    STREAM_START per artifact, STREAM_CHUNKs numbered 0, 1, 2 ... (within
    ``totalChunks`` when given, ``isLast`` on the last one), STREAM_END
    (COMPLETE only when every chunk arrived). A repeated envelopeId (at-least-
    once redelivery) is ignored, as the reference's dedup LRU does; an ACK is
    not about a task. Illegal steps raise ProtocolError naming the task, its
    state and the frame.
    """

    def __init__(self, dedup_window: int = DEDUP_WINDOW) -> None:
        self.tasks: dict[str, AnycastTask] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._window = dedup_window

    def observe(self, obj: Mapping[str, Any] | AnycastFrame) -> TaskState | None:
        """Apply one frame; returns the task's state (None for an ACK)."""
        frm = obj if isinstance(obj, AnycastFrame) else parse_frame(obj)
        if frm.type == "ACK":
            return None
        task = self.tasks.get(frm.task_id)
        if self._duplicate(frm.envelope_id):
            return task.state if task is not None else None
        if task is None:
            if frm.type != "SEND_TASK":
                raise ProtocolError(f"AgentAnycast {frm.type} for unknown task {frm.task_id!r}")
            self.tasks[frm.task_id] = AnycastTask(frm.task_id)
            return TaskState.SUBMITTED
        return task.apply(frm)

    def _duplicate(self, envelope_id: str) -> bool:
        if not envelope_id:
            return False
        if envelope_id in self._seen:
            self._seen.move_to_end(envelope_id)
            return True
        self._seen[envelope_id] = None
        if len(self._seen) > self._window:
            self._seen.popitem(last=False)
        return False


CODEC = register(
    Codec(PROTOCOL, encode, decode, error_to, error_from, carries=ENVELOPE_FIELDS_BUT_HINT)
)
