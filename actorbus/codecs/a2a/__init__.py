"""A2A at the bus's edge: the canonical envelope as an A2A Message, for 1.0 and 0.3.

Importing this module registers the ``"a2a"`` codec (:data:`CODEC`) in the edge
tables. Its ``encode``/``decode`` work on the A2A *Message* object: ``encode``
writes the 1.0 shape, ``decode`` reads either (0.3 is recognised by ``kind``).
The gateway uses the version-aware functions re-exported here: the request
decoder, the response/stream builders and the error mapping (see
:mod:`.wire`, :mod:`.errors`, :mod:`.types`; :mod:`.shapes` and
:mod:`.requests` hold the JSON shapes and the JSON-RPC requests). Tasks,
messages and parts are the neutral model of :mod:`actorbus.codecs.tasks`.

Envelope -> A2A Message:

- ``id`` -> ``messageId``; ``context.session_id`` -> ``contextId``;
- ``content`` -> ``parts``: ``str`` a text part, ``bytes`` a raw part (a 0.3 file
  part with ``bytes``), anything else a data part (JSON; 0.3 wraps a non-object
  as ``{"value": ...}`` and marks it in the part's metadata);
- every other envelope field that differs from its default (``ts``, ``src``,
  ``dst``, ``intent``, the rest of ``context``, all of ``meta`` including the
  security markers ``signature``/``key_id``/``cipher``) -> ``metadata.actorbus``,
  unchanged, so the way back restores them exactly.

A2A Message -> envelope: the reverse, plus what A2A has that the envelope has no
field for (``role`` other than user, ``taskId``, ``referenceTaskIds``,
``extensions``, the message's own ``metadata``, and how the parts looked when
the content alone cannot say) goes to ``meta["a2a"]``, which rides along
unchanged through the bus and through bridges, so A2A -> envelope -> A2A is
exact too. A message of several parts becomes a list of part objects
(``{"text": ...}``, ``{"raw": b"..."}``, ``{"url": ...}``, ``{"data": ...}``).

An A2A message says nothing of when it was sent: without ``metadata.actorbus.ts``
the envelope's ``ts`` is 0 (a codec reads no clock); the gateway passes ``ts=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError as PydanticValidationError

from actorbus.codecs.a2a.errors import (
    A2A_ERRORS,
    SUPPORTED_VERSIONS,
    V03,
    V10,
    A2AError,
    A2AParseError,
    A2AVersion,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
    error_from_response,
    error_object,
    error_response,
    http_status,
    negotiate_version,
    parse_version,
    rest_error,
    rpc_code,
)
from actorbus.codecs.a2a.requests import decode_request, encode_request
from actorbus.codecs.a2a.types import (
    A2ARequest,
    A2AResponse,
    ListTasksParams,
    Method,
    SendConfig,
    SendParams,
    TaskList,
    TaskRef,
    state_from_wire,
    state_to_wire,
)
from actorbus.codecs.a2a.wire import (
    decode_response,
    encode_response,
    list_tasks_response,
    message_from_wire,
    message_to_wire,
    result_from_wire,
    result_to_wire,
    rpc_result,
    send_response,
    sse_frame,
    stream_event,
    task_response,
    task_to_wire,
)
from actorbus.codecs.common import ENVELOPE_FIELDS
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.tasks import (
    Message,
    Role,
    content_from_parts,
    kind_of,
    parts_from_content,
)

__all__ = [
    "A2A_ERRORS",
    "CARRIES",
    "CODEC",
    "SUPPORTED_VERSIONS",
    "V03",
    "V10",
    "A2AError",
    "A2AParseError",
    "A2ARequest",
    "A2AResponse",
    "A2AVersion",
    "ContentTypeNotSupportedError",
    "ExtendedAgentCardNotConfiguredError",
    "ExtensionSupportRequiredError",
    "InvalidAgentResponseError",
    "InvalidParamsError",
    "InvalidRequestError",
    "ListTasksParams",
    "Method",
    "MethodNotFoundError",
    "PushNotificationNotSupportedError",
    "SendConfig",
    "SendParams",
    "TaskList",
    "TaskNotCancelableError",
    "TaskNotFoundError",
    "TaskRef",
    "UnsupportedOperationError",
    "VersionNotSupportedError",
    "decode",
    "decode_request",
    "decode_response",
    "encode",
    "encode_request",
    "encode_response",
    "envelope_to_message",
    "error_from",
    "error_from_response",
    "error_object",
    "error_response",
    "error_to",
    "http_status",
    "list_tasks_response",
    "message_from_envelope",
    "message_from_wire",
    "message_request",
    "message_to_envelope",
    "message_to_wire",
    "negotiate_version",
    "parse_version",
    "rest_error",
    "result_from_wire",
    "result_to_wire",
    "rpc_code",
    "rpc_result",
    "send_response",
    "sse_frame",
    "state_from_wire",
    "state_to_wire",
    "stream_event",
    "task_response",
    "task_to_wire",
]

BLOCK: Final = "actorbus"  # key of the envelope's own fields in message.metadata
HINTS: Final = "a2a"  # key of A2A-only facts in envelope.meta

# Intents an untyped payload gets (as actorbus.actors.messages names them; the
# codecs sit below the actors and do not import them).
_INTENT_BY_KIND: Final = {"text": "text", "raw": "bytes"}

# -- content <-> parts --------------------------------------------------------------


def _default_intent(content: Any) -> str:
    """The intent an envelope gets when nobody names one: by the content's type."""
    kind = kind_of(content)
    if kind == "data":
        return "dict" if isinstance(content, dict) else "data"
    return _INTENT_BY_KIND[kind]


# -- envelope -> A2A ---------------------------------------------------------------


def _context_block(c: EnvelopeContext, context_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.trace_id is not None:
        out["trace_id"] = c.trace_id
    if c.parent_id is not None:
        out["parent_id"] = c.parent_id
    if c.idempotency_key is not None:
        out["idempotency_key"] = c.idempotency_key
    if c.session_id is not None and c.session_id != context_id:  # contextId was overridden
        out["session_id"] = c.session_id
    if c.priority:
        out["priority"] = c.priority
    if c.ttl_ms is not None:
        out["ttl_ms"] = c.ttl_ms
    if c.stream:
        out["stream"] = True
    if c.artifact_refs:
        out["artifact_refs"] = c.artifact_refs
    if c.tags:
        out["tags"] = c.tags
    return out


def _meta_block(m: EnvelopeMeta) -> dict[str, Any]:
    """All of meta but our A2A hints; security markers pass through untouched."""
    out: dict[str, Any] = {}
    if m.protocol_hint is not None:
        out["protocol_hint"] = m.protocol_hint
    if m.retry_count:
        out["retry_count"] = m.retry_count
    if m.signature is not None:
        out["signature"] = m.signature
    if m.key_id is not None:
        out["key_id"] = m.key_id
    if m.cipher is not None:
        out["cipher"] = m.cipher
    if m.model_extra:
        out.update((k, v) for k, v in m.model_extra.items() if k != HINTS)
    return out


def _envelope_block(env: Envelope, context_id: str | None) -> dict[str, Any]:
    """The envelope's fields A2A has no place for, those not at their defaults."""
    out: dict[str, Any] = {}
    if env.ts:
        out["ts"] = env.ts
    if env.src:
        out["src"] = env.src
    if env.dst:
        out["dst"] = env.dst
    if env.intent != _default_intent(env.content):
        out["intent"] = env.intent
    context = _context_block(env.context, context_id)
    if context:
        out["context"] = context
    meta = _meta_block(env.meta)
    if meta:
        out["meta"] = meta
    return out


def _hints_of(env: Envelope) -> dict[str, Any]:
    extra = env.meta.model_extra
    hints = extra.get(HINTS) if extra else None
    return hints if isinstance(hints, dict) else {}


def _str_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def message_from_envelope(
    env: Envelope,
    *,
    role: Role | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
) -> Message:
    """The neutral Message (A2A's shape) for ``env``; the keywords override what ``env`` says
    (the gateway answers with ``role="agent"`` and the task's ids)."""
    hints = _hints_of(env)
    context_id = env.context.session_id if context_id is None else context_id
    own = hints.get("metadata")
    metadata: dict[str, Any] | None = dict(own) if isinstance(own, dict) else None
    block = _envelope_block(env, context_id)
    if block:
        metadata = {**(metadata or {}), BLOCK: block}
    hinted_task = hints.get("taskId")
    return Message(
        message_id=env.id,
        role=role or ("agent" if hints.get("role") == "agent" else "user"),
        parts=parts_from_content(env.content, hints),
        context_id=context_id,
        task_id=task_id
        if task_id is not None
        else (hinted_task if isinstance(hinted_task, str) else None),
        metadata=metadata,
        extensions=_str_list(hints.get("extensions")),
        reference_task_ids=_str_list(hints.get("referenceTaskIds")),
    )


def envelope_to_message(
    env: Envelope,
    version: str | None,
    *,
    role: Role | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
) -> dict[str, Any]:
    """``env`` as an A2A Message object in ``version`` (an ``A2A-Version`` value;
    None is 0.3, as a missing header is)."""
    message = message_from_envelope(env, role=role, task_id=task_id, context_id=context_id)
    return message_to_wire(message, negotiate_version(version))


# -- A2A -> envelope --------------------------------------------------------------------


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidParamsError(f"`{where}` must be an object")
    return value


def _a2a_hints(
    m: Message, task_id: str | None, part_hints: dict[str, Any] | None
) -> dict[str, Any]:
    """What the message says that the envelope has no field for."""
    hints: dict[str, Any] = dict(part_hints) if part_hints else {}
    if m.role != "user":
        hints["role"] = m.role
    if task_id is not None:
        hints["taskId"] = task_id
    if m.reference_task_ids is not None:
        hints["referenceTaskIds"] = m.reference_task_ids
    if m.extensions is not None:
        hints["extensions"] = m.extensions
    if m.metadata is not None:
        own = {k: v for k, v in m.metadata.items() if k != BLOCK}
        if own or BLOCK not in m.metadata:
            hints["metadata"] = own
    return hints


_ENVELOPE_WHERE: Final = {"id": "message.messageId", "content": "message.parts"}


def _validation_message(exc: PydanticValidationError) -> str:
    """Pydantic's first complaint, located in the A2A message the sender wrote."""
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    where = _ENVELOPE_WHERE.get(loc[0]) if loc else None
    where = where or ".".join(["message.metadata", BLOCK, *loc])
    return f"`{where}`: {first['msg']}"


def message_request(msg: Message) -> tuple[str, Any]:
    """What an A2A message asks for: its intent (the ``metadata.actorbus`` block's,
    else the one its content implies) and its content, as the envelope would
    carry them, without making one."""
    content, _ = content_from_parts(msg.parts)
    block = _object((msg.metadata or {}).get(BLOCK), f"message.metadata.{BLOCK}")
    return str(block.get("intent") or _default_intent(content)), content


def message_to_envelope(
    msg: Message | Mapping[str, Any],
    *,
    version: str | None = None,
    dst: str | None = None,
    src: str | None = None,
    intent: str | None = None,
    session_id: str | None = None,
    task_id: str | None = None,
    ts: int | None = None,
    stream: bool | None = None,
) -> Envelope:
    """The envelope for an A2A Message (neutral, or its JSON in ``version``; None
    detects the version).

    Keywords override what the message says: a gateway must pass ``src`` and
    ``dst`` itself, because ``metadata.actorbus`` is written by the client and a
    client must not choose the sender or the receiver of what it sends.
    """
    if not isinstance(msg, Message):
        wire_version = None if version is None else negotiate_version(version)
        msg = message_from_wire(msg, wire_version)
    content, part_hints = content_from_parts(msg.parts)
    block = _object((msg.metadata or {}).get(BLOCK), f"message.metadata.{BLOCK}")
    context = dict(_object(block.get("context"), f"message.metadata.{BLOCK}.context"))
    if session_id is not None or "session_id" not in context:
        context["session_id"] = session_id if session_id is not None else msg.context_id
    if stream is not None:
        context["stream"] = stream
    meta = dict(_object(block.get("meta"), f"message.metadata.{BLOCK}.meta"))
    meta.pop(HINTS, None)
    hints = _a2a_hints(msg, task_id if task_id is not None else msg.task_id, part_hints)
    if hints:
        meta[HINTS] = hints
    data: dict[str, Any] = {
        "id": msg.message_id,
        "ts": ts if ts is not None else block.get("ts", 0),
        "src": src if src is not None else block.get("src", ""),
        "dst": dst if dst is not None else block.get("dst", ""),
        "intent": intent or block.get("intent") or _default_intent(content),
        "content": content,
        "context": context,
    }
    if meta:
        data["meta"] = meta
    try:
        return Envelope.model_validate(data)
    except PydanticValidationError as e:
        raise InvalidParamsError(_validation_message(e)) from None


# -- the generic codec ------------------------------------------------------------------


def encode(env: Envelope) -> dict[str, Any]:
    """The A2A 1.0 Message object for ``env``."""
    return message_to_wire(message_from_envelope(env), V10)


def decode(obj: Any) -> Envelope:
    """The envelope for an A2A Message object of either version."""
    return message_to_envelope(obj)  # not an object: InvalidParamsError from the decoder


def error_to(err: ActorBusError) -> dict[str, Any]:
    """The JSON-RPC ``error`` object (1.0 form, with ``google.rpc.ErrorInfo``) for ``err``."""
    return error_object(err, V10)


def error_from(obj: Any) -> ActorBusError:
    """The taxonomy error for a JSON-RPC error object or whole error response."""
    return error_from_response(obj)


CARRIES: Final = ENVELOPE_FIELDS  # every field

CODEC: Final = register(
    Codec(
        name="a2a",
        encode=encode,
        decode=decode,
        error_to=error_to,
        error_from=error_from,
        carries=CARRIES,
    )
)
