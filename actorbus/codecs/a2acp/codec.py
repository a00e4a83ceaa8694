"""Envelope <-> A2ACP message, and the error mapping."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError as PydanticValidationError

from actorbus.codecs.a2acp.checker import (
    A2ACP_TO_TAXONOMY,
    DEFAULT_AGENT_VERSION,
    DEFAULT_DOMAIN,
    DEFAULT_RETRY_AFTER,
    ENCRYPTED,
    ERROR_CODES,
    EXTENSION_KEY,
    FACTS_KEY,
    INTENT_ERROR,
    PROTOCOL,
    PROTOCOL_VERSION,
    SUPPORTED_MAJORS,
    TAXONOMY_TO_A2ACP,
    TOKEN_KEY,
    Check,
    Compiler,
    MessageType,
    a2acp_schema,
    parse_timestamp,
    validate_message,
)
from actorbus.codecs.common import (
    extension_context,
    extension_meta,
    format_timestamp as format_timestamp,
    meta_builder,
)
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    CLASS_OF_CODE,
    ActorBusError,
    DecodeError,
    EncodeError,
    ProtocolError,
    UnsupportedError,
    error_for_code,
)

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
    kind: MessageType = "error" if env.intent == INTENT_ERROR else "response"
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
    if env.intent == INTENT_ERROR:
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
    return {"auth_token": token, "encryption": ENCRYPTED if meta.cipher else "none"}


_META_NATIVE = frozenset({FACTS_KEY, TOKEN_KEY})


def _fill_extension(env: Envelope, ext: dict[str, Any], *, cipher_in_security: bool) -> None:
    """Context and meta fields A2ACP has no slot for, only when they are not defaults."""
    ctx = extension_context(env.context)
    if ctx:
        ext["context"] = ctx
    rest = extension_meta(env.meta, PROTOCOL, _META_NATIVE)  # decode assumes the hint
    if cipher_in_security and rest.get("cipher") == ENCRYPTED:
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
        "intent": INTENT_ERROR if kind == "error" else (msg.get("intent") or kind),
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
        if security.get("encryption") == ENCRYPTED:
            meta.setdefault("cipher", ENCRYPTED)
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
def _error_checker() -> Check:
    schema = a2acp_schema()
    return Compiler(schema).predicate(schema["definitions"]["Error"])


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
