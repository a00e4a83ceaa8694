"""ACP (the BeeAI Agent Communication Protocol, acp-sdk 1.0.x) at the edge of the bus.

ACP is REST: ``POST /runs`` with a :class:`RunCreateRequest` (mode ``sync``,
``async`` or ``stream``), ``POST /runs/{id}`` with a :class:`RunResumeRequest` to
answer a run that is ``awaiting``, and a :class:`Run` (or a stream of SSE events)
back. Content travels as a :class:`Message`: a role and a list of
:class:`MessagePart` (``content`` or ``content_url``, ``content_encoding``
``plain|base64``, ``content_type``, ``name``, ``metadata``).

Envelope <-> ACP (``encode`` produces the request; :func:`run_from_envelope` the
result, because only the gateway knows a run id and a status):

=========================  ================================================
envelope                   ACP
=========================  ================================================
dst                        ``agent_name`` (request)
src                        ``agent_name`` (run: the agent that answered)
content                    the message parts (see below)
context.artifact_refs      one ``{"content_url": ref}`` part each
context.session_id         ``session_id`` when it is a UUID (the SDK types it so)
context.stream             ``mode == "stream"``
ts                         ``Message.created_at`` (else the run's; else 0:
                           a codec reads no clock)
meta["acp"]                ``run_id`` and ``status`` of a decoded run or resume
                           (:func:`run_from_envelope` reads them back)
everything (but content)   the *envelope part*, below
=========================  ================================================

A message from a plain ACP client (no envelope part) gets intent ``text``,
``dict``, ``bytes``, ``data`` or ``$none`` by its content, and
``meta.protocol_hint = "acp"`` so the answer goes back in ACP.

ACP has no metadata slot on a message, and a part's ``metadata`` only admits the
SDK's ``citation``/``trajectory`` kinds (anything else fails the SDK's
validation). So the envelope's own fields ride in one extra part of content type
:data:`ENVELOPE_PART_TYPE` (its content is the envelope as compact JSON, without
``content``, plus the content's ``form``). A part with a vendor content type is
valid ACP and an SDK agent that reads text parts never sees it; the gateway can
leave it out of what outside clients get with ``carry=False``. With it, every
envelope field survives envelope -> ACP -> envelope, security markers included.

Content forms: ``str`` -> one ``text/plain`` part; ``bytes`` -> one base64
``application/octet-stream`` part; ``None`` -> no part; a dict ``{"parts": [...]}``
whose items are valid parts -> those parts verbatim; anything else -> one
``application/json`` part. Decoding a message that carries no envelope part
reverses the three simple cases and otherwise gives ``{"parts": [...]}`` (the
parts as sent), which encodes back to the same parts. Bytes nested inside JSON
content become base64 text (JSON has no bytes).

Errors: :func:`error_to` gives ACP's ``{code, message, data}`` with the actorbus
code in ``data`` so it comes back exact; a native error without it maps
``invalid_input`` -> ``ValidationFailedError``, ``not_found`` ->
``ActorNotFoundError``, anything else -> ``RemoteError``. See
:data:`ACP_CODE_OF` and :func:`http_status`.
"""

from __future__ import annotations

from actorbus.codecs.acp.codec import (
    ACP_CODE_OF,
    CODEC,
    Native,
    acp_facts,
    agent_role,
    decode,
    decode_event,
    decode_message,
    decode_request,
    decode_resume,
    decode_run,
    encode,
    encode_request,
    encode_resume,
    envelope_message,
    envelope_part,
    error_event,
    error_from,
    error_to,
    http_status,
    message_event,
    message_parts,
    messages_envelope,
    parse_sse,
    part_event,
    run_event,
    run_from_envelope,
    sse_frame,
)
from actorbus.codecs.acp.models import (
    ENVELOPE_PART_TYPE,
    EVENT_TYPES,
    ROLE_PATTERN,
    RUN_STATUS_OF_TASK,
    TASK_STATE_OF_RUN,
    TERMINAL_STATUSES,
    AcpErrorBody,
    ErrorCode,
    ErrorEvent,
    Event,
    GenericEvent,
    Message,
    MessageAwait,
    MessageEvent,
    MessagePart,
    MessagePartEvent,
    Role,
    Run,
    RunCreateRequest,
    RunEvent,
    RunMode,
    RunResumeRequest,
    RunStatus,
    content_parts,
    parts_content,
    run_status,
    task_state,
)
from actorbus.codecs.common import ENVELOPE_FIELDS as ENVELOPE_FIELDS

__all__ = [
    "ACP_CODE_OF",
    "CODEC",
    "ENVELOPE_PART_TYPE",
    "EVENT_TYPES",
    "ROLE_PATTERN",
    "RUN_STATUS_OF_TASK",
    "TASK_STATE_OF_RUN",
    "TERMINAL_STATUSES",
    "AcpErrorBody",
    "ErrorCode",
    "ErrorEvent",
    "Event",
    "GenericEvent",
    "Message",
    "MessageAwait",
    "MessageEvent",
    "MessagePart",
    "MessagePartEvent",
    "Native",
    "Role",
    "Run",
    "RunCreateRequest",
    "RunEvent",
    "RunMode",
    "RunResumeRequest",
    "RunStatus",
    "acp_facts",
    "agent_role",
    "content_parts",
    "decode",
    "decode_event",
    "decode_message",
    "decode_request",
    "decode_resume",
    "decode_run",
    "encode",
    "encode_request",
    "encode_resume",
    "envelope_message",
    "envelope_part",
    "error_event",
    "error_from",
    "error_to",
    "http_status",
    "message_event",
    "message_parts",
    "messages_envelope",
    "parse_sse",
    "part_event",
    "parts_content",
    "run_event",
    "run_from_envelope",
    "run_status",
    "sse_frame",
    "task_state",
]
