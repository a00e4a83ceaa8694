"""A2A 1.0 and 0.3 JSON, to and from the neutral task model (:mod:`actorbus.codecs.tasks`)
and A2A's own requests and results (:mod:`actorbus.codecs.a2a.types`).

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

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from actorbus.codecs.a2a.errors import (
    V03,
    V10,
    A2AVersion,
    InvalidAgentResponseError,
    InvalidParamsError,
    UnsupportedOperationError,
    error_from_response,
    negotiate_version,
)
from actorbus.codecs.a2a.shapes import (
    ArtifactUpdateV03,
    ArtifactUpdateV10,
    ArtifactV03,
    ArtifactV10,
    ErrorClass,
    FileV03,
    MessageV03,
    MessageV10,
    Metadata,
    PartV03,
    PartV10,
    StatusUpdateV03,
    StatusUpdateV10,
    StatusV03,
    StatusV10,
    TaskListV10,
    TaskV03,
    TaskV10,
    b64decode,
    b64encode,
    convert_shape,
    detect_version,
    parse_json,
)
from actorbus.codecs.a2a.types import (
    A2AResponse,
    Result,
    StreamEvent,
    TaskList,
    state_from_wire,
    state_to_wire,
)
from actorbus.codecs.tasks import (
    Artifact,
    ArtifactUpdate,
    Message,
    Part,
    StatusUpdate,
    Task,
    TaskStatus,
)

# -- parts --------------------------------------------------------------------------

_ACTORBUS: Final = "actorbus"  # key of our hints in a 0.3 part's metadata


def _part_from_v10(p: PartV10, where: str, err: ErrorClass) -> Part:
    _check_named_kind(p.type, where, err)
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
    value = b64encode(p.value) if p.kind == "raw" else p.value
    return {p.kind: value, **p.extras()}


def _hints_v03(metadata: Metadata) -> tuple[Metadata, dict[str, Any]]:
    """A 0.3 part's own metadata, and our hints (what 0.3 has no field for).

    The one loss: an empty ``metadata: {}`` sent beside our hints comes back absent.
    """
    if not metadata or not isinstance(metadata.get(_ACTORBUS), dict):
        return metadata, {}
    rest = {k: v for k, v in metadata.items() if k != _ACTORBUS}
    return (rest or None), metadata[_ACTORBUS]


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_PART_KINDS: Final = frozenset({"text", "file", "data", "raw", "url"})


def _check_named_kind(named: Any, where: str, err: ErrorClass) -> None:
    """A part that says it is of a kind A2A does not have is refused: taking it
    as text would hand the actor something the client did not send."""
    if named is not None and named not in _PART_KINDS:
        raise err(
            f"`{where}.type`: {named!r} is not a kind of A2A part (text, file or data; "
            "in 1.0 text, raw, url or data)"
        )


def _part_from_v03(p: PartV03, where: str, err: ErrorClass) -> Part:
    _check_named_kind(p.type, where, err)
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


def _file_from_v03(f: FileV03 | None, metadata: Metadata, where: str, err: ErrorClass) -> Part:
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


def message_from(m: MessageV10 | MessageV03, where: str, err: ErrorClass) -> Message:
    if isinstance(m, MessageV10):
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
    struct: type[MessageV10 | MessageV03] = MessageV10 if version == V10 else MessageV03
    return message_from(convert_shape(obj, struct, where, err), where, err)


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


def _status_from(s: StatusV10 | StatusV03, where: str, err: ErrorClass) -> TaskStatus:
    message = None if s.message is None else message_from(s.message, f"{where}.message", err)
    return TaskStatus(state=state_from_wire(s.state), message=message, timestamp=s.timestamp)


def _status_to(s: TaskStatus, version: A2AVersion) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state_to_wire(s.state, version)}
    if s.message is not None:
        out["message"] = message_to_wire(s.message, version)
    if s.timestamp is not None:
        out["timestamp"] = s.timestamp
    return out


def _artifact_from(a: ArtifactV10 | ArtifactV03, where: str, err: ErrorClass) -> Artifact:
    if isinstance(a, ArtifactV10):
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


def _task_from(t: TaskV10 | TaskV03, where: str, err: ErrorClass) -> Task:
    wire_artifacts: Sequence[ArtifactV10 | ArtifactV03] | None = t.artifacts
    wire_history: Sequence[MessageV10 | MessageV03] | None = t.history
    artifacts = history = None
    if wire_artifacts is not None:
        artifacts = [
            _artifact_from(a, f"{where}.artifacts[{i}]", err) for i, a in enumerate(wire_artifacts)
        ]
    if wire_history is not None:
        history = [
            message_from(m, f"{where}.history[{i}]", err) for i, m in enumerate(wire_history)
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


def rpc_result(request_id: str | int | None, result: Any) -> dict[str, Any]:
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
    "task": TaskV03,
    "message": MessageV03,
    "status-update": StatusUpdateV03,
    "artifact-update": ArtifactUpdateV03,
}
_RESULT_V10: Final[dict[str, type[msgspec.Struct]]] = {
    "task": TaskV10,
    "message": MessageV10,
    "statusUpdate": StatusUpdateV10,
    "artifactUpdate": ArtifactUpdateV10,
}


def _from_struct(s: msgspec.Struct, where: str, err: ErrorClass) -> Result:
    if isinstance(s, TaskV10 | TaskV03):
        return _task_from(s, where, err)
    if isinstance(s, MessageV10 | MessageV03):
        return message_from(s, where, err)
    if isinstance(s, StatusUpdateV10 | StatusUpdateV03):
        return StatusUpdate(
            task_id=s.task_id,
            context_id=s.context_id,
            status=_status_from(s.status, f"{where}.status", err),
            final=s.final,
            metadata=s.metadata,
        )
    if isinstance(s, ArtifactUpdateV10 | ArtifactUpdateV03):
        return ArtifactUpdate(
            task_id=s.task_id,
            context_id=s.context_id,
            artifact=_artifact_from(s.artifact, f"{where}.artifact", err),
            append=s.append,
            last_chunk=s.last_chunk,
            metadata=s.metadata,
        )
    assert isinstance(s, TaskListV10)
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
        return _from_struct(convert_shape(obj, struct, where, err), where, err), False
    keys = [k for k in _RESULT_V10 if k in obj]
    if len(keys) == 1:
        inner = f"{where}.{keys[0]}"
        s = convert_shape(obj[keys[0]], _RESULT_V10[keys[0]], inner, err)
        return _from_struct(s, inner, err), True
    if keys:
        raise err(f"`{where}` must hold exactly one of {', '.join(_RESULT_V10)}")
    bare: type[msgspec.Struct] = TaskListV10 if "tasks" in obj else TaskV10
    return _from_struct(convert_shape(obj, bare, where, err), where, err), False


def response_id(obj: Mapping[str, Any], err: ErrorClass) -> str | int | None:
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
    rid = response_id(obj, InvalidAgentResponseError)
    result, wrapped = result_from_wire(obj["result"], v)
    return A2AResponse(id=rid, result=result, wrapped=wrapped)
