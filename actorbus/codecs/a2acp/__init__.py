"""A2ACP v1.0: the JSON agent-to-agent message format, as an actorbus edge codec.

An A2ACP message is one JSON object (``protocol_version``, ``message_id``,
``timestamp``, ``source_agent``, ``target_agent``, ``message_type`` of
request/response/event/error, ``intent``, ``payload``, ``security``). Decoding
validates it against the spec's schema, shipped as
``schemas/a2acp.schema.json``. ``jsonschema`` needs several hundred
microseconds per message for that schema, so the schema is compiled once into
a small checker for exactly the keywords it uses (an unknown keyword fails at
import); ``jsonschema`` stays the authority: it explains every rejection, and
the tests check that both agree.

Mapping (envelope <-> A2ACP):

=========================  =====================================================
envelope                   A2ACP
=========================  =====================================================
id                         message_id (verbatim; actorbus ids are not UUIDs,
                           the schema's ``format`` is an annotation)
ts (Unix ms)               timestamp (ISO 8601 UTC, millisecond precision)
src / dst                  source_agent.agent_id / target_agent.agent_id
intent                     intent; ``$error`` <-> message_type ``error``
content (a dict)           payload; other values as ``{"content": value}``
                           (bytes base64) and marked in the extension
meta.auth_token (extra)    security.auth_token
meta.cipher                security.encryption (``aes256`` when set)
context.*, other meta.*    top-level ``actorbus`` extension object, only when
                           they are not defaults (the base schema allows extra
                           top-level properties; A2ACP peers ignore it)
meta.a2acp (extra)         what A2ACP has and the envelope does not: agent
                           domain/version, message_type, protocol_version,
                           native error code; decode fills it, encode reads it
=========================  =====================================================

Decoding a message without the extension sets ``meta.protocol_hint`` to
``"a2acp"`` so replies go back the same way.

Errors are the spec's ``payload.error`` object (``code``, ``message``,
``details``, ``retry_after`` in seconds, 0 = do not retry); see
:data:`TAXONOMY_TO_A2ACP` and :data:`A2ACP_TO_TAXONOMY`. Every error
:func:`error_from` builds has a ``retry_after`` attribute.

The lifecycle (handshake -> contract -> routed messages) is the pure state
machine :class:`A2acpSession`.
"""

from __future__ import annotations

from actorbus.codecs.a2acp.checker import (
    A2ACP_TO_TAXONOMY,
    CONTRACT_VALIDATION_TIMEOUT_S,
    DEFAULT_AGENT_VERSION,
    DEFAULT_DOMAIN,
    DEFAULT_RETRY_AFTER,
    ERROR_CODES,
    EXTENSION_KEY,
    FACTS_KEY,
    HANDSHAKE_TIMEOUT_S,
    INTENT_ACCEPT_HANDSHAKE,
    INTENT_INITIATE_HANDSHAKE,
    INTENT_TERMINATE,
    MAX_MESSAGE_BYTES,
    MAX_PAYLOAD_BYTES,
    MESSAGE_TYPES,
    PROTOCOL,
    PROTOCOL_VERSION,
    ROUTING_TIMEOUT_S,
    SUPPORTED_MAJORS,
    TAXONOMY_TO_A2ACP,
    TOKEN_KEY,
    MessageType,
    a2acp_schema,
    dumps,
    loads,
    parse_timestamp,
    schema_errors,
    validate_message,
)
from actorbus.codecs.a2acp.codec import (
    A2acpAgent,
    A2acpErrorBody,
    A2acpMessage,
    A2acpSecurity,
    decode,
    encode,
    error_from,
    error_to,
    parse_message,
    reply_to,
    to_message,
)
from actorbus.codecs.a2acp.lifecycle import CODEC, A2acpSession, A2acpState

__all__ = [
    "A2ACP_TO_TAXONOMY",
    "CODEC",
    "CONTRACT_VALIDATION_TIMEOUT_S",
    "DEFAULT_AGENT_VERSION",
    "DEFAULT_DOMAIN",
    "DEFAULT_RETRY_AFTER",
    "ERROR_CODES",
    "EXTENSION_KEY",
    "FACTS_KEY",
    "HANDSHAKE_TIMEOUT_S",
    "INTENT_ACCEPT_HANDSHAKE",
    "INTENT_INITIATE_HANDSHAKE",
    "INTENT_TERMINATE",
    "MAX_MESSAGE_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MESSAGE_TYPES",
    "PROTOCOL",
    "PROTOCOL_VERSION",
    "ROUTING_TIMEOUT_S",
    "SUPPORTED_MAJORS",
    "TAXONOMY_TO_A2ACP",
    "TOKEN_KEY",
    "A2acpAgent",
    "A2acpErrorBody",
    "A2acpMessage",
    "A2acpSecurity",
    "A2acpSession",
    "A2acpState",
    "MessageType",
    "a2acp_schema",
    "decode",
    "dumps",
    "encode",
    "error_from",
    "error_to",
    "loads",
    "parse_message",
    "parse_timestamp",
    "reply_to",
    "schema_errors",
    "to_message",
    "validate_message",
]
