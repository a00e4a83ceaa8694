"""AgentAnycast frames: parsing and building each of the eleven envelope types,
and message content as parts."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from actorbus.codecs.anycast.schema import (
    ENVELOPE,
    EXTENSION_KEY,
    PAYLOAD_FIELDS,
    PAYLOADS,
    emit,
    normalize,
    schema_error,
)
from actorbus.codecs.common import format_timestamp as format_timestamp
from actorbus.codecs.errors import (
    DecodeError,
    EncodeError,
)

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
    env = normalize(obj, ENVELOPE, "envelope")
    present = [name for name in PAYLOAD_FIELDS if name in env]
    if len(present) != 1:
        raise schema_error("envelope", f"must carry exactly one payload, not {present or 'none'}")
    kind = env.get("type")
    payload_field, _ = PAYLOADS.get(kind or "", ("", {}))
    if payload_field != present[0]:
        raise schema_error("envelope", f"of type {kind} cannot carry {present[0]}")
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
    if kind not in PAYLOADS:
        raise EncodeError(f"{kind!r} is not an AgentAnycast envelope type")
    name, spec = PAYLOADS[kind]
    out: dict[str, Any] = {"envelopeId": envelope_id, "type": f"ENVELOPE_TYPE_{kind}"}
    if ts_ms is not None:
        out["timestamp"] = format_timestamp(ts_ms)
    out[name] = emit(payload, spec)
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


def address_of(dst: str) -> tuple[str, str]:
    """Which SendTaskRequest target a dst names: (``peerId``|``url``|``skillId``, value)."""
    if dst.startswith("peer:"):
        return "peerId", dst[5:]
    if dst.startswith(("http://", "https://")):
        return "url", dst
    return "skillId", dst


# -- content <-> parts -------------------------------------------------------------------------


def content_parts(content: Any, ext: dict[str, Any]) -> list[dict[str, Any]]:
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


def part_value(part: Mapping[str, Any]) -> Any:
    if "textPart" in part:
        return part["textPart"].get("text", "")
    if "dataPart" in part:
        return part["dataPart"].get("data", {})
    if "rawPart" in part:
        return part["rawPart"].get("data", b"")
    if "urlPart" in part:
        return dict(part["urlPart"])
    return None


def content_of(parts: list[dict[str, Any]], form: Any) -> Any:
    if form == "none" or not parts:
        return None
    if form == "value":
        data = part_value(parts[0])
        if not isinstance(data, dict) or "value" not in data:
            raise DecodeError("AgentAnycast part marked as a wrapped value has no 'value'")
        return data["value"]
    if len(parts) == 1:
        return part_value(parts[0])
    return [part_value(p) for p in parts]


def attach(parts: list[dict[str, Any]], ext: dict[str, Any]) -> list[dict[str, Any]]:
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


def load_ext(parts: list[dict[str, Any]]) -> dict[str, Any]:
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
