"""ACP's wire models (msgspec Structs), its run states as the shared task states,
and message content as parts."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

import msgspec

# Shared with the other edge codecs (actorbus.codecs.common); re-exported, as
# they were first written here.
from actorbus.codecs.common import (
    json_text,
    json_value,
)
from actorbus.codecs.errors import (
    DecodeError,
    UnsupportedError,
)

# -- the wire models ----------------------------------------------------------------
#
# msgspec Structs, not pydantic models: converting a parsed request into them is
# several times cheaper, and decode runs for every message crossing the edge.
# ``msgspec.convert(obj, Model)`` validates; ``msgspec.to_builtins`` dumps.

RunStatus = Literal[
    "created", "in-progress", "awaiting", "cancelling", "cancelled", "completed", "failed"
]
RunMode = Literal["sync", "async", "stream"]
ErrorCode = Literal["server_error", "invalid_input", "not_found"]

ROLE_PATTERN = r"^(user|agent(\/[a-zA-Z0-9_\-]+)?)$"
ROLE_RE = re.compile(ROLE_PATTERN)
Role = Annotated[str, msgspec.Meta(pattern=ROLE_PATTERN)]
ENVELOPE_PART_TYPE = "application/vnd.actorbus.envelope+json"
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class MessagePart(msgspec.Struct, omit_defaults=True):
    """One piece of a message: inline ``content`` or a ``content_url``, never both.

    ``metadata`` is any object here (the SDK admits only its citation/trajectory
    kinds; actorbus never writes it). Unknown fields are accepted (the SDK keeps
    them); decode works on the parts as sent, so they are not lost either.
    """

    name: str | None = None
    content_type: str | None = "text/plain"
    content: str | None = None
    content_encoding: Literal["plain", "base64"] | None = "plain"
    content_url: str | None = None
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.content is not None and self.content_url is not None:
            raise ValueError("a part has content or content_url, not both")


class Message(msgspec.Struct, omit_defaults=True):
    parts: list[MessagePart]
    role: Role = "user"
    created_at: datetime | None = None
    completed_at: datetime | None = None


class MessageAwait(msgspec.Struct):
    """Both ``await_request`` (run -> client) and ``await_resume`` (client -> run)."""

    message: Message
    type: Literal["message"] = "message"


class AcpErrorBody(msgspec.Struct, omit_defaults=True):
    """ACP's error object; ``code`` stays a str because the SDK allows any."""

    code: str
    message: str
    data: Any = None


class Run(msgspec.Struct, omit_defaults=True):
    run_id: str
    agent_name: str
    session_id: str | None = None
    status: RunStatus = "created"
    await_request: MessageAwait | None = None
    output: list[Message] = msgspec.field(default_factory=list)
    error: AcpErrorBody | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None


class RunCreateRequest(msgspec.Struct, omit_defaults=True):
    agent_name: str
    input: list[Message]
    mode: RunMode = "sync"
    session_id: str | None = None
    session: dict[str, Any] | None = None


class RunResumeRequest(msgspec.Struct, omit_defaults=True):
    """``run_id`` is optional: the SDK sends it only in the URL."""

    await_resume: MessageAwait
    mode: RunMode = "sync"
    run_id: str | None = None


RunEventType = Literal[
    "run.created",
    "run.in-progress",
    "run.awaiting",
    "run.completed",
    "run.failed",
    "run.cancelled",
]


class RunEvent(msgspec.Struct):
    type: RunEventType
    run: Run


class MessageEvent(msgspec.Struct):
    type: Literal["message.created", "message.completed"]
    message: Message


class MessagePartEvent(msgspec.Struct):
    type: Literal["message.part"]
    part: MessagePart


class ErrorEvent(msgspec.Struct):
    type: Literal["error"]
    error: AcpErrorBody


class GenericEvent(msgspec.Struct):
    type: Literal["generic"]
    generic: dict[str, Any]


Event = RunEvent | MessageEvent | MessagePartEvent | ErrorEvent | GenericEvent
EVENT_MODEL: dict[str, type[Event]] = {
    **dict.fromkeys(
        get_args(RunEventType),
        RunEvent,
    ),
    "message.created": MessageEvent,
    "message.completed": MessageEvent,
    "message.part": MessagePartEvent,
    "error": ErrorEvent,
    "generic": GenericEvent,
}
EVENT_TYPES: tuple[str, ...] = tuple(EVENT_MODEL)
EVENT_OF_STATUS = {
    "created": "run.created",
    "in-progress": "run.in-progress",
    "awaiting": "run.awaiting",
    "completed": "run.completed",
    "failed": "run.failed",
    "cancelled": "run.cancelled",
}

# -- run state <-> the shared task state ----------------------------------------------

#: ACP run status -> the task state A2A (and the gateway's task store) use.
#: ``cancelling`` is still running until it stops, so it is ``working``.
TASK_STATE_OF_RUN: dict[str, str] = {
    "created": "submitted",
    "in-progress": "working",
    "awaiting": "input-required",
    "cancelling": "working",
    "cancelled": "canceled",
    "completed": "completed",
    "failed": "failed",
}
#: The reverse. ACP has no ``auth-required`` (the run awaits the client either
#: way, so ``awaiting``) and no ``rejected`` (a refused run is a failed run).
RUN_STATUS_OF_TASK: dict[str, str] = {
    "submitted": "created",
    "working": "in-progress",
    "input-required": "awaiting",
    "auth-required": "awaiting",
    "completed": "completed",
    "failed": "failed",
    "canceled": "cancelled",
    "rejected": "failed",
}


def task_state(run_status: str) -> str:
    """The shared task state for an ACP run status (UnsupportedError if unknown)."""
    try:
        return TASK_STATE_OF_RUN[run_status]
    except KeyError:
        raise UnsupportedError(f"unknown ACP run status {run_status!r}") from None


def run_status(state: str) -> str:
    """The ACP run status for a shared task state (lossy: see RUN_STATUS_OF_TASK)."""
    try:
        return RUN_STATUS_OF_TASK[state]
    except KeyError:
        raise UnsupportedError(f"unknown task state {state!r}") from None


# -- content <-> parts ----------------------------------------------------------------
#
# Decoding works on the parts as sent (plain dicts), after ``convert`` checked
# them: the "parts" form must give back exactly what arrived, unknown fields too.

_PART_FIELDS = frozenset(MessagePart.__struct_fields__)
Part = dict[str, Any]


def _as_parts(content: Any) -> list[Part] | None:
    """The parts of a ``{"parts": [...]}`` content, or None if it is not that."""
    if not isinstance(content, dict) or len(content) != 1:
        return None
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        return None
    for part in parts:
        if not isinstance(part, dict) or not _PART_FIELDS.issuperset(part):
            return None
    try:
        msgspec.convert(parts, list[MessagePart])
    except msgspec.ValidationError:
        return None
    return parts


def content_parts(content: Any) -> tuple[list[Part], str]:
    """The parts for an envelope's content, and the form to rebuild it from them."""
    if content is None:
        return [], "none"
    if isinstance(content, str):
        return [{"content_type": "text/plain", "content": content}], "text"
    if isinstance(content, bytes):
        part = {
            "content_type": "application/octet-stream",
            "content_encoding": "base64",
            "content": base64.b64encode(content).decode(),
        }
        return [part], "bytes"
    parts = _as_parts(content)
    if parts is not None:
        return [dict(p) for p in parts], "parts"
    return [{"content_type": "application/json", "content": json_text(content)}], "json"


def _b64(text: Any) -> bytes:
    try:
        return base64.b64decode(text or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"an ACP base64 part is not valid base64: {exc}") from exc


def _present(part: Part) -> set[str]:
    """The fields a part really has: the SDK writes every field, most as null."""
    return {key for key, value in part.items() if value is not None}


_REF_FIELDS = frozenset({"content_url", "content_type", "content_encoding"})
_SIMPLE_FIELDS = frozenset({"content", "content_type", "content_encoding"})


def is_url_ref(part: Part) -> bool:
    """A part that only points somewhere (no name, metadata or own content type)
    is an artifact ref; a typed or named URL part stays a content part."""
    return (
        part.get("content_url") is not None
        and _REF_FIELDS.issuperset(_present(part))
        and part.get("content_type") in (None, "text/plain")
        and part.get("content_encoding") in (None, "plain")
    )


def _simple_value(part: Part) -> tuple[bool, Any]:
    """(True, value) for a part that is plainly text, JSON or bytes."""
    if not _SIMPLE_FIELDS.issuperset(_present(part)):
        return False, None
    kind = part.get("content_type", "text/plain")
    encoding = part.get("content_encoding", "plain")
    plain = encoding in (None, "plain")
    if plain and kind in (None, "text/plain"):
        return True, part.get("content") or ""
    if plain and kind == "application/json" and part.get("content") is not None:
        return True, json_value(part["content"], "an ACP application/json part")
    if encoding == "base64" and kind == "application/octet-stream":
        return True, _b64(part.get("content"))
    return False, None


def parts_content(parts: list[Part]) -> Any:
    """Native parts (no envelope part) -> envelope content, by the rules above."""
    if not parts:
        return None
    if len(parts) == 1:
        simple, value = _simple_value(parts[0])
        if simple:
            return value
    return {"parts": parts}


def content_by_form(parts: list[Part], form: Any) -> Any:
    """Rebuild content exactly as the envelope part's ``form`` says it was."""
    if form == "none" and not parts:
        return None
    if form == "parts" and parts:
        return {"parts": parts}
    if len(parts) != 1 or form not in ("text", "bytes", "json"):
        raise DecodeError(f"ACP message content does not match its form {form!r}")
    text = parts[0].get("content")
    if form == "text":
        return text or ""
    if form == "bytes":
        return _b64(text)
    return json_value(text or "", "an ACP application/json part")
