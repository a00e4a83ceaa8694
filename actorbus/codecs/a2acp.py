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

import base64
import binascii
import functools
import importlib.resources
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

import jsonschema
import msgspec
from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from actorbus.codecs.common import (
    ENVELOPE_FIELDS_BUT_HINT,
    EPOCH,
    extension_context,
    extension_meta,
    meta_builder,
)
from actorbus.codecs.common import format_timestamp as format_timestamp
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    CLASS_OF_CODE,
    ActorBusError,
    DecodeError,
    EncodeError,
    MessageTooLargeError,
    ProtocolError,
    UnsupportedError,
    error_for_code,
)

PROTOCOL = "a2acp"
PROTOCOL_VERSION = "1.0"
SUPPORTED_MAJORS = frozenset({0, 1})  # "support N-1 major versions"
MESSAGE_TYPES = ("request", "response", "event", "error")
MessageType = Literal["request", "response", "event", "error"]

DEFAULT_DOMAIN = "actorbus"
DEFAULT_AGENT_VERSION = "1.0.0"

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_PAYLOAD_BYTES = 900 * 1024
HANDSHAKE_TIMEOUT_S = 5.0
CONTRACT_VALIDATION_TIMEOUT_S = 2.0
ROUTING_TIMEOUT_S = 30.0

INTENT_INITIATE_HANDSHAKE = "initiate_handshake"
INTENT_ACCEPT_HANDSHAKE = "accept_handshake"
# The spec's examples end a collaboration but name no intent; this one is ours.
INTENT_TERMINATE = "terminate_collaboration"

EXTENSION_KEY = "actorbus"
FACTS_KEY = "a2acp"  # meta extra holding A2ACP-only facts
TOKEN_KEY = "auth_token"  # meta extra holding security.auth_token

_INTENT_ERROR = "$error"
_ENCRYPTED = "aes256"

# -- error codes ----------------------------------------------------------------

#: The spec's error codes and whether a retry may help.
ERROR_CODES: dict[str, bool] = {
    "CAPABILITY_NOT_FOUND": False,
    "SCHEMA_MISMATCH": False,
    "AUTH_FAILED": False,
    "TIMEOUT": True,
    "INTERNAL_ERROR": True,
    "RATE_LIMIT_EXCEEDED": True,
    "CONTRACT_VIOLATION": False,
    "SECURITY_POLICY_VIOLATION": False,
}
#: Seconds suggested for a retryable error that did not say how long to wait.
DEFAULT_RETRY_AFTER = 1

#: actorbus taxonomy code -> A2ACP code (an unknown code is INTERNAL_ERROR).
TAXONOMY_TO_A2ACP: dict[str, str] = {
    "E_TIMEOUT": "TIMEOUT",
    "E_EXPIRED": "TIMEOUT",
    "E_CONN": "INTERNAL_ERROR",
    "E_STOPPED": "INTERNAL_ERROR",
    "E_HANDLER": "INTERNAL_ERROR",
    "E_INTERNAL": "INTERNAL_ERROR",
    "E_ENCODE": "INTERNAL_ERROR",
    "E_CANCELLED": "INTERNAL_ERROR",
    "E_NO_RESPONDERS": "CAPABILITY_NOT_FOUND",
    "E_UNSUPPORTED": "CAPABILITY_NOT_FOUND",
    "E_NOT_FOUND": "CAPABILITY_NOT_FOUND",
    "E_ADDRESS": "CAPABILITY_NOT_FOUND",
    "E_DECODE": "SCHEMA_MISMATCH",
    "E_VALIDATION": "SCHEMA_MISMATCH",
    "E_TOO_LARGE": "SCHEMA_MISMATCH",
    "E_AUTH": "AUTH_FAILED",
    "E_RATE_LIMIT": "RATE_LIMIT_EXCEEDED",
    "E_PROTOCOL": "CONTRACT_VIOLATION",
}
#: A2ACP code -> actorbus taxonomy code (unknown codes become E_HANDLER remote errors).
A2ACP_TO_TAXONOMY: dict[str, str] = {
    "CAPABILITY_NOT_FOUND": "E_UNSUPPORTED",
    "SCHEMA_MISMATCH": "E_VALIDATION",
    "AUTH_FAILED": "E_AUTH",
    "TIMEOUT": "E_TIMEOUT",
    "INTERNAL_ERROR": "E_HANDLER",
    "RATE_LIMIT_EXCEEDED": "E_RATE_LIMIT",
    "CONTRACT_VIOLATION": "E_PROTOCOL",
    "SECURITY_POLICY_VIOLATION": "E_AUTH",
}


# -- the schema, compiled -----------------------------------------------------------

_ANNOTATIONS = frozenset(
    {"$schema", "$id", "title", "description", "default", "format", "definitions", "examples"}
)
_Check = Callable[[Any], bool]


@functools.cache
def a2acp_schema() -> dict[str, Any]:
    """The A2ACP message schema (draft-07) shipped in ``actorbus/codecs/schemas``."""
    text = (
        importlib.resources.files("actorbus.codecs")
        .joinpath("schemas/a2acp.schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _jsonschema_validator() -> jsonschema.Draft7Validator:
    """The reference validator: slow, used to explain a rejection and in tests."""
    return jsonschema.Draft7Validator(a2acp_schema())


def _is_type(value: Any, name: str) -> bool:
    """draft-07 type semantics as jsonschema applies them (a bool is not a number)."""
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return name == "number" or isinstance(value, int) or value.is_integer()


def _same(a: Any, b: Any) -> bool:
    """JSON equality for enum/const: 1 and 1.0 are equal, True is neither."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


class _Compiler:
    """Writes a schema as one Python predicate, as fastjsonschema does.

    Only the keywords this schema uses are known (type, required, properties,
    enum, const, pattern, minimum, local $ref, if/then); any other keyword
    raises here, so the schema cannot grow a rule the checker would skip.
    The generated code returns False at the first rule broken.
    """

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {"_is_type": _is_type, "_same": _same, "_M": _MISSING}
        self.functions: dict[str, str] = {}  # $ref or id(node) -> function name
        self.names = 0

    def predicate(self, node: Mapping[str, Any]) -> _Check:
        entry = self.function(node)
        namespace = dict(self.consts)
        exec("\n".join(self.lines), namespace)  # source built from the schema only
        check: _Check = namespace[entry]
        return check

    def function(self, node: Mapping[str, Any], key: str | None = None) -> str:
        key = key or f"node{id(node)}"
        if key not in self.functions:
            name = self.functions[key] = f"_f{len(self.functions)}"
            body: list[str] = []
            self.node(node, "v", body, "    ")
            self.lines += [f"def {name}(v):", *body, "    return True", ""]
        return self.functions[key]

    def const(self, value: Any) -> str:
        self.names += 1
        name = f"_c{self.names}"
        self.consts[name] = value
        return name

    def node(self, node: Mapping[str, Any], var: str, out: list[str], pad: str) -> None:
        for key, value in node.items():
            if key in _ANNOTATIONS or key == "then":
                continue
            emit = getattr(self, "kw_" + key.lstrip("$"), None)
            if emit is None:
                raise ValueError(f"the A2ACP schema checker does not know the keyword {key!r}")
            emit(value, node, var, out, pad)

    def kw_type(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        if value == "object":
            out.append(f"{pad}if type({var}) is not dict: return False")
        elif value == "string":
            out.append(f"{pad}if type({var}) is not str: return False")
        else:
            names = self.const((value,) if isinstance(value, str) else tuple(value))
            out.append(f"{pad}if not any(_is_type({var}, n) for n in {names}): return False")

    def kw_required(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        names = self.const(tuple(value))
        out.append(f"{pad}if type({var}) is dict:")
        out.append(f"{pad}    for n in {names}:")
        out.append(f"{pad}        if n not in {var}: return False")

    def kw_properties(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        out.append(f"{pad}if type({var}) is dict:")
        for i, (name, sub) in enumerate(value.items()):
            item = f"{var}_{i}"
            out.append(f"{pad}    {item} = {var}.get({name!r}, _M)")
            out.append(f"{pad}    if {item} is not _M:")
            inner: list[str] = []
            self.node(sub, item, inner, pad + "        ")
            out.extend(inner or [f"{pad}        pass"])

    def kw_enum(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        if all(isinstance(o, str) for o in value):
            names = self.const(frozenset(value))
            out.append(f"{pad}if type({var}) is not str or {var} not in {names}: return False")
        else:
            names = self.const(tuple(value))
            out.append(f"{pad}if not any(_same({var}, o) for o in {names}): return False")

    def kw_const(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        out.append(f"{pad}if not _same({var}, {self.const(value)}): return False")

    def kw_pattern(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        search = self.const(re.compile(value).search)
        out.append(f"{pad}if type({var}) is str and {search}({var}) is None: return False")

    def kw_minimum(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        limit = self.const(value)
        out.append(f"{pad}if _is_type({var}, 'number') and {var} < {limit}: return False")

    def kw_ref(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        prefix = "#/definitions/"
        if not value.startswith(prefix):
            raise ValueError(f"the A2ACP schema checker only follows local refs, not {value!r}")
        target = self.root["definitions"][value[len(prefix) :]]
        out.append(f"{pad}if not {self.function(target, value)}({var}): return False")

    def kw_if(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        condition = self.function(value)
        then = self.function(node.get("then", {}))
        out.append(f"{pad}if {condition}({var}) and not {then}({var}): return False")


_MISSING = object()


@functools.cache
def _checker() -> _Check:
    schema = a2acp_schema()
    return _Compiler(schema).predicate(schema)


def schema_errors(obj: Any) -> list[str]:
    """Every way ``obj`` breaks the schema, as ``$.json.path: reason`` (jsonschema's word)."""
    found = sorted(
        _jsonschema_validator().iter_errors(obj),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]),
    )
    return [f"{_json_path(e.absolute_path)}: {e.message}" for e in found]


def _json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def validate_message(obj: Any) -> dict[str, Any]:
    """``obj`` checked against the A2ACP schema; DecodeError names the first problem."""
    if _checker()(obj):
        assert isinstance(obj, dict)
        return obj
    problems = schema_errors(obj)
    if not problems:  # the compiled check is stricter than the schema: trust the schema
        assert isinstance(obj, dict)
        return obj
    raise DecodeError(f"not a valid A2ACP message: {problems[0]}")


# -- JSON bytes --------------------------------------------------------------------

_json_decoder = msgspec.json.Decoder()
_json_encoder = msgspec.json.Encoder()


def loads(data: bytes | str) -> dict[str, Any]:
    """A wire message: size-checked (1 MB), parsed and schema-validated."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageTooLargeError("A2ACP message", len(data), MAX_MESSAGE_BYTES)
    try:
        obj = _json_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"A2ACP message is not JSON: {exc}") from exc
    return validate_message(obj)


def dumps(message: Mapping[str, Any]) -> bytes:
    """A message as compact UTF-8 JSON."""
    try:
        return _json_encoder.encode(message)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"A2ACP message cannot be written as JSON: {exc}") from exc


# -- timestamps ----------------------------------------------------------------------
#
# format_timestamp (imported above) is the shared one in actorbus.codecs.common.


def parse_timestamp(text: str) -> int:
    """ISO 8601 -> Unix milliseconds; a time without an offset is read as UTC."""
    try:
        t = datetime.fromisoformat(text)
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"timestamp {text!r:.60} is not ISO 8601") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        delta = t - EPOCH
    except OverflowError as exc:
        raise DecodeError(f"timestamp {text!r:.60} is out of range") from exc
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


# -- typed models ----------------------------------------------------------------------


class A2acpAgent(BaseModel):
    """``source_agent`` / ``target_agent``; extra properties are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    agent_id: str
    domain: str
    version: str


class A2acpSecurity(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    auth_token: str
    encryption: Literal["none", "aes256"] = "none"


class A2acpErrorBody(BaseModel):
    """``payload.error`` of an error message."""

    model_config = ConfigDict(extra="allow", frozen=True)

    code: str
    message: str
    retry_after: float
    details: dict[str, Any] | None = None
    correlation_id: str | None = None


class A2acpMessage(BaseModel):
    """One A2ACP message, typed (build with :func:`parse_message`, which validates first)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    protocol_version: str
    message_id: str
    timestamp: str
    source_agent: A2acpAgent
    target_agent: A2acpAgent
    message_type: MessageType
    intent: str | None = None
    payload: dict[str, Any] | None = None
    security: A2acpSecurity | None = None

    @property
    def error(self) -> A2acpErrorBody | None:
        body = (self.payload or {}).get("error") if self.message_type == "error" else None
        return A2acpErrorBody.model_validate(body) if isinstance(body, dict) else None

    @property
    def contract_id(self) -> str | None:
        value = (self.payload or {}).get("contract_id")
        return value if isinstance(value, str) else None


def parse_message(obj: Any) -> A2acpMessage:
    """A schema-valid message as :class:`A2acpMessage`."""
    data = validate_message(obj)
    try:
        return A2acpMessage.model_validate(data)
    except PydanticValidationError as exc:
        raise DecodeError(f"not a valid A2ACP message: {exc.errors()[0]['msg']}") from exc


# -- envelope -> A2ACP --------------------------------------------------------------------


def encode(env: Envelope) -> dict[str, Any]:
    """The codec's ``encode``: :func:`to_message` with the extension."""
    return to_message(env)


def to_message(
    env: Envelope, *, message_type: MessageType | None = None, extension: bool = True
) -> dict[str, Any]:
    """An envelope as an A2ACP message.

    The message type is ``error`` for a ``$error`` envelope, else ``message_type``,
    else the one recorded in ``meta.a2acp`` by :func:`decode`, else ``request``.
    ``extension=False`` leaves out the ``actorbus`` object for strict peers.
    """
    facts = _facts(env.meta)
    kind = _kind_of(env, message_type, facts)
    return _build(
        env,
        kind=kind,
        intent=_native_intent(env, kind, facts),
        source=_agent(env.src, facts.get("source")),
        target=_agent(env.dst, facts.get("target")),
        version=_str_fact(facts, "protocol_version", PROTOCOL_VERSION),
        native_code=facts.get("error_code"),
        extension=extension,
    )


def reply_to(
    request: Mapping[str, Any] | A2acpMessage, env: Envelope, *, extension: bool = True
) -> dict[str, Any]:
    """The response (or error, for a ``$error`` envelope) to an A2ACP request.

    Source and target are the request's agents swapped, the intent is the
    request's, and the request payload's ``contract_id`` / ``correlation_id`` are
    copied into the reply payload when it does not set them (the spec's routing
    rule "response includes same contract_id").
    """
    req = request.model_dump() if isinstance(request, A2acpMessage) else validate_message(request)
    kind: MessageType = "error" if env.intent == _INTENT_ERROR else "response"
    return _build(
        env,
        kind=kind,
        intent=req.get("intent"),
        source=dict(req["target_agent"]),
        target=dict(req["source_agent"]),
        version=str(req["protocol_version"]),
        native_code=None,
        extension=extension,
        correlate=req.get("payload") or {},
    )


def _native_intent(env: Envelope, kind: MessageType, facts: Mapping[str, Any]) -> Any:
    """The A2ACP intent: an error's is the failed request's (if recorded); a message
    decoded without one has it recorded as absent; else the envelope's."""
    if kind == "error" or "intent" in facts:
        return facts.get("intent")
    return env.intent


def _kind_of(env: Envelope, asked: MessageType | None, facts: Mapping[str, Any]) -> MessageType:
    if env.intent == _INTENT_ERROR:
        return "error"
    if asked == "error":
        raise EncodeError("only a $error envelope can become an A2ACP error message")
    recorded = facts.get("message_type")
    if asked is not None:
        return asked
    if recorded in ("request", "response", "event"):
        return recorded  # type: ignore[no-any-return]
    return "request"


def _build(
    env: Envelope,
    *,
    kind: MessageType,
    intent: Any,
    source: dict[str, Any],
    target: dict[str, Any],
    version: str,
    native_code: Any,
    extension: bool,
    correlate: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "protocol_version": version,
        "message_id": env.id,
        "timestamp": format_timestamp(env.ts),
        "source_agent": source,
        "target_agent": target,
        "message_type": kind,
    }
    if isinstance(intent, str):
        msg["intent"] = intent
    ext: dict[str, Any] = {}
    if kind == "error":
        error = _error_body(env.content, native_code, extension)
        if correlate and isinstance(correlate.get("correlation_id"), str):
            error.setdefault("correlation_id", correlate["correlation_id"])
        msg["payload"] = {"error": error}
    else:
        payload = _payload(env.content, ext)
        if correlate:
            payload = _correlated(payload, correlate)
        if payload is not None:
            msg["payload"] = payload
    security = _security(env.meta)
    if security is not None:
        msg["security"] = security
    if extension:
        _fill_extension(env, ext, cipher_in_security=security is not None)
        if ext:
            msg[EXTENSION_KEY] = ext
    return msg


def _facts(meta: EnvelopeMeta) -> dict[str, Any]:
    extra = meta.model_extra
    facts = extra.get(FACTS_KEY) if extra else None
    return facts if isinstance(facts, dict) else {}


def _str_fact(facts: Mapping[str, Any], key: str, default: str) -> str:
    value = facts.get(key, default)
    return value if isinstance(value, str) else default


_SEMVER = re.compile(r"\d+\.\d+\.\d+")


def _agent(agent_id: str, fact: Any) -> dict[str, Any]:
    if fact is None:
        return {"agent_id": agent_id, "domain": DEFAULT_DOMAIN, "version": DEFAULT_AGENT_VERSION}
    if not (
        isinstance(fact, dict)
        and isinstance(fact.get("domain"), str)
        and isinstance(fact.get("version"), str)
        and _SEMVER.search(fact["version"])
    ):
        raise EncodeError(f"meta.a2acp agent facts {fact!r:.100} need a domain and a semver")
    return {"agent_id": agent_id, **fact}


def _payload(content: Any, ext: dict[str, Any]) -> dict[str, Any] | None:
    """The payload object for ``content``; non-objects are wrapped and marked."""
    if content is None or isinstance(content, dict):
        return content
    if isinstance(content, bytes | bytearray | memoryview):
        ext["content"] = "bytes"
        return {"content": base64.b64encode(content).decode("ascii")}
    ext["content"] = "value"
    return {"content": content}


def _correlated(
    payload: dict[str, Any] | None, request: Mapping[str, Any]
) -> dict[str, Any] | None:
    carried = {k: request[k] for k in ("contract_id", "correlation_id") if k in request}
    if not carried:
        return payload
    return {**carried, **(payload or {})}


def _security(meta: EnvelopeMeta) -> dict[str, Any] | None:
    extra = meta.model_extra
    token = extra.get(TOKEN_KEY) if extra else None
    if token is None:
        return None
    if not isinstance(token, str):
        raise EncodeError("meta.auth_token must be a string (the A2ACP JWT)")
    return {"auth_token": token, "encryption": _ENCRYPTED if meta.cipher else "none"}


_META_NATIVE = frozenset({FACTS_KEY, TOKEN_KEY})


def _fill_extension(env: Envelope, ext: dict[str, Any], *, cipher_in_security: bool) -> None:
    """Context and meta fields A2ACP has no slot for, only when they are not defaults."""
    ctx = extension_context(env.context)
    if ctx:
        ext["context"] = ctx
    rest = extension_meta(env.meta, PROTOCOL, _META_NATIVE)  # decode assumes the hint
    if cipher_in_security and rest.get("cipher") == _ENCRYPTED:
        del rest["cipher"]  # security.encryption says it
    if rest:
        ext["meta"] = rest


# -- A2ACP -> envelope ----------------------------------------------------------------------


def decode(obj: Any) -> Envelope:
    """An A2ACP message (parsed JSON) as an envelope; see the module docstring."""
    msg = validate_message(obj)
    _check_version(msg["protocol_version"])
    ext = msg.get(EXTENSION_KEY) or {}
    kind: MessageType = msg["message_type"]
    facts = _decode_facts(msg, kind)
    fields: dict[str, Any] = {
        "id": msg["message_id"],
        "ts": parse_timestamp(msg["timestamp"]),
        "src": msg["source_agent"]["agent_id"],
        "dst": msg["target_agent"]["agent_id"],
        "intent": _INTENT_ERROR if kind == "error" else (msg.get("intent") or kind),
        "content": _content(msg, kind, ext, facts),
    }
    try:
        if "context" in ext:
            fields["context"] = EnvelopeContext.model_validate(ext["context"])
        fields["meta"] = _decode_meta(msg, ext, facts)
        return Envelope.model_validate(fields)
    except PydanticValidationError as exc:
        raise DecodeError(f"A2ACP message does not make an envelope: {_first(exc)}") from exc


def _first(exc: PydanticValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def _check_version(version: str) -> None:
    major = int(version.split(".", 1)[0])
    if major not in SUPPORTED_MAJORS:
        raise UnsupportedError(
            f"A2ACP protocol_version {version} is not supported (this side speaks "
            f"{PROTOCOL_VERSION} and the majors {sorted(SUPPORTED_MAJORS)})"
        )


def _decode_facts(msg: Mapping[str, Any], kind: MessageType) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for side, key in (("source", "source_agent"), ("target", "target_agent")):
        agent = {k: v for k, v in msg[key].items() if k != "agent_id"}
        if agent != {"domain": DEFAULT_DOMAIN, "version": DEFAULT_AGENT_VERSION}:
            facts[side] = agent
    if kind in ("response", "event"):
        facts["message_type"] = kind
    if msg["protocol_version"] != PROTOCOL_VERSION:
        facts["protocol_version"] = msg["protocol_version"]
    intent = msg.get("intent")
    if (kind == "error" and intent is not None) or (kind != "error" and not intent):
        facts["intent"] = intent  # an error's request intent, or "no intent" recorded
    return facts


def _content(
    msg: Mapping[str, Any], kind: MessageType, ext: Mapping[str, Any], facts: dict[str, Any]
) -> Any:
    payload = msg.get("payload")
    if kind == "error":
        return _error_content(msg["payload"]["error"], facts)  # the schema requires it
    form = ext.get("content")
    if form is None or not isinstance(payload, dict) or "content" not in payload:
        return payload
    value = payload["content"]
    if form == "value":
        return value
    if not isinstance(value, str):
        raise DecodeError("A2ACP payload.content marked as bytes is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise DecodeError(f"A2ACP payload.content is not base64: {exc}") from exc


def _decode_meta(
    msg: Mapping[str, Any], ext: Mapping[str, Any], facts: dict[str, Any]
) -> EnvelopeMeta:
    meta: dict[str, Any] = dict(ext["meta"]) if "meta" in ext else {}
    meta.setdefault("protocol_hint", PROTOCOL)  # answer in A2ACP unless told otherwise
    security = msg.get("security")
    if security is not None:
        meta[TOKEN_KEY] = security["auth_token"]
        if security.get("encryption") == _ENCRYPTED:
            meta.setdefault("cipher", _ENCRYPTED)
    if facts:
        meta[FACTS_KEY] = facts
    return _meta(meta)


# Every envelope decoded with just the protocol hint shares one meta.
_meta = meta_builder(PROTOCOL)


# -- errors ------------------------------------------------------------------------------------


def error_to(err: ActorBusError) -> dict[str, Any]:
    """The A2ACP ``payload.error`` object for an error (with its retry_after)."""
    return _error_body(_error_content_of(err), None, True)


def _error_content_of(err: ActorBusError) -> dict[str, Any]:
    body = err.to_wire()
    retry = getattr(err, "retry_after", None)
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        body["retry_after"] = retry
    return body


def _error_body(content: Any, native_code: Any, extension: bool) -> dict[str, Any]:
    """An envelope's error content (``{code, type, message, ...}``) as ``payload.error``."""
    body = content if isinstance(content, dict) else {"message": str(content)}
    code = str(body.get("code", "E_HANDLER"))
    native = TAXONOMY_TO_A2ACP.get(code, "INTERNAL_ERROR")
    if isinstance(native_code, str) and A2ACP_TO_TAXONOMY.get(native_code, "E_HANDLER") == code:
        native = native_code
    out: dict[str, Any] = {
        "code": native,
        "message": str(body.get("message", "")),
        "retry_after": _retry_after(body.get("retry_after"), native),
    }
    given = body.get("details")
    details: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
    if extension:  # only what a decoder could not infer from the native code
        if A2ACP_TO_TAXONOMY.get(native, "E_HANDLER") != code:
            details["actorbus_code"] = code
        type_name = str(body.get("type", "Exception"))
        if type_name != _type_name(code, native):
            details["type"] = type_name
    if details:
        out["details"] = details
    if isinstance(body.get("correlation_id"), str):
        out["correlation_id"] = body["correlation_id"]
    return out


def _retry_after(value: Any, native: str) -> int | float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_RETRY_AFTER if ERROR_CODES.get(native, False) else 0


def _error_content(error: Mapping[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """``payload.error`` as an actorbus error body, keeping what A2ACP adds."""
    native = error["code"]
    details = dict(error.get("details") or {})
    code = details.pop("actorbus_code", None)
    type_name = details.pop("type", None)
    if not isinstance(code, str):
        code = A2ACP_TO_TAXONOMY.get(native, "E_HANDLER")
    if TAXONOMY_TO_A2ACP.get(code, "INTERNAL_ERROR") != native:
        facts["error_code"] = native
    body: dict[str, Any] = {
        "code": code,
        "type": type_name if isinstance(type_name, str) else _type_name(code, native),
        "message": error["message"],
        "retry_after": error["retry_after"],
    }
    if details:
        body["details"] = details
    if "correlation_id" in error:
        body["correlation_id"] = error["correlation_id"]
    return body


def _type_name(code: str, native: str) -> str:
    cls = CLASS_OF_CODE.get(code)
    return native if cls is None or code == "E_HANDLER" else cls.__name__


def error_from(obj: Any) -> ActorBusError:
    """The typed error for an A2ACP error message or a bare ``payload.error`` object.

    Malformed input gives a ProtocolError (returned, not raised). The error has
    ``retry_after`` (seconds; 0 = do not retry) as an attribute.
    """
    try:
        if isinstance(obj, dict) and "message_type" in obj:
            msg = validate_message(obj)
            if msg["message_type"] != "error":
                return ProtocolError(f"A2ACP {msg['message_type']} message is not an error")
            error = msg["payload"]["error"]
        else:
            error = _bare_error(obj)
    except DecodeError as exc:
        return ProtocolError(f"malformed A2ACP error: {exc}")
    return _error_instance(_error_content(error, {}), error["code"])


@functools.cache
def _error_checker() -> _Check:
    schema = a2acp_schema()
    return _Compiler(schema).predicate(schema["definitions"]["Error"])


def _bare_error(obj: Any) -> Mapping[str, Any]:
    if not _error_checker()(obj):
        raise DecodeError(f"not an A2ACP error object: {obj!r:.200}")
    assert isinstance(obj, dict)
    return obj


def _error_instance(body: Mapping[str, Any], native: str) -> ActorBusError:
    code, message = body["code"], body["message"]
    err = error_for_code(code, message, str(body.get("type") or native))
    err.retry_after = body["retry_after"]  # type: ignore[attr-defined]
    return err


# -- the lifecycle ---------------------------------------------------------------------------------


class A2acpState(StrEnum):
    IDLE = "idle"
    HANDSHAKE_REQUESTED = "handshake_requested"
    ACCEPTANCE_REQUESTED = "acceptance_requested"
    ACCEPTED = "accepted"
    CONTRACTED = "contracted"
    CLOSED = "closed"
    REJECTED = "rejected"


_TERMINAL = frozenset({A2acpState.CLOSED, A2acpState.REJECTED})
_PRE_CONTRACT = frozenset(
    {A2acpState.HANDSHAKE_REQUESTED, A2acpState.ACCEPTANCE_REQUESTED, A2acpState.ACCEPTED}
)


class A2acpSession:
    """One collaboration's lifecycle: handshake -> contract -> routed messages.

    Pure: feed it every message of the collaboration, in order, with
    :meth:`observe`; it returns the new state or raises ProtocolError naming the
    state and the message that does not fit. It fits every seat: a source agent
    sees ``initiate_handshake`` then the broker's contract response; a target
    sees ``accept_handshake``, answers ``{"accepted": ...}`` and is told the
    contract; the broker sees all of it. Once contracted, every request,
    response and event must carry the contract's ``contract_id`` in its
    payload; ``terminate_collaboration`` closes; an error before the contract
    rejects the collaboration, one after it does not end it.
    """

    def __init__(self) -> None:
        self.state = A2acpState.IDLE
        self.contract_id: str | None = None
        self.collaboration_id: str | None = None
        self.contract: dict[str, Any] | None = None

    @property
    def timeout_s(self) -> float | None:
        """How long the current step may take by the spec (None once ended)."""
        if self.state in _TERMINAL:
            return None
        return ROUTING_TIMEOUT_S if self.state is A2acpState.CONTRACTED else HANDSHAKE_TIMEOUT_S

    def observe(self, message: Mapping[str, Any] | A2acpMessage) -> A2acpState:
        msg = message if isinstance(message, A2acpMessage) else parse_message(message)
        if self.state in _TERMINAL:
            raise self._illegal(msg, "the collaboration has ended")
        step = getattr(self, "_in_" + self.state.value)
        new: A2acpState = step(msg, msg.payload or {})
        self.state = new
        return new

    def _illegal(self, msg: A2acpMessage, why: str) -> ProtocolError:
        return ProtocolError(
            f"A2ACP session in state {self.state.value!r} cannot take a "
            f"{msg.message_type!r} message with intent {msg.intent!r}: {why}"
        )

    def _in_idle(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "request" and msg.intent == INTENT_INITIATE_HANDSHAKE:
            for key in ("target_agent_id", "requested_intent"):
                if not isinstance(payload.get(key), str):
                    raise self._illegal(msg, f"the handshake payload needs a string {key!r}")
            return A2acpState.HANDSHAKE_REQUESTED
        if msg.message_type == "request" and msg.intent == INTENT_ACCEPT_HANDSHAKE:
            return A2acpState.ACCEPTANCE_REQUESTED
        raise self._illegal(msg, "a collaboration starts with a handshake")

    def _in_handshake_requested(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "request" and msg.intent == INTENT_ACCEPT_HANDSHAKE:
            return A2acpState.ACCEPTANCE_REQUESTED
        return self._contract_or_reject(msg, payload)

    def _in_acceptance_requested(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "error":
            return A2acpState.REJECTED
        accepted = payload.get("accepted")
        if msg.message_type != "response" or not isinstance(accepted, bool):
            raise self._illegal(msg, 'the target must answer {"accepted": true|false}')
        return A2acpState.ACCEPTED if accepted else A2acpState.REJECTED

    def _in_accepted(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        return self._contract_or_reject(msg, payload)

    def _contract_or_reject(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "error":
            return A2acpState.REJECTED
        contract = payload.get("contract")
        collaboration = payload.get("collaboration_id")
        if msg.message_type == "request" or not isinstance(contract, dict):
            raise self._illegal(msg, "expected the broker's contract (collaboration_id, contract)")
        contract_id = contract.get("contract_id", payload.get("contract_id"))
        if not isinstance(collaboration, str) or not isinstance(contract_id, str):
            raise self._illegal(msg, "the contract needs a collaboration_id and a contract_id")
        self.contract, self.contract_id, self.collaboration_id = (
            contract,
            contract_id,
            collaboration,
        )
        return A2acpState.CONTRACTED

    def _in_contracted(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "error":
            return A2acpState.CONTRACTED
        if payload.get("contract_id") != self.contract_id:
            raise self._illegal(msg, f"routed messages must carry contract_id {self.contract_id!r}")
        if msg.message_type == "request" and msg.intent == INTENT_TERMINATE:
            return A2acpState.CLOSED
        return A2acpState.CONTRACTED


CODEC = register(
    Codec(PROTOCOL, encode, decode, error_to, error_from, carries=ENVELOPE_FIELDS_BUT_HINT)
)
