"""AgentAnycast's ``A2AEnvelope`` schema as field tables, and the proto3 JSON engine
that reads and writes it (camelCase or snake_case in, enum names or numbers,
RFC 3339 timestamps, base64 bytes, defaults left out)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from actorbus.codecs.common import (
    EPOCH,
    format_timestamp as format_timestamp,
)
from actorbus.codecs.errors import (
    DecodeError,
    EncodeError,
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
INTENT_OF_TYPE = {v: k for k, v in CONTROL_INTENTS.items()} | {"TASK_FAIL": "$error"}
INTENT_ERROR = "$error"
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
MESSAGE: Spec = {
    "messageId": "str",
    "role": ("enum", "role"),
    "parts": ("list", _PART),
    "createdAt": "ts",
}
ARTIFACT: Spec = {"artifactId": "str", "name": "str", "parts": ("list", _PART)}
_TASK: Spec = {
    "taskId": "str",
    "contextId": "str",
    "status": ("enum", "status"),
    "messages": ("list", MESSAGE),
    "artifacts": ("list", ARTIFACT),
    "createdAt": "ts",
    "updatedAt": "ts",
    "targetSkillId": "str",
    "originatorPeerId": "str",
}
PAYLOADS: dict[str, tuple[str, Spec]] = {
    "SEND_TASK": (
        "sendTask",
        {
            "taskId": "str",
            "contextId": "str",
            "message": ("msg", MESSAGE),
            "targetSkillId": "str",
        },
    ),
    "TASK_STATUS_UPDATE": (
        "taskStatusUpdate",
        {"taskId": "str", "status": ("enum", "status"), "message": ("msg", MESSAGE)},
    ),
    "TASK_COMPLETE": (
        "taskComplete",
        {"taskId": "str", "artifacts": ("list", ARTIFACT), "message": ("msg", MESSAGE)},
    ),
    "TASK_FAIL": (
        "taskFail",
        {"taskId": "str", "errorMessage": "str", "message": ("msg", MESSAGE)},
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
ENVELOPE: Spec = {
    "envelopeId": "str",
    "type": ("enum", "type"),
    "timestamp": "ts_ms",
    **{name: ("msg", spec) for name, spec in PAYLOADS.values()},
    "traceParent": "str",
    "traceState": "str",
}
PAYLOAD_FIELDS = tuple(name for name, _ in PAYLOADS.values())


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


def schema_error(where: str, what: str) -> DecodeError:
    return DecodeError(f"AgentAnycast {where} {what}")


def normalize(obj: Any, spec: Spec, where: str) -> dict[str, Any]:
    """A proto3 JSON object read by its field table: camelCase keys, typed values;
    unknown fields are ignored and ``null`` means "default". One loop with the
    kinds inline: this runs for every nested message of every frame."""
    if type(obj) is not dict:
        raise schema_error(where, "must be a JSON object")
    lookup = _lookup(spec)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        known = lookup.get(key)
        if known is None or value is None:
            continue
        camel, kind = known
        if kind == "str":
            if type(value) is not str:
                raise schema_error(f"{where}.{camel}", "must be a string")
            out[camel] = value
        elif type(kind) is tuple:
            out[camel] = _norm_composite(value, kind, f"{where}.{camel}")
        else:
            out[camel] = _SCALARS[kind](value, f"{where}.{camel}")
    return out


def _norm_composite(value: Any, kind: tuple[str, Any], where: str) -> Any:
    tag, arg = kind
    if tag == "msg":
        return normalize(value, arg, where)
    if tag == "list":
        if type(value) is not list:
            raise schema_error(where, "must be a JSON array")
        return [normalize(item, arg, f"{where}[{i}]") for i, item in enumerate(value)]
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
    raise schema_error(where, f"is not a {prefix.rstrip('_')} value: {value!r:.60}")


def _int32(value: Any, where: str) -> int:
    if type(value) is str and re.fullmatch(r"-?\d{1,10}", value):
        value = int(value)  # proto3 JSON allows int32 as a string
    if type(value) is not int or not _INT32[0] <= value <= _INT32[1]:
        raise schema_error(where, "must be an int32")
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise schema_error(where, "must be true or false")
    return value


def _bytes(value: Any, where: str) -> bytes:
    if type(value) is not str:
        raise schema_error(where, "must be a base64 string")
    try:  # proto3 JSON accepts standard and URL-safe base64, padded or not
        text = value.replace("-", "+").replace("_", "/").rstrip("=")
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise schema_error(where, f"is not base64: {exc}") from exc


def _timestamp(value: Any, where: str) -> str:
    if type(value) is not str:
        raise schema_error(where, "must be an RFC 3339 string")
    parse_timestamp(value, where)
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    if type(value) is not dict or not all(type(v) is str for v in value.values()):
        raise schema_error(where, "must be an object of strings")
    return value


def _struct(value: Any, where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise schema_error(where, "must be a JSON object (google.protobuf.Struct)")
    return value


def _timestamp_ms(value: Any, where: str) -> int:
    if type(value) is not str:
        raise schema_error(where, "must be an RFC 3339 string")
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


def emit(norm: Mapping[str, Any], spec: Spec) -> dict[str, Any]:
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
            return emit(_mapping(value, key), arg)
        if tag == "list":
            return [emit(_mapping(v, key), arg) for v in _sequence(value, key)]
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
        raise schema_error(where, f"is not RFC 3339: {text!r:.60}") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    delta = t - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
