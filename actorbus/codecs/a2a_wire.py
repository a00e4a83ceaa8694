"""A2A 1.0 and 0.3 JSON, to and from the neutral model in :mod:`a2a_types`.

Decoding validates with msgspec Structs shaped like each version's JSON (one set
per version, so an error names the field as the sender wrote it: ``params.message
.parts[0].raw``) and then builds the neutral objects. Encoding builds plain dicts
directly: it is the hot path, and a dict literal is the cheapest JSON-ready value.

Unknown fields are ignored on decode, as the spec asks for forward compatibility;
a few known spelling variants of 1.0 drafts are accepted too (kebab-case states,
lowercase roles, ``final`` on status updates), and always written the 1.0 way.

Errors: a bad request raises the JSON-RPC error it deserves (-32700, -32600,
-32601, -32602, -32009); a bad response from a remote agent raises
:class:`InvalidAgentResponseError` (-32006); an error response raises the error
it carries (:func:`error_from_response`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from actorbus.codecs.a2a_errors import (
    V03,
    V10,
    A2AError,
    A2AParseError,
    A2AVersion,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
    error_from_response,
    negotiate_version,
)
from actorbus.codecs.a2a_types import (
    METHODS_V03,
    METHODS_V10,
    A2ARequest,
    A2AResponse,
    Artifact,
    ArtifactUpdate,
    ListTasksParams,
    Message,
    Method,
    Params,
    Part,
    Result,
    SendConfig,
    SendParams,
    StatusUpdate,
    StreamEvent,
    Task,
    TaskList,
    TaskRef,
    TaskStatus,
    state_from_wire,
    state_to_wire,
    wire_method,
)
from actorbus.codecs.common import read_json
from actorbus.codecs.errors import DecodeError

T = TypeVar("T")
ErrorClass = type[A2AError]

_Id = Annotated[str, msgspec.Meta(min_length=1)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_Meta = dict[str, Any] | None

_StateV03 = Literal[
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "failed",
    "canceled",
    "rejected",
    "unknown",
]
_StateV10 = (
    Literal[
        "TASK_STATE_UNSPECIFIED",
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
    ]
    | _StateV03
)


class _W(msgspec.Struct, rename="camel"):
    """Base of the wire shapes: camelCase JSON names, unknown fields ignored."""


# -- A2A 1.0 wire shapes ----------------------------------------------------------------


class _PartV10(_W):
    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = msgspec.UNSET  # null is a valid data value, so absence is UNSET
    media_type: str | None = None
    filename: str | None = None
    metadata: _Meta = None


class _MessageV10(_W):
    message_id: _Id
    role: Literal["ROLE_USER", "ROLE_AGENT", "user", "agent"]
    parts: Annotated[list[_PartV10], msgspec.Meta(min_length=1)]
    context_id: str | None = None
    task_id: str | None = None
    metadata: _Meta = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class _StatusV10(_W):
    state: _StateV10
    message: _MessageV10 | None = None
    timestamp: str | None = None


class _ArtifactV10(_W):
    artifact_id: _Id
    parts: Annotated[list[_PartV10], msgspec.Meta(min_length=1)]
    name: str | None = None
    description: str | None = None
    metadata: _Meta = None
    extensions: list[str] | None = None


class _TaskV10(_W):
    id: _Id
    status: _StatusV10
    context_id: str | None = None
    artifacts: list[_ArtifactV10] | None = None
    history: list[_MessageV10] | None = None
    metadata: _Meta = None


class _StatusUpdateV10(_W):
    task_id: _Id
    status: _StatusV10
    context_id: str | None = None
    final: bool | None = None  # not in 1.0; early drafts had it
    metadata: _Meta = None


class _ArtifactUpdateV10(_W):
    task_id: _Id
    artifact: _ArtifactV10
    context_id: str | None = None
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: _Meta = None


class _TaskListV10(_W):
    tasks: list[_TaskV10]
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0


# -- A2A 0.3 wire shapes ----------------------------------------------------------------


class _FileV03(_W):
    data: str | None = msgspec.field(default=None, name="bytes")
    uri: str | None = None
    name: str | None = None
    mime_type: str | None = None


class _PartV03(_W):
    kind: Literal["text", "file", "data"] | None = None  # inferred when missing
    text: str | None = None
    file: _FileV03 | None = None
    data: dict[str, Any] | None = None
    metadata: _Meta = None


class _MessageV03(_W):
    message_id: _Id
    role: Literal["user", "agent"]
    parts: Annotated[list[_PartV03], msgspec.Meta(min_length=1)]
    kind: Literal["message"] | None = None
    context_id: str | None = None
    task_id: str | None = None
    metadata: _Meta = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class _StatusV03(_W):
    state: _StateV03
    message: _MessageV03 | None = None
    timestamp: str | None = None


class _ArtifactV03(_W):
    artifact_id: _Id
    parts: Annotated[list[_PartV03], msgspec.Meta(min_length=1)]
    name: str | None = None
    description: str | None = None
    metadata: _Meta = None
    extensions: list[str] | None = None


class _TaskV03(_W):
    id: _Id
    context_id: str
    status: _StatusV03
    kind: Literal["task"] | None = None
    artifacts: list[_ArtifactV03] | None = None
    history: list[_MessageV03] | None = None
    metadata: _Meta = None


class _StatusUpdateV03(_W):
    task_id: _Id
    context_id: str
    status: _StatusV03
    final: bool | None = None
    kind: Literal["status-update"] | None = None
    metadata: _Meta = None


class _ArtifactUpdateV03(_W):
    task_id: _Id
    context_id: str
    artifact: _ArtifactV03
    kind: Literal["artifact-update"] | None = None
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: _Meta = None


# -- request params (both versions) ----------------------------------------------------


class _SendParamsV10(_W):
    message: _MessageV10
    configuration: dict[str, Any] | None = None
    metadata: _Meta = None
    tenant: str | None = None


class _SendParamsV03(_W):
    message: _MessageV03
    configuration: dict[str, Any] | None = None
    metadata: _Meta = None


class _Config(_W):
    accepted_output_modes: list[str] | None = None
    history_length: _Count | None = None
    blocking: bool | None = None
    return_immediately: bool | None = None


class _TaskRefV10(_W):
    id: _Id
    history_length: _Count | None = None
    metadata: _Meta = None
    tenant: str | None = None


class _TaskRefV03(_W):
    id: _Id
    history_length: _Count | None = None
    metadata: _Meta = None


class _ListTasksV10(_W):
    context_id: str | None = None
    status: _StateV10 | None = None
    page_size: Annotated[int, msgspec.Meta(ge=1, le=100)] | None = None
    page_token: str | None = None
    history_length: _Count | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool | None = None
    tenant: str | None = None


def _names(struct: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(f.encode_name for f in msgspec.structs.fields(struct))


_KNOWN: Final[dict[type[msgspec.Struct], frozenset[str]]] = {
    s: _names(s)
    for s in (_SendParamsV10, _SendParamsV03, _Config, _TaskRefV10, _TaskRefV03, _ListTasksV10)
}


def _extra(obj: Mapping[str, Any], struct: type[msgspec.Struct]) -> dict[str, Any] | None:
    """The keys of ``obj`` that ``struct`` does not model, to pass them on verbatim."""
    known = _KNOWN[struct]
    extra = {k: v for k, v in obj.items() if k not in known}
    return extra or None


# -- small helpers -------------------------------------------------------------------


def _located(text: str, where: str) -> str:
    """A msgspec message with its ``$`` path rooted at ``where`` (``params.message``)."""
    if "`$" in text:
        return text.replace("`$", f"`{where}")
    return f"{text} - at `{where}`"


def _convert(obj: Any, struct: type[T], where: str, err: ErrorClass) -> T:
    """``obj`` as ``struct``, or ``err`` naming the field that is wrong."""
    try:
        return msgspec.convert(obj, struct)
    except msgspec.ValidationError as e:
        raise err(_located(str(e), where)) from None
    except RecursionError:
        raise err(f"`{where}` is nested too deeply") from None


_JSON: Final = msgspec.json.Decoder()


def parse_json(body: Any, err: ErrorClass = A2AParseError) -> Any:
    """Raw JSON (bytes/str) parsed; anything else is taken as already parsed."""
    if isinstance(body, bytes | bytearray | memoryview | str):
        try:
            return read_json(bytes(body) if not isinstance(body, str) else body)
        except DecodeError as e:
            raise err(str(e)) from None
    return body


def b64decode(text: str, where: str, err: ErrorClass = InvalidParamsError) -> bytes:
    """Base64 as ProtoJSON accepts it: standard or URL-safe alphabet, padding optional."""
    std = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(std + "=" * (-len(std) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise err(f"`{where}` is not valid base64") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def detect_version(obj: Mapping[str, Any]) -> A2AVersion:
    """0.3 if the message (or a part of it) has 0.3's ``kind`` / ``file``; else 1.0."""
    if "kind" in obj:
        return V03
    parts = obj.get("parts")
    if isinstance(parts, list):
        for p in parts:
            if isinstance(p, dict) and ("kind" in p or "file" in p):
                return V03
    return V10


# -- parts --------------------------------------------------------------------------

_ACTORBUS: Final = "actorbus"  # key of our hints in a 0.3 part's metadata


def _part_from_v10(p: _PartV10, where: str, err: ErrorClass) -> Part:
    extras: dict[str, Any] = {
        "media_type": p.media_type,
        "filename": p.filename,
        "metadata": p.metadata,
    }
    present = [k for k in ("text", "raw", "url") if getattr(p, k) is not None]
    if p.data is not msgspec.UNSET:
        present.append("data")
    if len(present) != 1:
        got = ", ".join(present) or "none of them"
        raise err(f"`{where}`: a part needs exactly one of text, raw, url, data (got {got})")
    if p.text is not None:
        return Part(kind="text", value=p.text, **extras)
    if p.raw is not None:
        return Part(kind="raw", value=b64decode(p.raw, f"{where}.raw", err), **extras)
    if p.url is not None:
        return Part(kind="url", value=p.url, **extras)
    return Part(kind="data", value=p.data, **extras)


def _part_to_v10(p: Part) -> dict[str, Any]:
    if p.kind == "raw":
        out: dict[str, Any] = {"raw": b64encode(p.value)}
    else:
        out = {p.kind: p.value}
    if p.media_type is not None:
        out["mediaType"] = p.media_type
    if p.filename is not None:
        out["filename"] = p.filename
    if p.metadata is not None:
        out["metadata"] = p.metadata
    return out


def _hints_v03(metadata: _Meta) -> tuple[_Meta, dict[str, Any]]:
    """A 0.3 part's own metadata, and our hints (what 0.3 has no field for).

    The one loss: an empty ``metadata: {}`` sent beside our hints comes back absent.
    """
    if not metadata or not isinstance(metadata.get(_ACTORBUS), dict):
        return metadata, {}
    rest = {k: v for k, v in metadata.items() if k != _ACTORBUS}
    return (rest or None), metadata[_ACTORBUS]


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _part_from_v03(p: _PartV03, where: str, err: ErrorClass) -> Part:
    metadata, hints = _hints_v03(p.metadata)
    kind = p.kind or ("text" if p.text is not None else "file" if p.file is not None else "data")
    if kind == "file":
        return _file_from_v03(p.file, metadata, where, err)
    media_type, filename = _opt_str(hints.get("mediaType")), _opt_str(hints.get("filename"))
    if kind == "text":
        if p.text is None:
            raise err(f"`{where}.text`: a text part needs text")
        return Part(
            kind="text", value=p.text, media_type=media_type, filename=filename, metadata=metadata
        )
    if p.data is None:
        raise err(f"`{where}.data`: a data part needs data (an object)")
    value = p.data.get("value") if hints.get("wrapped") is True else p.data
    return Part(
        kind="data", value=value, media_type=media_type, filename=filename, metadata=metadata
    )


def _file_from_v03(f: _FileV03 | None, metadata: _Meta, where: str, err: ErrorClass) -> Part:
    if f is None:
        raise err(f"`{where}.file`: a file part needs file")
    if (f.data is None) == (f.uri is None):
        raise err(f"`{where}.file`: a file needs exactly one of bytes, uri")
    extras: dict[str, Any] = {"media_type": f.mime_type, "filename": f.name, "metadata": metadata}
    if f.data is not None:
        return Part(kind="raw", value=b64decode(f.data, f"{where}.file.bytes", err), **extras)
    return Part(kind="url", value=f.uri, **extras)


def _part_to_v03(p: Part) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    out: dict[str, Any]
    if p.kind in ("raw", "url"):
        file: dict[str, Any] = (
            {"bytes": b64encode(p.value)} if p.kind == "raw" else {"uri": p.value}
        )
        if p.filename is not None:
            file["name"] = p.filename
        if p.media_type is not None:
            file["mimeType"] = p.media_type
        out = {"kind": "file", "file": file}
    else:
        if p.kind == "text":
            out = {"kind": "text", "text": p.value}
        elif isinstance(p.value, dict):
            out = {"kind": "data", "data": p.value}
        else:  # 0.3 data must be an object: wrap, and say so
            out = {"kind": "data", "data": {"value": p.value}}
            hints["wrapped"] = True
        if p.media_type is not None:
            hints["mediaType"] = p.media_type
        if p.filename is not None:
            hints["filename"] = p.filename
    metadata = p.metadata
    if hints:
        metadata = {**(metadata or {}), _ACTORBUS: hints}
    if metadata is not None:
        out["metadata"] = metadata
    return out


def part_to_wire(p: Part, version: A2AVersion) -> dict[str, Any]:
    return _part_to_v10(p) if version == V10 else _part_to_v03(p)


# -- messages ---------------------------------------------------------------------------

_ROLE_V10: Final = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLE_FROM_V10: Final[dict[str, Literal["user", "agent"]]] = {
    "ROLE_USER": "user",
    "ROLE_AGENT": "agent",
    "user": "user",
    "agent": "agent",
}


def _message_from(m: _MessageV10 | _MessageV03, where: str, err: ErrorClass) -> Message:
    if isinstance(m, _MessageV10):
        parts = [_part_from_v10(p, f"{where}.parts[{i}]", err) for i, p in enumerate(m.parts)]
        role = _ROLE_FROM_V10[m.role]
    else:
        parts = [_part_from_v03(p, f"{where}.parts[{i}]", err) for i, p in enumerate(m.parts)]
        role = m.role
    return Message(
        message_id=m.message_id,
        role=role,
        parts=parts,
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
        reference_task_ids=m.reference_task_ids,
    )


def message_from_wire(
    obj: Any,
    version: A2AVersion | None = None,
    *,
    where: str = "message",
    err: ErrorClass = InvalidParamsError,
) -> Message:
    """An A2A Message object (either version; detected when ``version`` is None)."""
    if version is None:
        version = detect_version(obj) if isinstance(obj, Mapping) else V10
    struct: type[_MessageV10 | _MessageV03] = _MessageV10 if version == V10 else _MessageV03
    return _message_from(_convert(obj, struct, where, err), where, err)


def message_to_wire(m: Message, version: A2AVersion) -> dict[str, Any]:
    if version == V10:
        out: dict[str, Any] = {
            "messageId": m.message_id,
            "role": _ROLE_V10[m.role],
            "parts": [_part_to_v10(p) for p in m.parts],
        }
    else:
        out = {
            "kind": "message",
            "messageId": m.message_id,
            "role": m.role,
            "parts": [_part_to_v03(p) for p in m.parts],
        }
    if m.context_id is not None:
        out["contextId"] = m.context_id
    if m.task_id is not None:
        out["taskId"] = m.task_id
    if m.metadata is not None:
        out["metadata"] = m.metadata
    if m.extensions is not None:
        out["extensions"] = m.extensions
    if m.reference_task_ids is not None:
        out["referenceTaskIds"] = m.reference_task_ids
    return out


# -- tasks, artifacts, events -------------------------------------------------------------


def _status_from(s: _StatusV10 | _StatusV03, where: str, err: ErrorClass) -> TaskStatus:
    message = None if s.message is None else _message_from(s.message, f"{where}.message", err)
    return TaskStatus(state=state_from_wire(s.state), message=message, timestamp=s.timestamp)


def _status_to(s: TaskStatus, version: A2AVersion) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state_to_wire(s.state, version)}
    if s.message is not None:
        out["message"] = message_to_wire(s.message, version)
    if s.timestamp is not None:
        out["timestamp"] = s.timestamp
    return out


def _artifact_from(a: _ArtifactV10 | _ArtifactV03, where: str, err: ErrorClass) -> Artifact:
    if isinstance(a, _ArtifactV10):
        parts = [_part_from_v10(p, f"{where}.parts[{i}]", err) for i, p in enumerate(a.parts)]
    else:
        parts = [_part_from_v03(p, f"{where}.parts[{i}]", err) for i, p in enumerate(a.parts)]
    return Artifact(
        artifact_id=a.artifact_id,
        parts=parts,
        name=a.name,
        description=a.description,
        metadata=a.metadata,
        extensions=a.extensions,
    )


def artifact_to_wire(a: Artifact, version: A2AVersion) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifactId": a.artifact_id,
        "parts": [part_to_wire(p, version) for p in a.parts],
    }
    if a.name is not None:
        out["name"] = a.name
    if a.description is not None:
        out["description"] = a.description
    if a.metadata is not None:
        out["metadata"] = a.metadata
    if a.extensions is not None:
        out["extensions"] = a.extensions
    return out


def _task_from(t: _TaskV10 | _TaskV03, where: str, err: ErrorClass) -> Task:
    wire_artifacts: Sequence[_ArtifactV10 | _ArtifactV03] | None = t.artifacts
    wire_history: Sequence[_MessageV10 | _MessageV03] | None = t.history
    artifacts = history = None
    if wire_artifacts is not None:
        artifacts = [
            _artifact_from(a, f"{where}.artifacts[{i}]", err) for i, a in enumerate(wire_artifacts)
        ]
    if wire_history is not None:
        history = [
            _message_from(m, f"{where}.history[{i}]", err) for i, m in enumerate(wire_history)
        ]
    return Task(
        id=t.id,
        status=_status_from(t.status, f"{where}.status", err),
        context_id=t.context_id,
        artifacts=artifacts,
        history=history,
        metadata=t.metadata,
    )


def task_to_wire(task: Task, version: str | None) -> dict[str, Any]:
    """A Task object (the result of GetTask / CancelTask, or inside other results)."""
    v = negotiate_version(version)
    out: dict[str, Any] = {"kind": "task", "id": task.id} if v == V03 else {"id": task.id}
    if task.context_id is not None or v == V03:  # 0.3 requires contextId
        out["contextId"] = task.context_id or ""
    out["status"] = _status_to(task.status, v)
    if task.artifacts is not None:
        out["artifacts"] = [artifact_to_wire(a, v) for a in task.artifacts]
    if task.history is not None:
        out["history"] = [message_to_wire(m, v) for m in task.history]
    if task.metadata is not None:
        out["metadata"] = task.metadata
    return out


def status_update_to_wire(u: StatusUpdate, version: A2AVersion) -> dict[str, Any]:
    """0.3: ``kind`` and ``final`` (derived from the state when not given); 1.0: neither."""
    out: dict[str, Any] = {"taskId": u.task_id}
    if version == V03:
        out = {"kind": "status-update", **out, "contextId": u.context_id or ""}
    elif u.context_id is not None:
        out["contextId"] = u.context_id
    out["status"] = _status_to(u.status, version)
    if version == V03:
        out["final"] = u.ends_stream
    if u.metadata is not None:
        out["metadata"] = u.metadata
    return out


def artifact_update_to_wire(u: ArtifactUpdate, version: A2AVersion) -> dict[str, Any]:
    out: dict[str, Any] = {"taskId": u.task_id}
    if version == V03:
        out = {"kind": "artifact-update", **out, "contextId": u.context_id or ""}
    elif u.context_id is not None:
        out["contextId"] = u.context_id
    out["artifact"] = artifact_to_wire(u.artifact, version)
    if u.append is not None:
        out["append"] = u.append
    if u.last_chunk is not None:
        out["lastChunk"] = u.last_chunk
    if u.metadata is not None:
        out["metadata"] = u.metadata
    return out


def task_list_to_wire(tasks: TaskList, version: A2AVersion) -> dict[str, Any]:
    if version != V10:
        raise UnsupportedOperationError("ListTasks exists in A2A 1.0 only")
    return {
        "tasks": [task_to_wire(t, V10) for t in tasks.tasks],
        "nextPageToken": tasks.next_page_token,
        "pageSize": tasks.page_size,
        "totalSize": tasks.total_size,
    }


# -- results and responses -----------------------------------------------------------------

_WRAP_V10: Final[dict[type, str]] = {
    Task: "task",
    Message: "message",
    StatusUpdate: "statusUpdate",
    ArtifactUpdate: "artifactUpdate",
}


def result_to_wire(result: Result, version: str | None, *, wrapped: bool = True) -> dict[str, Any]:
    """A JSON-RPC ``result``. 1.0 wraps send results and stream events in a oneof
    (``{"task": ...}``, ``{"statusUpdate": ...}``); 0.3 marks them with ``kind``."""
    v = negotiate_version(version)
    body: dict[str, Any]
    if isinstance(result, Task):
        body = task_to_wire(result, v)
    elif isinstance(result, Message):
        body = message_to_wire(result, v)
    elif isinstance(result, StatusUpdate):
        body = status_update_to_wire(result, v)
    elif isinstance(result, ArtifactUpdate):
        body = artifact_update_to_wire(result, v)
    else:
        return task_list_to_wire(result, v)
    if v == V10 and wrapped:
        return {_WRAP_V10[type(result)]: body}
    return body


def rpc_result(request_id: str | int | None, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def send_response(
    request_id: str | int | None, result: Task | Message, version: str | None
) -> dict[str, Any]:
    """The answer to SendMessage (message/send): a Task or a Message."""
    return rpc_result(request_id, result_to_wire(result, version))


def task_response(request_id: str | int | None, task: Task, version: str | None) -> dict[str, Any]:
    """The answer to GetTask / CancelTask (tasks/get, tasks/cancel): the bare Task."""
    return rpc_result(request_id, task_to_wire(task, version))


def list_tasks_response(
    request_id: str | int | None, tasks: TaskList, version: str | None = V10
) -> dict[str, Any]:
    return rpc_result(request_id, result_to_wire(tasks, version))


def stream_event(
    request_id: str | int | None, event: StreamEvent, version: str | None
) -> dict[str, Any]:
    """One event of a SendStreamingMessage / SubscribeToTask stream (one SSE frame).

    1.0: ``result.task`` / ``.message`` / ``.statusUpdate`` / ``.artifactUpdate``;
    0.3: the event itself with ``kind``, status updates with ``final``. Close the
    stream after a Message, or after a status update whose ``ends_stream`` is true.
    """
    return rpc_result(request_id, result_to_wire(event, version))


def encode_response(response: A2AResponse, version: str | None) -> dict[str, Any]:
    """The JSON-RPC response for a decoded :class:`A2AResponse` (its round trip)."""
    return rpc_result(
        response.id, result_to_wire(response.result, version, wrapped=response.wrapped)
    )


def sse_frame(event: Mapping[str, Any]) -> bytes:
    """An SSE ``data:`` frame, ended by the blank line some clients need to see it."""
    return b"data: " + msgspec.json.encode(event) + b"\n\n"


_RESULT_V03: Final[dict[str, type[msgspec.Struct]]] = {
    "task": _TaskV03,
    "message": _MessageV03,
    "status-update": _StatusUpdateV03,
    "artifact-update": _ArtifactUpdateV03,
}
_RESULT_V10: Final[dict[str, type[msgspec.Struct]]] = {
    "task": _TaskV10,
    "message": _MessageV10,
    "statusUpdate": _StatusUpdateV10,
    "artifactUpdate": _ArtifactUpdateV10,
}


def _from_struct(s: msgspec.Struct, where: str, err: ErrorClass) -> Result:
    if isinstance(s, _TaskV10 | _TaskV03):
        return _task_from(s, where, err)
    if isinstance(s, _MessageV10 | _MessageV03):
        return _message_from(s, where, err)
    if isinstance(s, _StatusUpdateV10 | _StatusUpdateV03):
        return StatusUpdate(
            task_id=s.task_id,
            context_id=s.context_id,
            status=_status_from(s.status, f"{where}.status", err),
            final=s.final,
            metadata=s.metadata,
        )
    if isinstance(s, _ArtifactUpdateV10 | _ArtifactUpdateV03):
        return ArtifactUpdate(
            task_id=s.task_id,
            context_id=s.context_id,
            artifact=_artifact_from(s.artifact, f"{where}.artifact", err),
            append=s.append,
            last_chunk=s.last_chunk,
            metadata=s.metadata,
        )
    assert isinstance(s, _TaskListV10)
    return TaskList(
        tasks=[_task_from(t, f"{where}.tasks[{i}]", err) for i, t in enumerate(s.tasks)],
        next_page_token=s.next_page_token,
        page_size=s.page_size,
        total_size=s.total_size,
    )


def result_from_wire(
    obj: Any,
    version: A2AVersion,
    *,
    where: str = "result",
    err: ErrorClass = InvalidAgentResponseError,
) -> tuple[Result, bool]:
    """A JSON-RPC ``result`` (or a push notification body) and whether it was wrapped."""
    if not isinstance(obj, dict):
        raise err(f"`{where}` must be an object")
    if version == V03:
        kind = obj.get("kind")
        struct = _RESULT_V03.get(kind) if isinstance(kind, str) else None
        if struct is None:
            raise err(f"`{where}.kind` must be one of {', '.join(_RESULT_V03)} (got {kind!r})")
        return _from_struct(_convert(obj, struct, where, err), where, err), False
    keys = [k for k in _RESULT_V10 if k in obj]
    if len(keys) == 1:
        inner = f"{where}.{keys[0]}"
        s = _convert(obj[keys[0]], _RESULT_V10[keys[0]], inner, err)
        return _from_struct(s, inner, err), True
    if keys:
        raise err(f"`{where}` must hold exactly one of {', '.join(_RESULT_V10)}")
    bare: type[msgspec.Struct] = _TaskListV10 if "tasks" in obj else _TaskV10
    return _from_struct(_convert(obj, bare, where, err), where, err), False


def _response_id(obj: Mapping[str, Any], err: ErrorClass) -> str | int | None:
    rid = obj.get("id")
    if rid is None or isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return rid
    raise err(f"`id` must be a string, an integer or null (got {rid!r:.50})")


def decode_response(body: Any, version: str | None) -> A2AResponse:
    """A JSON-RPC response (or SSE frame) from an A2A agent.

    An error response raises the taxonomy error it carries; anything that is not a
    valid A2A response raises :class:`InvalidAgentResponseError`.
    """
    v = negotiate_version(version)
    obj = parse_json(body, InvalidAgentResponseError)
    if not isinstance(obj, dict):
        raise InvalidAgentResponseError("a JSON-RPC response must be an object")
    if "error" in obj:
        raise error_from_response(obj)
    if obj.get("jsonrpc") != "2.0":
        raise InvalidAgentResponseError('`jsonrpc` must be "2.0"')
    if "result" not in obj:
        raise InvalidAgentResponseError("a JSON-RPC response needs `result` or `error`")
    rid = _response_id(obj, InvalidAgentResponseError)
    result, wrapped = result_from_wire(obj["result"], v)
    return A2AResponse(id=rid, result=result, wrapped=wrapped)


# -- requests ---------------------------------------------------------------------------

_TASK_REF_METHODS: Final = frozenset(
    {Method.GET_TASK, Method.CANCEL_TASK, Method.SUBSCRIBE_TO_TASK}
)
_SEND_METHODS: Final = frozenset({Method.SEND_MESSAGE, Method.SEND_STREAMING_MESSAGE})


def _request_id(obj: Mapping[str, Any]) -> str | int | None:
    return _response_id(obj, InvalidRequestError)


def _method(name: str, version: A2AVersion) -> Method:
    """The method ``name`` means in ``version``; -32009 if it is the other version's."""
    table, other = (METHODS_V10, METHODS_V03) if version == V10 else (METHODS_V03, METHODS_V10)
    found = table.get(name)
    if found is not None:
        return found
    if name in other:
        if version == V03:
            hint = "send the header `A2A-Version: 1.0`"
        else:
            hint = f"use {METHODS_V03[name].value} (or drop the A2A-Version header)"
        raise VersionNotSupportedError(
            f"method {name!r} is not an A2A {version} method: {hint}",
            metadata={"method": name, "requested": version},
        )
    raise MethodNotFoundError(f"unknown A2A {version} method {name!r}", metadata={"method": name})


def _config(obj: dict[str, Any] | None, where: str) -> SendConfig | None:
    if obj is None:
        return None
    c = _convert(obj, _Config, where, InvalidParamsError)
    return SendConfig(
        accepted_output_modes=c.accepted_output_modes,
        history_length=c.history_length,
        blocking=c.blocking,
        return_immediately=c.return_immediately,
        extra=_extra(obj, _Config),
    )


def _send_params(obj: dict[str, Any], version: A2AVersion) -> SendParams:
    struct: type[_SendParamsV10 | _SendParamsV03]
    struct = _SendParamsV10 if version == V10 else _SendParamsV03
    p = _convert(obj, struct, "params", InvalidParamsError)
    return SendParams(
        message=_message_from(p.message, "params.message", InvalidParamsError),
        configuration=_config(p.configuration, "params.configuration"),
        metadata=p.metadata,
        tenant=p.tenant if isinstance(p, _SendParamsV10) else None,
        extra=_extra(obj, struct),
    )


def _task_ref(obj: dict[str, Any], version: A2AVersion) -> TaskRef:
    struct: type[_TaskRefV10 | _TaskRefV03] = _TaskRefV10 if version == V10 else _TaskRefV03
    p = _convert(obj, struct, "params", InvalidParamsError)
    return TaskRef(
        id=p.id,
        history_length=p.history_length,
        metadata=p.metadata,
        tenant=p.tenant if isinstance(p, _TaskRefV10) else None,
        extra=_extra(obj, struct),
    )


def _list_tasks(obj: dict[str, Any]) -> ListTasksParams:
    p = _convert(obj, _ListTasksV10, "params", InvalidParamsError)
    return ListTasksParams(
        context_id=p.context_id,
        status=None if p.status is None else state_from_wire(p.status),
        page_size=p.page_size,
        page_token=p.page_token,
        history_length=p.history_length,
        status_timestamp_after=p.status_timestamp_after,
        include_artifacts=p.include_artifacts,
        tenant=p.tenant,
        extra=_extra(obj, _ListTasksV10),
    )


def _params(method: Method, params: Any, version: A2AVersion) -> Params:
    if params is None and method in (Method.LIST_TASKS, Method.GET_EXTENDED_AGENT_CARD):
        return ListTasksParams() if method is Method.LIST_TASKS else None
    if not isinstance(params, dict):
        raise InvalidParamsError(f"`params` of {method.value} must be an object")
    if method in _SEND_METHODS:
        return _send_params(params, version)
    if method in _TASK_REF_METHODS:
        return _task_ref(params, version)
    if method is Method.LIST_TASKS:
        return _list_tasks(params)
    return params


def _decode_request(obj: dict[str, Any], version: str | None) -> A2ARequest:
    rid = _request_id(obj)
    if obj.get("jsonrpc") != "2.0":
        raise InvalidRequestError('`jsonrpc` must be "2.0"')
    name = obj.get("method")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("`method` must be a non-empty string")
    v = negotiate_version(version)
    method = _method(name, v)
    return A2ARequest(
        method=method,
        version=v,
        id=rid,
        params=_params(method, obj.get("params"), v),
        wire_method=name,
        notification="id" not in obj,
    )


def decode_request(body: Any, version: str | None) -> A2ARequest:
    """A JSON-RPC request to an A2A server, for the ``A2A-Version`` header ``version``.

    ``body`` is the parsed JSON or its raw bytes/str. Errors are :class:`A2AError`
    subclasses carrying the JSON-RPC code to answer with and, when the request's
    ``id`` could be read, that id as ``request_id``.
    """
    obj = parse_json(body)
    if isinstance(obj, list):
        raise InvalidRequestError("batch requests are not supported by A2A")
    if not isinstance(obj, dict):
        raise InvalidRequestError("a JSON-RPC request must be an object")
    try:
        return _decode_request(obj, version)
    except A2AError as e:
        rid = obj.get("id")
        if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
            e.request_id = rid
        raise


def _config_to_wire(c: SendConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.accepted_output_modes is not None:
        out["acceptedOutputModes"] = c.accepted_output_modes
    if c.history_length is not None:
        out["historyLength"] = c.history_length
    if c.blocking is not None:
        out["blocking"] = c.blocking
    if c.return_immediately is not None:
        out["returnImmediately"] = c.return_immediately
    return {**out, **(c.extra or {})}


def _optional(out: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``out`` plus the ``fields`` that are set (camelCase names given as keywords)."""
    out.update({k: v for k, v in fields.items() if v is not None})
    return out


def params_to_wire(params: Params, version: A2AVersion) -> dict[str, Any] | None:
    """A request's ``params`` in ``version``'s JSON."""
    if params is None or isinstance(params, dict):
        return params
    extra = params.extra or {}
    if isinstance(params, SendParams):
        out = _optional(
            {"message": message_to_wire(params.message, version)},
            configuration=None
            if params.configuration is None
            else _config_to_wire(params.configuration),
            metadata=params.metadata,
            tenant=params.tenant,
        )
    elif isinstance(params, TaskRef):
        out = _optional(
            {"id": params.id},
            historyLength=params.history_length,
            metadata=params.metadata,
            tenant=params.tenant,
        )
    else:
        out = _optional(
            {},
            contextId=params.context_id,
            status=None if params.status is None else state_to_wire(params.status, version),
            pageSize=params.page_size,
            pageToken=params.page_token,
            historyLength=params.history_length,
            statusTimestampAfter=params.status_timestamp_after,
            includeArtifacts=params.include_artifacts,
            tenant=params.tenant,
        )
    return {**out, **extra}


def encode_request(request: A2ARequest) -> dict[str, Any]:
    """The JSON-RPC request object for ``request`` in ``request.version``."""
    v = request.version
    table = METHODS_V10 if v == V10 else METHODS_V03
    name = request.wire_method if table.get(request.wire_method) is request.method else None
    name = name or wire_method(request.method, v)
    if name is None:
        raise UnsupportedOperationError(f"{request.method.value} does not exist in A2A {v}")
    out: dict[str, Any] = {"jsonrpc": "2.0"}
    if not request.notification:
        out["id"] = request.id
    out["method"] = name
    params = params_to_wire(request.params, v)
    if params is not None:
        out["params"] = params
    return out
