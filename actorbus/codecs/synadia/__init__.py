"""The Synadia Agent Protocol for NATS (protocol 0.3), as pure message shapes.

The facts below are read from the official packages' source
(``synadia-ai-agents`` 0.8.1, the client; ``synadia-ai-agent-service`` 0.5.0, the
host) and nats-py's ``nats.micro``:

- An agent is a NATS micro service named ``agents`` (discovered with
  ``$SRV.INFO.agents``, pinged with ``$SRV.PING.agents.{instance id}``) whose
  metadata has ``agent``, ``owner``, ``session`` and ``protocol_version`` ("0.3")
  and whose endpoints are ``prompt`` on ``agents.prompt.{agent}.{owner}.{session}``
  (queue group ``agents``; metadata ``max_payload`` like ``"1MB"``,
  ``attachments_ok`` ``"true"|"false"``, ``min_sender_trust`` ``"any"|"signed"``)
  and ``status`` on ``agents.status.{agent}.{owner}.{session}`` (queue group
  ``agents``), which answers with a heartbeat payload.
- Heartbeats go to ``agents.hb.{agent}.{owner}.{session}`` every ``interval_s``
  (30 s by default), one at start: ``{agent, owner, session, instance_id, ts
  ("2026-01-27T14:30:00Z"), interval_s, protocol_version, endpoints: {prompt:
  {subject, metadata}}}`` plus extra fields; an instance is alive while its
  last beat is at most 3 intervals old.
- A prompt is ``{"prompt": "<non-empty>", "attachments": [{"filename",
  "content" (standard base64)}]}`` with unknown top-level fields kept (§5.6), or
  plain UTF-8 text (a body whose first non-blank byte is not ``{``); an empty
  body is refused.
- The reply is a stream on the request's reply subject: a leading
  ``{"type":"status","data":"ack"}``, then chunks ``{"type":"response","data":
  "<text>" | {"text", "attachments"}}``, ``{"type":"status","data":...}``
  (keep-alive ``ack`` every 30 s) or ``{"type":"query","data":{id,
  reply_subject, prompt}}``; unknown chunk types are ignored; the end marker is
  a zero-byte message with no headers.
- A failure is a message with the headers ``Nats-Service-Error`` (a one-line
  description, at most 200 characters) and ``Nats-Service-Error-Code`` (an
  HTTP-style code, 400..599: the host sends 400 for a malformed or oversized
  prompt, 401/403 for a refused sender, 500 for a handler error), followed by
  the end marker. The optional sender-identity header is ``Agent-Sender``.

Mapping (envelope <-> prompt object, the codec's main message):

======================  ==========================================================
envelope                Synadia
======================  ==========================================================
content (non-empty str) prompt
content (other)         prompt = its JSON text (bytes: an attachment), marked
content from a prompt   ``{"prompt", "attachments"}`` (intent ``dict``) when the
with attachments        prompt had attachments; it goes back the same way
id, ts, src, dst,       the prompt's ``actorbus`` extension field (unknown fields
intent, context, meta   are preserved by the protocol), only when not defaults
context.session_id      the subject's session token (:func:`request_to_envelope`)
meta.agent_sender       the ``Agent-Sender`` header (:func:`request_headers`)
meta.synadia (extra)    the prompt's other unknown fields, re-sent unchanged
======================  ==========================================================

Replies: :func:`reply_frames` turns a reply or stream item envelope into
frames (``$error`` -> error frame + end marker, ``$end`` -> end marker);
:class:`ReplyStream` reads an agent's reply stream in order.
"""

from __future__ import annotations

from actorbus.codecs.synadia.prompt import (
    check_request,
    decode,
    encode,
    encode_request,
    parse_request,
    request_headers,
    request_to_envelope,
)
from actorbus.codecs.synadia.replies import (
    ACK_FRAME,
    CODEC,
    END_FRAME,
    STATUS_TO_TAXONOMY,
    TAXONOMY_TO_STATUS,
    ChunkKind,
    Frame,
    ReplyEvent,
    ReplyStream,
    chunk_to_envelope,
    describe,
    error_frame,
    error_from,
    error_to,
    query_chunk,
    read_frame,
    reply_chunk,
    reply_frames,
    reply_stream,
    status_chunk,
)
from actorbus.codecs.synadia.service import (
    ATTACHMENT_NAME,
    BINARY_PROMPT,
    CLIENT_INACTIVITY_TIMEOUT_S,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_KEEPALIVE_INTERVAL_S,
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_SESSION,
    DISCOVERY_SUBJECT,
    ERROR_CODE_HEADER,
    ERROR_HEADER,
    EXTENSION_KEY,
    FACTS_KEY,
    HEARTBEAT_WILDCARD,
    INFO_RESPONSE_TYPE,
    LIVENESS_SLACK,
    MAX_ERROR_DESCRIPTION,
    PING_SUBJECT,
    PROMPT_ENDPOINT,
    PROTOCOL,
    PROTOCOL_VERSION,
    QUEUE_GROUP,
    SENDER_HEADER,
    SENDER_KEY,
    SERVICE_NAME,
    STATUS_ENDPOINT,
    AgentSubject,
    SynadiaAgentInfo,
    agent_token,
    format_size,
    heartbeat_ms,
    heartbeat_payload,
    is_alive,
    parse_heartbeat,
    parse_service_info,
    parse_size,
    parse_subject,
    service_config,
    service_info,
    subject_token,
)

__all__ = [
    "ACK_FRAME",
    "ATTACHMENT_NAME",
    "BINARY_PROMPT",
    "CLIENT_INACTIVITY_TIMEOUT_S",
    "CODEC",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "DEFAULT_KEEPALIVE_INTERVAL_S",
    "DEFAULT_MAX_PAYLOAD",
    "DEFAULT_SESSION",
    "DISCOVERY_SUBJECT",
    "END_FRAME",
    "ERROR_CODE_HEADER",
    "ERROR_HEADER",
    "EXTENSION_KEY",
    "FACTS_KEY",
    "HEARTBEAT_WILDCARD",
    "INFO_RESPONSE_TYPE",
    "LIVENESS_SLACK",
    "MAX_ERROR_DESCRIPTION",
    "PING_SUBJECT",
    "PROMPT_ENDPOINT",
    "PROTOCOL",
    "PROTOCOL_VERSION",
    "QUEUE_GROUP",
    "SENDER_HEADER",
    "SENDER_KEY",
    "SERVICE_NAME",
    "STATUS_ENDPOINT",
    "STATUS_TO_TAXONOMY",
    "TAXONOMY_TO_STATUS",
    "AgentSubject",
    "ChunkKind",
    "Frame",
    "ReplyEvent",
    "ReplyStream",
    "SynadiaAgentInfo",
    "agent_token",
    "check_request",
    "chunk_to_envelope",
    "decode",
    "describe",
    "encode",
    "encode_request",
    "error_frame",
    "error_from",
    "error_to",
    "format_size",
    "heartbeat_ms",
    "heartbeat_payload",
    "is_alive",
    "parse_heartbeat",
    "parse_request",
    "parse_service_info",
    "parse_size",
    "parse_subject",
    "query_chunk",
    "read_frame",
    "reply_chunk",
    "reply_frames",
    "reply_stream",
    "request_headers",
    "request_to_envelope",
    "service_config",
    "service_info",
    "status_chunk",
    "subject_token",
]
