"""The task model every protocol with tasks maps onto, and content as parts.

A2A tasks, ACP runs, MCP tool calls and ANP or Agora requests all become these
in the gateway (``services/gateway/core.py``), and each protocol's codec or edge
maps them to and from its own wire: A2A's versions in
:mod:`actorbus.codecs.a2a.wire`, ACP's run states in :mod:`actorbus.codecs.acp`.
The fields follow A2A 1.0's names in snake_case, A2A's being the richest task
model of the protocols actorbus speaks; nothing here is any one protocol's
spelling on the wire.

An actor's content becomes parts (:func:`parts_from_content`) and parts become
content again (:func:`content_from_parts`), with the hints that restore how
the parts looked when the content still fits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final, Literal, cast

import msgspec

from actorbus.codecs.errors import EncodeError

Role = Literal["user", "agent"]
PartKind = Literal["text", "raw", "url", "data"]


class TaskState(StrEnum):
    """A task's lifecycle state; the value is its name in kebab case (as A2A 0.3
    spells it; each protocol maps it to its own)."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"
    UNKNOWN = "unknown"  # a state another party sent that no protocol here names

    @property
    def terminal(self) -> bool:
        """No further updates will come: the task is done for good."""
        return self in _TERMINAL

    @property
    def interrupted(self) -> bool:
        """The task waits for the client (more input, or credentials)."""
        return self in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED)

    @property
    def ends_stream(self) -> bool:
        """A status update in this state is the last event of a stream."""
        return self.terminal or self.interrupted


_TERMINAL: Final = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)


PART_KINDS: Final[frozenset[str]] = frozenset({"text", "raw", "url", "data"})
_BYTES = bytes | bytearray | memoryview


class _Model(msgspec.Struct, frozen=True, kw_only=True):
    """Task objects: immutable, cheap to build, typed."""


class Part(_Model, frozen=True, kw_only=True):
    """One piece of content. ``value``: str for text and url, bytes for raw, any
    JSON value for data."""

    kind: PartKind
    value: Any
    media_type: str | None = None
    filename: str | None = None
    metadata: dict[str, Any] | None = None

    def extras(self) -> dict[str, Any]:
        """``mediaType``, ``filename`` and ``metadata`` as a plain part object spells
        them (A2A 1.0 does too), when set."""
        out: dict[str, Any] = {}
        if self.media_type is not None:
            out["mediaType"] = self.media_type
        if self.filename is not None:
            out["filename"] = self.filename
        if self.metadata is not None:
            out["metadata"] = self.metadata
        return out


class Message(_Model, frozen=True, kw_only=True):
    message_id: str
    role: Role = "user"
    parts: list[Part]
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class TaskStatus(_Model, frozen=True, kw_only=True):
    state: TaskState
    message: Message | None = None
    timestamp: str | None = None  # ISO 8601, UTC, as the sender wrote it


class Artifact(_Model, frozen=True, kw_only=True):
    artifact_id: str
    parts: list[Part]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class Task(_Model, frozen=True, kw_only=True):
    id: str
    status: TaskStatus
    context_id: str | None = None
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class StatusUpdate(_Model, frozen=True, kw_only=True):
    """A task's status changed. ``final`` is 0.3's end-of-stream flag; None means
    "derive it from the state" (1.0 has no such flag)."""

    task_id: str
    context_id: str | None = None
    status: TaskStatus
    final: bool | None = None
    metadata: dict[str, Any] | None = None

    @property
    def ends_stream(self) -> bool:
        return self.final if self.final is not None else self.status.state.ends_stream


class ArtifactUpdate(_Model, frozen=True, kw_only=True):
    task_id: str
    context_id: str | None = None
    artifact: Artifact
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: dict[str, Any] | None = None


# -- content <-> parts --------------------------------------------------------------


def kind_of(content: Any) -> PartKind:
    if isinstance(content, str):
        return "text"
    if isinstance(content, _BYTES):
        return "raw"
    return "data"


def _check_json(value: Any) -> None:
    """EncodeError unless ``value`` is JSON (a data part can hold nothing else)."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v is None or isinstance(v, str | int | float):
            continue
        if isinstance(v, dict | list | tuple):
            if id(v) in seen:
                raise EncodeError("content refers to itself; it cannot become JSON")
            seen.add(id(v))
            if isinstance(v, dict):
                if not all(isinstance(k, str) for k in v):
                    raise EncodeError("data parts are JSON: content has a non-string key")
                stack.extend(v.values())
            else:
                stack.extend(v)
            continue
        raise EncodeError(
            f"data parts are JSON: content holds a {type(v).__name__} "
            "(binary content goes in as the whole content, i.e. a raw part)"
        )


def _fits(kind: str, content: Any) -> bool:
    if kind in ("text", "url"):
        return isinstance(content, str)
    if kind == "raw":
        return isinstance(content, _BYTES)
    return kind == "data" and not isinstance(content, _BYTES)


def _part(kind: PartKind, value: Any, desc: Mapping[str, Any] | None = None) -> Part:
    if kind == "raw":
        value = bytes(value)
    elif kind == "data":
        _check_json(value)
    if not desc:
        return Part(kind=kind, value=value)
    media_type, filename, metadata = (
        desc.get("mediaType"),
        desc.get("filename"),
        desc.get("metadata"),
    )
    return Part(
        kind=kind,
        value=value,
        media_type=media_type if isinstance(media_type, str) else None,
        filename=filename if isinstance(filename, str) else None,
        metadata=metadata if isinstance(metadata, dict) else None,
    )


def _part_from_plain(item: Any) -> Part | None:
    """``{"text": ...}`` (or raw/url/data, + mediaType/filename/metadata) as a Part."""
    if not isinstance(item, dict):
        return None
    kinds = [k for k in item if k in PART_KINDS]
    if len(kinds) != 1 or not _fits(kinds[0], item[kinds[0]]):
        return None
    return _part(cast(PartKind, kinds[0]), item[kinds[0]], item)


def _plain_part(p: Part) -> dict[str, Any]:
    return {p.kind: p.value, **p.extras()}


def parts_from_content(content: Any, hints: Mapping[str, Any] | None = None) -> list[Part]:
    """The parts for an envelope's content; ``hints`` (what
    :func:`content_from_parts` returned, kept by the caller: the A2A codec keeps
    them in ``meta["a2a"]``) restore how a decoded message's parts looked, if the
    content still fits them."""
    if hints:
        if hints.get("parts") is True and isinstance(content, list):
            parts = [_part_from_plain(item) for item in content]
            if all(p is not None for p in parts):
                return cast(list[Part], parts)
        desc = hints.get("part")
        if isinstance(desc, dict):
            kind = desc.get("kind", kind_of(content))
            if kind in PART_KINDS and _fits(kind, content):
                return [_part(kind, content, desc)]
    return [_part(kind_of(content), content)]


def content_from_parts(parts: list[Part]) -> tuple[Any, dict[str, Any] | None]:
    """An envelope's content for ``parts``, and the hints needed to rebuild them.

    One part becomes its value (str, bytes, or the JSON value); its kind is noted
    only when the value's type does not say it (a url, a data part holding a
    string), and media type, filename and metadata only when present. Any other
    number of parts becomes a list of plain part objects.
    """
    if len(parts) != 1:
        return [_plain_part(p) for p in parts], {"parts": True}
    p = parts[0]
    desc: dict[str, Any] = {"kind": p.kind} if p.kind != kind_of(p.value) else {}
    desc.update(p.extras())
    return p.value, ({"part": desc} if desc else None)


def appended(parts: list[Part], chunk: list[Part]) -> list[Part]:
    """``parts`` with a stream's next ``chunk``: text that follows text joins it.

    A stream's text items are pieces of one text (an agent's tokens; the CLI
    collects them the same way; a handler whose items stand alone yields
    objects), so the task a plain send, ``GetTask`` or an MCP tool call returns
    holds one text part rather than one per token, which clients would show as
    separate blocks or join with newlines. The chunk's own event still carries
    just the chunk, to be appended as A2A says."""
    if parts and chunk and _plain_text(parts[-1]) and _plain_text(chunk[0]):
        joined = msgspec.structs.replace(parts[-1], value=parts[-1].value + chunk[0].value)
        return [*parts[:-1], joined, *chunk[1:]]
    return [*parts, *chunk]


def _plain_text(part: Part) -> bool:
    return (
        part.kind == "text"
        and isinstance(part.value, str)
        and part.media_type is None
        and part.filename is None
        and part.metadata is None
    )
