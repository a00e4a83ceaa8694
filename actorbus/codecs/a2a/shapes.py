"""The JSON shapes of A2A 1.0 and 0.3 as msgspec Structs (one set per version,
so an error names a field as the sender wrote it), and the small helpers every
A2A decoder uses (JSON, base64, version detection)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from actorbus.codecs.a2a.errors import (
    V03,
    V10,
    A2AError,
    A2AParseError,
    A2AVersion,
    InvalidParamsError,
)
from actorbus.codecs.common import read_json
from actorbus.codecs.errors import DecodeError

T = TypeVar("T")
ErrorClass = type[A2AError]

_Id = Annotated[str, msgspec.Meta(min_length=1)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
Metadata = dict[str, Any] | None

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


class PartV10(_W):
    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = msgspec.UNSET  # null is a valid data value, so absence is UNSET
    media_type: str | None = None
    filename: str | None = None
    metadata: Metadata = None
    type: Any = None  # not A2A's: a part that names another kind is refused, not guessed


class MessageV10(_W):
    message_id: _Id
    role: Literal["ROLE_USER", "ROLE_AGENT", "user", "agent"]
    parts: Annotated[list[PartV10], msgspec.Meta(min_length=1)]
    context_id: str | None = None
    task_id: str | None = None
    metadata: Metadata = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class StatusV10(_W):
    state: _StateV10
    message: MessageV10 | None = None
    timestamp: str | None = None


class ArtifactV10(_W):
    artifact_id: _Id
    parts: Annotated[list[PartV10], msgspec.Meta(min_length=1)]
    name: str | None = None
    description: str | None = None
    metadata: Metadata = None
    extensions: list[str] | None = None


class TaskV10(_W):
    id: _Id
    status: StatusV10
    context_id: str | None = None
    artifacts: list[ArtifactV10] | None = None
    history: list[MessageV10] | None = None
    metadata: Metadata = None


class StatusUpdateV10(_W):
    task_id: _Id
    status: StatusV10
    context_id: str | None = None
    final: bool | None = None  # not in 1.0; early drafts had it
    metadata: Metadata = None


class ArtifactUpdateV10(_W):
    task_id: _Id
    artifact: ArtifactV10
    context_id: str | None = None
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: Metadata = None


class TaskListV10(_W):
    tasks: list[TaskV10]
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0


# -- A2A 0.3 wire shapes ----------------------------------------------------------------


class FileV03(_W):
    data: str | None = msgspec.field(default=None, name="bytes")
    uri: str | None = None
    name: str | None = None
    mime_type: str | None = None


class PartV03(_W):
    kind: Literal["text", "file", "data"] | None = None  # inferred when missing
    text: str | None = None
    file: FileV03 | None = None
    data: dict[str, Any] | None = None
    metadata: Metadata = None
    type: Any = None  # not A2A's: a part that names another kind is refused, not guessed


class MessageV03(_W):
    message_id: _Id
    role: Literal["user", "agent"]
    parts: Annotated[list[PartV03], msgspec.Meta(min_length=1)]
    kind: Literal["message"] | None = None
    context_id: str | None = None
    task_id: str | None = None
    metadata: Metadata = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class StatusV03(_W):
    state: _StateV03
    message: MessageV03 | None = None
    timestamp: str | None = None


class ArtifactV03(_W):
    artifact_id: _Id
    parts: Annotated[list[PartV03], msgspec.Meta(min_length=1)]
    name: str | None = None
    description: str | None = None
    metadata: Metadata = None
    extensions: list[str] | None = None


class TaskV03(_W):
    id: _Id
    context_id: str
    status: StatusV03
    kind: Literal["task"] | None = None
    artifacts: list[ArtifactV03] | None = None
    history: list[MessageV03] | None = None
    metadata: Metadata = None


class StatusUpdateV03(_W):
    task_id: _Id
    context_id: str
    status: StatusV03
    final: bool | None = None
    kind: Literal["status-update"] | None = None
    metadata: Metadata = None


class ArtifactUpdateV03(_W):
    task_id: _Id
    context_id: str
    artifact: ArtifactV03
    kind: Literal["artifact-update"] | None = None
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: Metadata = None


# -- request params (both versions) ----------------------------------------------------


class SendParamsV10(_W):
    message: MessageV10
    configuration: dict[str, Any] | None = None
    metadata: Metadata = None
    tenant: str | None = None


class SendParamsV03(_W):
    message: MessageV03
    configuration: dict[str, Any] | None = None
    metadata: Metadata = None


class ConfigShape(_W):
    accepted_output_modes: list[str] | None = None
    history_length: _Count | None = None
    blocking: bool | None = None
    return_immediately: bool | None = None


class TaskRefV10(_W):
    id: _Id
    history_length: _Count | None = None
    metadata: Metadata = None
    tenant: str | None = None


class TaskRefV03(_W):
    id: _Id
    history_length: _Count | None = None
    metadata: Metadata = None


class ListTasksV10(_W):
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
    for s in (SendParamsV10, SendParamsV03, ConfigShape, TaskRefV10, TaskRefV03, ListTasksV10)
}


def extra_fields(obj: Mapping[str, Any], struct: type[msgspec.Struct]) -> dict[str, Any] | None:
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


def convert_shape(obj: Any, struct: type[T], where: str, err: ErrorClass) -> T:
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
