"""Envelope <-> AgentAnycast frame, and the error mapping (see the package docs)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from actorbus.codecs.anycast.frames import (
    AnycastFrame,
    address_of,
    attach,
    content_of,
    content_parts,
    load_ext,
    parse_frame,
    part_value,
)
from actorbus.codecs.anycast.schema import (
    ARTIFACT,
    CONTROL_INTENTS,
    FACTS_KEY,
    INTENT_ERROR,
    INTENT_OF_TYPE,
    MESSAGE,
    PAYLOADS,
    PROTOCOL,
    emit,
    normalize,
)
from actorbus.codecs.common import (
    add_extension,
    content_intent,
    format_timestamp as format_timestamp,
    meta_builder,
)
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

# -- envelope -> AgentAnycast ---------------------------------------------------------------------


def encode(env: Envelope) -> dict[str, Any]:
    """An envelope as an A2AEnvelope (JSON form); the module docstring says which type."""
    facts = anycast_facts(env.meta)
    if env.intent == INTENT_ERROR:
        return _task_fail(env, facts, _task_id(env, facts, env.context.parent_id or ""))
    control = CONTROL_INTENTS.get(env.intent)
    if control is not None:
        return _control(env, control, facts)
    if facts.get("type") == "TASK_COMPLETE":
        return _task_complete(env, facts, _task_id(env, facts, env.context.parent_id or ""))
    return send_task(env, facts)


def reply_to(request: Mapping[str, Any] | AnycastFrame, env: Envelope) -> dict[str, Any]:
    """The TASK_COMPLETE (or TASK_FAIL, for ``$error``) answering a SEND_TASK frame."""
    req = request if isinstance(request, AnycastFrame) else parse_frame(request)
    if req.type != "SEND_TASK":
        raise EncodeError(f"reply_to answers a SEND_TASK, not a {req.type}")
    facts = anycast_facts(env.meta)
    if env.intent == INTENT_ERROR:
        return _task_fail(env, facts, req.task_id)
    return _task_complete(env, facts, req.task_id)


def anycast_facts(meta: EnvelopeMeta) -> dict[str, Any]:
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


def send_task(env: Envelope, facts: Mapping[str, Any]) -> dict[str, Any]:
    ext: dict[str, Any] = {}
    target_kind, _ = address_of(env.dst)
    payload: dict[str, Any] = {"taskId": _task_id(env, facts, env.id)}
    if env.context.session_id:
        payload["contextId"] = env.context.session_id
    parts = content_parts(env.content, ext)
    _fill_ext(env, ext, facts, skip=_derived(env, "SEND_TASK", target_kind))
    payload["message"] = _message(env, facts, "USER", attach(parts, ext))
    if env.dst and target_kind == "skillId":
        payload["targetSkillId"] = env.dst
    return {**_head(env, "SEND_TASK", facts), "sendTask": payload}


def _task_complete(env: Envelope, facts: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    ext: dict[str, Any] = {}
    parts = content_parts(env.content, ext)
    _fill_ext(env, ext, facts, skip=_derived(env, "TASK_COMPLETE", "", task_id))
    artifact: dict[str, Any] = {
        "artifactId": _fact_str(facts, "artifact_id", env.id),
        "parts": attach(parts, ext),
    }
    if isinstance(facts.get("artifact_name"), str):
        artifact["name"] = facts["artifact_name"]
    payload: dict[str, Any] = {"artifacts": [artifact, *_more(facts, "more_artifacts")]}
    if task_id:
        payload["taskId"] = task_id
    if isinstance(facts.get("message"), dict):
        payload["message"] = emit(facts["message"], MESSAGE)
    return {**_head(env, "TASK_COMPLETE", facts), "taskComplete": payload}


def _more(facts: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    extra = facts.get(key)
    return [emit(a, ARTIFACT) for a in extra] if isinstance(extra, list) else []


def _task_fail(env: Envelope, facts: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    body = _error_body(env.content)
    ext: dict[str, Any] = {}
    _fill_ext(env, ext, facts, skip=_derived(env, "TASK_FAIL", "", task_id))
    payload: dict[str, Any] = {"errorMessage": str(body.get("message", ""))}
    if not (facts.get("plain") and not ext and body.get("code") == "E_HANDLER"):
        detail = _error_detail(body)
        parts = attach([{"dataPart": {"data": detail}, "mediaType": "application/json"}], ext)
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
    name, spec = PAYLOADS[kind]
    return {**_head(env, kind, facts), name: emit(content, spec)}


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
    if env.intent not in (INTENT_ERROR, content_intent(env.content)):
        ext["intent"] = env.intent
    add_extension(ext, env, PROTOCOL, _META_NATIVE, skip)


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
    parts, ext = _read_message(frm, "USER", facts)
    if p.get("taskId", "") != frm.envelope_id:
        facts["task_id"] = p.get("taskId", "")
    content = content_of(parts, ext.get("content"))
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
    ext = load_ext(parts or [])
    if first:
        if first.get("artifactId", "") != frm.envelope_id:
            facts["artifact_id"] = first.get("artifactId", "")
        if "name" in first:
            facts["artifact_name"] = first["name"]
        if "message" in p:
            facts["message"] = p["message"]
    if len(artifacts) > 1:
        facts["more_artifacts"] = artifacts[1:]
    content = content_of(parts or [], ext.get("content"))
    fields.update(content=content, intent=content_intent(content))
    _task_parent(p.get("taskId", ""), fields)
    return ext


def _decode_task_fail(
    frm: AnycastFrame, fields: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    p = frm.payload
    parts, ext = _read_message(frm, "AGENT", facts)
    detail = part_value(parts[0]) if parts else None
    if "message" not in p:
        facts["plain"] = True  # errorMessage only: answer the same way
    fields.update(intent=INTENT_ERROR, content=_error_content(detail, p.get("errorMessage", "")))
    _task_parent(p.get("taskId", ""), fields)
    return ext


def _decode_control(
    frm: AnycastFrame, fields: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    fields.update(intent=INTENT_OF_TYPE[frm.type], content=frm.payload)
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


def _read_message(
    frm: AnycastFrame, role: str, facts: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The payload message's parts and the actorbus extension they carry; what of
    the message's head (id, role, time) is not the default goes into ``facts``."""
    message = frm.payload.get("message", {})
    parts: list[Any] = message.get("parts", [])
    _record_message_head(message, frm.envelope_id, role, facts)
    return parts, load_ext(parts)


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
            normalize(obj, {"code": "str", "message": "str", "metadata": "map"}, "ErrorDetail"), ""
        )
    else:
        payload = normalize(obj, PAYLOADS["TASK_FAIL"][1], "TaskFailPayload")
    parts = payload.get("message", {}).get("parts", [])
    return _error_content(part_value(parts[0]) if parts else None, payload.get("errorMessage", ""))


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


def send_task_request(env: Envelope) -> dict[str, Any]:
    """The node's gRPC ``SendTaskRequest`` (JSON) for an envelope: the oneof target is
    ``peerId`` for a ``peer:<id>`` dst, ``url`` for an http(s) dst, else ``skillId``
    (anycast by capability)."""
    target_kind, target = address_of(env.dst)
    no_dst = env.model_copy(update={"dst": ""})  # the target field says it
    message = send_task(no_dst, anycast_facts(env.meta))["sendTask"]["message"]
    return {target_kind: target, "message": message}
