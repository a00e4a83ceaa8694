"""AgentAnycast: the A2A data model over P2P, its ``A2AEnvelope`` in proto3 JSON form.

AgentAnycast sends protobuf ``A2AEnvelope`` messages (package ``agentanycast.v1``)
between peers; this codec speaks their canonical proto3 JSON form: lowerCamelCase
field names (snake_case accepted on input, as proto3 JSON parsers must), enum
values by name (``ENVELOPE_TYPE_SEND_TASK``; the short ``SEND_TASK`` and the
numbers are accepted), timestamps as RFC 3339 strings, bytes as base64, fields
at their default left out, unknown fields ignored::

    {"envelopeId": "...", "type": "ENVELOPE_TYPE_SEND_TASK",
     "timestamp": "2026-01-27T14:30:00Z",
     "sendTask": {"taskId": "...", "contextId": "...", "targetSkillId": "...",
                  "message": {"messageId": "...", "role": "MESSAGE_ROLE_USER",
                              "parts": [{"textPart": {"text": "hi"}}]}},
     "traceParent": "00-<trace id>-<span id>-01"}

The eleven envelope types: SEND_TASK, TASK_STATUS_UPDATE, TASK_COMPLETE,
TASK_FAIL, TASK_CANCEL, GET_TASK, GET_TASK_RESPONSE, ACK, STREAM_START,
STREAM_CHUNK, STREAM_END.

Mapping (envelope <-> A2AEnvelope):

======================  ===========================================================
envelope                AgentAnycast
======================  ===========================================================
id / ts                 envelopeId / timestamp (and the message's messageId)
dst                     sendTask.targetSkillId: skill anycast addressing (a
                        ``peer:`` or URL address rides the extension instead)
context.session_id      sendTask.contextId (the conversation thread)
context.parent_id       taskId of replies (TASK_COMPLETE, TASK_FAIL, control frames)
context.trace_id        traceParent (W3C ``00-trace-span-01``) when it is 32 hex
content                 message / artifact parts: str -> textPart, bytes ->
                        rawPart, dict -> dataPart, None -> no part, other JSON
                        values -> dataPart ``{"value": ...}``
src, intent, other      the ``actorbus`` key of the first part's ``metadata`` (a
context and meta        ``map<string,string>``, the protocol's extension slot),
                        as a compact JSON string, only when not derivable
meta.anycast (extra)    what AgentAnycast has and the envelope does not (type,
                        taskId, artifact ids, trace state...): decode fills it,
                        encode reads it
======================  ===========================================================

Which frame :func:`encode` writes: ``$error`` -> TASK_FAIL; the control intents
(``$status``, ``$cancel``, ``$get_task``, ``$task``, ``$ack``, ``$stream_start``,
``$stream_chunk``, ``$end``) -> their frame, with the envelope's content as the
payload (what :func:`decode` produces for them); an envelope decoded from a
TASK_COMPLETE -> TASK_COMPLETE; anything else -> SEND_TASK. :func:`reply_to`
answers a SEND_TASK. Decoding a frame without the extension sets
``meta.protocol_hint`` to ``"anycast"``.

Errors: AgentAnycast has no error codes, only ``TaskFailPayload.error_message``
and ``ErrorDetail {code, message, metadata}``; :func:`error_to` puts the
taxonomy code in an ErrorDetail carried as a data part of the failure's
message, so actorbus peers get the exact error back and others read
``errorMessage``.

:class:`AnycastTasks` is the pure task and stream state machine.
"""

from actorbus.codecs.anycast.codec import (
    decode,
    encode,
    error_for_status,
    error_from,
    error_to,
    reply_to,
    send_task_request,
)
from actorbus.codecs.anycast.frames import (
    AnycastFrame,
    ack,
    address_of,
    frame,
    parse_frame,
    status_update,
    stream_chunk,
    stream_end,
    stream_start,
)
from actorbus.codecs.anycast.schema import (
    DEDUP_WINDOW,
    ENVELOPE_TYPES,
    EXTENSION_KEY,
    FACTS_KEY,
    PROTOCOL,
    STREAM_END_REASONS,
    TASK_STATES,
    parse_timestamp,
)
from actorbus.codecs.anycast.tasks import TERMINAL_STATES, AnycastTask, AnycastTasks, TaskState
from actorbus.codecs.common import ENVELOPE_FIELDS_BUT_HINT
from actorbus.codecs.edge import Codec, register

CODEC = register(
    Codec(PROTOCOL, encode, decode, error_to, error_from, carries=ENVELOPE_FIELDS_BUT_HINT)
)

__all__ = [
    "CODEC",
    "DEDUP_WINDOW",
    "ENVELOPE_TYPES",
    "EXTENSION_KEY",
    "FACTS_KEY",
    "PROTOCOL",
    "STREAM_END_REASONS",
    "TASK_STATES",
    "TERMINAL_STATES",
    "AnycastFrame",
    "AnycastTask",
    "AnycastTasks",
    "TaskState",
    "ack",
    "address_of",
    "decode",
    "encode",
    "error_for_status",
    "error_from",
    "error_to",
    "frame",
    "parse_frame",
    "parse_timestamp",
    "reply_to",
    "send_task_request",
    "status_update",
    "stream_chunk",
    "stream_end",
    "stream_start",
]
