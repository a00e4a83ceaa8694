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

import base64
import binascii
import importlib.metadata
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec
from pydantic import ValidationError as PydanticValidationError

from actorbus.codecs.common import (
    ENVELOPE_FIELDS_BUT_HINT,
    content_intent,
    extension_context,
    extension_meta,
    meta_builder,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    EncodeError,
    InvalidAddressError,
    ProtocolError,
    error_for_code,
)

PROTOCOL = "synadia"
PROTOCOL_VERSION = "0.3"
SERVICE_NAME = "agents"
QUEUE_GROUP = "agents"
PROMPT_ENDPOINT = "prompt"
STATUS_ENDPOINT = "status"
VERB_PROMPT, VERB_HEARTBEAT, VERB_STATUS = "prompt", "hb", "status"
DISCOVERY_SUBJECT = f"$SRV.INFO.{SERVICE_NAME}"
PING_SUBJECT = f"$SRV.PING.{SERVICE_NAME}"
HEARTBEAT_WILDCARD = "agents.hb.*.*.*"
INFO_RESPONSE_TYPE = "io.nats.micro.v1.info_response"

ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
SENDER_HEADER = "Agent-Sender"
MAX_ERROR_DESCRIPTION = 200

DEFAULT_SESSION = "default"
DEFAULT_MAX_PAYLOAD = "1MB"
DEFAULT_HEARTBEAT_INTERVAL_S = 30
DEFAULT_KEEPALIVE_INTERVAL_S = 30.0
LIVENESS_SLACK = 3
CLIENT_INACTIVITY_TIMEOUT_S = 60.0  # the client's per-chunk timeout: keep-alives beat it

EXTENSION_KEY = "actorbus"
FACTS_KEY = "synadia"
SENDER_KEY = "agent_sender"  # meta extra holding the Agent-Sender header
ATTACHMENT_NAME = "content.bin"
BINARY_PROMPT = "(binary content attached)"

_INTENT_ERROR, _INTENT_END = "$error", "$end"

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


def _dumps(obj: Any) -> bytes:
    try:
        return _json_encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot be written as JSON: {exc}") from exc


def _loads(data: bytes | str, what: str) -> Any:
    try:
        return _json_decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"Synadia {what} is not JSON: {exc}") from exc


# -- subjects ------------------------------------------------------------------------------

_AGENT_TOKEN = re.compile(r"[a-z0-9-]+")
_OWNER_TOKEN = re.compile(r"[a-z0-9_-]+")


def agent_token(name: str) -> str:
    """An actor type name as the protocol's ``agent`` token (lowercase, digits, ``-``):
    ``TranslateAgent`` -> ``translate-agent``."""
    kebab = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower()
    token = re.sub(r"[^a-z0-9]+", "-", kebab).strip("-")
    if not token:
        raise InvalidAddressError(f"{name!r} cannot be a Synadia agent name")
    return token


def subject_token(value: str, what: str = "owner") -> str:
    """An owner or session name as a subject token; anything outside
    ``[a-z0-9_-]`` is escaped as unpadded base64url, as the SDK does."""
    if not value:
        raise InvalidAddressError(f"the Synadia {what} cannot be empty")
    if _OWNER_TOKEN.fullmatch(value):
        return value
    return base64.urlsafe_b64encode(value.encode()).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class AgentSubject:
    """The three tokens naming an agent; its prompt, status and heartbeat subjects."""

    agent: str
    owner: str
    session: str = DEFAULT_SESSION

    @classmethod
    def new(cls, agent: str, owner: str, session: str = DEFAULT_SESSION) -> AgentSubject:
        if not _AGENT_TOKEN.fullmatch(agent):
            raise InvalidAddressError(f"Synadia agent {agent!r} must match [a-z0-9-]+")
        return cls(agent, subject_token(owner, "owner"), subject_token(session, "session"))

    def _subject(self, verb: str) -> str:
        return f"agents.{verb}.{self.agent}.{self.owner}.{self.session}"

    @property
    def prompt(self) -> str:
        return self._subject(VERB_PROMPT)

    @property
    def status(self) -> str:
        return self._subject(VERB_STATUS)

    @property
    def heartbeat(self) -> str:
        return self._subject(VERB_HEARTBEAT)


def parse_subject(subject: str) -> tuple[str, AgentSubject]:
    """``agents.{verb}.{agent}.{owner}.{session}`` -> (verb, AgentSubject)."""
    parts = subject.split(".") if isinstance(subject, str) else []
    if (
        len(parts) != 5
        or parts[0] != "agents"
        or parts[1]
        not in (
            VERB_PROMPT,
            VERB_HEARTBEAT,
            VERB_STATUS,
        )
    ):
        raise InvalidAddressError(f"{subject!r} is not a Synadia agent subject")
    verb, agent, owner, session = parts[1:]
    if not (
        _AGENT_TOKEN.fullmatch(agent)
        and _OWNER_TOKEN.fullmatch(owner)
        and _OWNER_TOKEN.fullmatch(session)
    ):
        raise InvalidAddressError(f"{subject!r} has tokens the protocol does not allow")
    return verb, AgentSubject(agent, owner, session)


# -- sizes -----------------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB)\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}


def parse_size(text: str) -> int:
    """``max_payload`` (``"1MB"``, ``"512KB"``; base 1024, as the SDK) -> bytes."""
    match = _SIZE.match(text) if isinstance(text, str) else None
    if match is None:
        raise DecodeError(f"{text!r:.40} is not a Synadia size like '1MB'")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def format_size(size: int) -> str:
    """Bytes in the ``max_payload`` grammar, in the largest exact unit."""
    if size < 0:
        raise EncodeError("a size cannot be negative")
    for unit in ("GB", "MB", "KB"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return f"{size}B"


# -- the micro service -------------------------------------------------------------------------


def _actorbus_version() -> str:
    try:
        return importlib.metadata.version("actorbus")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def service_config(
    actor_type: str,
    *,
    owner: str,
    session: str = DEFAULT_SESSION,
    description: str = "",
    version: str | None = None,
    max_payload: str = DEFAULT_MAX_PAYLOAD,
    attachments_ok: bool = True,
    min_sender_trust: Literal["any", "signed"] = "any",
    extra_metadata: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What the ``agents`` micro service for an actor type registers.

    ``{name, version, description, metadata, endpoints: [{name, subject,
    queue_group, metadata}]}``: the arguments of nats-py's ``ServiceConfig`` and
    ``EndpointConfig`` (prompt first, then status). The metadata's required keys
    win over ``extra_metadata``; ``actorbus_type`` names the actor type so an
    actorbus caller maps the agent back to it.
    """
    subject = AgentSubject.new(agent_token(actor_type), owner, session)
    parse_size(max_payload)
    metadata = {
        **dict(extra_metadata or {}),
        "actorbus_type": actor_type,
        "agent": subject.agent,
        "owner": subject.owner,
        "session": subject.session,
        "protocol_version": PROTOCOL_VERSION,
    }
    prompt_metadata = {
        "max_payload": max_payload,
        "attachments_ok": "true" if attachments_ok else "false",
        "min_sender_trust": min_sender_trust,
    }
    return {
        "name": SERVICE_NAME,
        "version": version or _actorbus_version(),
        "description": description or f"actorbus actor {actor_type}",
        "metadata": metadata,
        "endpoints": [
            _endpoint(PROMPT_ENDPOINT, subject.prompt, prompt_metadata),
            _endpoint(STATUS_ENDPOINT, subject.status, {}),
        ],
    }


def _endpoint(name: str, subject: str, metadata: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "subject": subject, "queue_group": QUEUE_GROUP, "metadata": metadata}


def service_info(config: Mapping[str, Any], instance_id: str) -> dict[str, Any]:
    """The ``$SRV.INFO`` reply of one instance of a :func:`service_config` service."""
    return {
        "type": INFO_RESPONSE_TYPE,
        "name": config["name"],
        "id": instance_id,
        "version": config["version"],
        "description": config["description"],
        "endpoints": [dict(e) for e in config["endpoints"]],
        "metadata": dict(config["metadata"]),
    }


@dataclass(frozen=True)
class SynadiaAgentInfo:
    """A discovered agent (one ``$SRV.INFO`` reply), as an actorbus caller needs it."""

    instance_id: str
    subject: AgentSubject | None
    protocol_version: str
    description: str
    version: str
    metadata: dict[str, str]
    prompt_subject: str
    status_subject: str | None
    max_payload: int | None
    attachments_ok: bool | None
    min_sender_trust: str

    @property
    def actor_type(self) -> str | None:
        return self.metadata.get("actorbus_type")


def parse_service_info(info: Any) -> SynadiaAgentInfo | None:
    """A ``$SRV.INFO`` reply as an agent, or None when it is not a protocol agent
    (another service, missing required metadata, no ``prompt`` endpoint)."""
    if not isinstance(info, dict) or info.get("name") != SERVICE_NAME:
        return None
    raw = info.get("metadata")
    metadata = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    if not all(metadata.get(k) for k in ("agent", "owner", "protocol_version")):
        return None
    endpoints = {str(e.get("name")): e for e in info.get("endpoints") or [] if isinstance(e, dict)}
    prompt = endpoints.get(PROMPT_ENDPOINT)
    if prompt is None or not isinstance(prompt.get("subject"), str):
        return None
    return _agent_info(info, metadata, prompt, endpoints.get(STATUS_ENDPOINT))


def _agent_info(
    info: Mapping[str, Any],
    metadata: dict[str, str],
    prompt: Mapping[str, Any],
    status: Mapping[str, Any] | None,
) -> SynadiaAgentInfo:
    pmeta = prompt.get("metadata") if isinstance(prompt.get("metadata"), dict) else {}
    assert isinstance(pmeta, dict)
    try:
        max_payload: int | None = parse_size(str(pmeta.get("max_payload", "")))
    except DecodeError:
        max_payload = None
    try:
        subject: AgentSubject | None = parse_subject(prompt["subject"])[1]
    except InvalidAddressError:
        subject = None  # a custom subject: the session is opaque
    ok = pmeta.get("attachments_ok")
    return SynadiaAgentInfo(
        instance_id=str(info.get("id", "")),
        subject=subject,
        protocol_version=metadata["protocol_version"],
        description=str(info.get("description") or ""),
        version=str(info.get("version") or ""),
        metadata=metadata,
        prompt_subject=prompt["subject"],
        status_subject=str(status["subject"]) if status and "subject" in status else None,
        max_payload=max_payload,
        attachments_ok=None if ok not in ("true", "false") else ok == "true",
        min_sender_trust="any" if pmeta.get("min_sender_trust", "any") == "any" else "signed",
    )


# -- heartbeats ----------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HEARTBEAT_FIELDS = frozenset(
    {
        "agent",
        "owner",
        "session",
        "instance_id",
        "ts",
        "interval_s",
        "protocol_version",
        "endpoints",
    }
)


def _iso_seconds(ts_ms: int) -> str:
    try:
        t = _EPOCH + timedelta(milliseconds=ts_ms)
    except OverflowError as exc:
        raise EncodeError(f"timestamp {ts_ms} ms is outside the years 1..9999") from exc
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def heartbeat_payload(
    subject: AgentSubject,
    *,
    instance_id: str,
    ts_ms: int,
    interval_s: int = DEFAULT_HEARTBEAT_INTERVAL_S,
    prompt_metadata: Mapping[str, str] | None = None,
    extras: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A heartbeat (and ``status`` reply) payload; ``ts_ms`` is the caller's clock.

    ``prompt_metadata`` declares the prompt endpoint as ``$SRV.INFO`` does;
    ``extras`` add fields but may not reuse the protocol's.
    """
    if interval_s <= 0:
        raise EncodeError("a heartbeat interval must be positive")
    clash = sorted(_HEARTBEAT_FIELDS.intersection(extras or {}))
    if clash:
        raise EncodeError(f"heartbeat extras cannot reuse the protocol's fields {clash}")
    payload: dict[str, Any] = {
        "agent": subject.agent,
        "owner": subject.owner,
        "session": subject.session,
        "instance_id": instance_id,
        "ts": _iso_seconds(ts_ms),
        "interval_s": interval_s,
        "protocol_version": PROTOCOL_VERSION,
    }
    if prompt_metadata is not None:
        payload["endpoints"] = {
            PROMPT_ENDPOINT: {"subject": subject.prompt, "metadata": dict(prompt_metadata)}
        }
    return {**payload, **dict(extras or {})}


def parse_heartbeat(obj: Any) -> dict[str, Any]:
    """A heartbeat payload (JSON bytes or object), checked; unknown fields kept."""
    data = _loads(obj, "heartbeat") if isinstance(obj, bytes | str) else obj
    if not isinstance(data, dict):
        raise DecodeError("a Synadia heartbeat must be a JSON object")
    for key in ("agent", "owner", "instance_id", "ts"):
        if not isinstance(data.get(key), str):
            raise DecodeError(f"a Synadia heartbeat needs a string {key!r}")
    interval = data.get("interval_s")
    if type(interval) is not int or interval <= 0:
        raise DecodeError("a Synadia heartbeat needs a positive integer 'interval_s'")
    heartbeat_ms(data)
    return data


def heartbeat_ms(heartbeat: Mapping[str, Any]) -> int:
    """When a heartbeat was sent, in Unix ms."""
    try:
        t = datetime.fromisoformat(str(heartbeat["ts"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise DecodeError(f"heartbeat ts {heartbeat.get('ts')!r:.40} is not ISO 8601") from exc
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def is_alive(heartbeat: Mapping[str, Any], now_ms: int) -> bool:
    """Whether the instance counts as online: last beat within 3 intervals."""
    window = LIVENESS_SLACK * int(heartbeat["interval_s"]) * 1000
    return now_ms - heartbeat_ms(heartbeat) <= window


# -- the prompt (request) --------------------------------------------------------------------------


def parse_request(data: bytes) -> dict[str, Any]:
    """A prompt body as the request object (JSON, or plain text as ``{"prompt": text}``)."""
    if not data:
        raise DecodeError("a Synadia prompt cannot be empty")
    if data.lstrip(b" \t\r\n")[:1] != b"{":
        try:
            return {"prompt": data.decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise DecodeError("a Synadia prompt is neither JSON nor UTF-8 text") from exc
    return check_request(_loads(data, "prompt"))


def check_request(obj: Any) -> dict[str, Any]:
    """The request object's protocol fields checked (``prompt`` non-empty text;
    ``attachments`` a list of ``{filename, content}`` strings)."""
    if not isinstance(obj, dict):
        raise DecodeError("a Synadia prompt must be a JSON object")
    if not isinstance(obj.get("prompt"), str) or not obj["prompt"]:
        raise DecodeError("a Synadia prompt needs a non-empty string 'prompt'")
    _check_attachments(obj.get("attachments"), "prompt")
    return obj


def _check_attachments(value: Any, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, list) or not all(
        isinstance(a, dict)
        and isinstance(a.get("filename"), str)
        and isinstance(a.get("content"), str)
        for a in value
    ):
        raise DecodeError(f"Synadia {what} attachments must be [{{filename, content}}] strings")


def encode(env: Envelope) -> dict[str, Any]:
    """An envelope as a prompt object (see the module docstring)."""
    ext: dict[str, Any] = {}
    facts = _facts(env.meta)
    out = _prompt_fields(env.content, ext, facts)
    extras = facts.get("extras")
    if isinstance(extras, dict):
        out = {**extras, **out}
    _fill_ext(env, ext, content_intent(env.content))
    if ext:
        out[EXTENSION_KEY] = ext
    return out


def encode_request(env: Envelope) -> bytes:
    """The prompt body to publish (compact JSON)."""
    return _dumps(encode(env))


def request_headers(env: Envelope) -> dict[str, str] | None:
    """The request's headers: ``Agent-Sender`` when the envelope carries one."""
    extra = env.meta.model_extra
    sender = extra.get(SENDER_KEY) if extra else None
    return {SENDER_HEADER: sender} if isinstance(sender, str) else None


def _prompt_fields(content: Any, ext: dict[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(content, str) and content:
        return {"prompt": content}
    if isinstance(content, bytes | bytearray | memoryview):
        ext["content"] = "bytes"
        return {"prompt": BINARY_PROMPT, "attachments": [_attachment(content)]}
    if facts.get("form") == "prompt" and _is_prompt_object(content):
        return dict(content)
    ext["content"] = "json"
    return {"prompt": _dumps(content).decode("utf-8")}


def _is_prompt_object(content: Any) -> bool:
    try:
        check_request(content)
    except DecodeError:
        return False
    return set(content) <= {"prompt", "attachments"}


def _attachment(data: bytes | bytearray | memoryview) -> dict[str, str]:
    return {"filename": ATTACHMENT_NAME, "content": base64.b64encode(data).decode("ascii")}


def _facts(meta: EnvelopeMeta) -> dict[str, Any]:
    extra = meta.model_extra
    facts = extra.get(FACTS_KEY) if extra else None
    return facts if isinstance(facts, dict) else {}


_META_NATIVE = frozenset({FACTS_KEY, SENDER_KEY})


def _fill_ext(env: Envelope, ext: dict[str, Any], default_intent: str) -> None:
    """Every envelope field the prompt has no slot for, when it is not a default."""
    ext.update(id=env.id, ts=env.ts)
    for key in ("src", "dst"):
        if getattr(env, key):
            ext[key] = getattr(env, key)
    if env.intent != default_intent:
        ext["intent"] = env.intent
    ctx = extension_context(env.context)
    if ctx:
        ext["context"] = ctx
    rest = extension_meta(env.meta, PROTOCOL, _META_NATIVE)
    if rest:
        ext["meta"] = rest


def decode(obj: Any) -> Envelope:
    """A prompt (request object, or its raw body as bytes / text) as an envelope."""
    if isinstance(obj, bytes | bytearray):
        request = parse_request(bytes(obj))
    elif isinstance(obj, str):
        request = check_request({"prompt": obj})
    else:
        request = check_request(obj)
    return _request_envelope(request, {})


def request_to_envelope(
    data: bytes,
    *,
    subject: str,
    dst: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Envelope:
    """A prompt as it arrived on an actorbus actor's ``prompt`` endpoint.

    ``dst`` is the actor address (the ``agent`` token when not given); the
    subject's session becomes ``context.session_id`` unless it is ``default``;
    an ``Agent-Sender`` header is kept in ``meta.agent_sender``, unchanged.
    """
    _, agent = parse_subject(subject)
    given: dict[str, Any] = {"default_dst": agent.agent}
    if dst is not None:
        given["dst"] = dst
    if agent.session != DEFAULT_SESSION:
        given["session_id"] = agent.session
    sender = (headers or {}).get(SENDER_HEADER)
    if sender is not None:
        given[SENDER_KEY] = sender
    return _request_envelope(parse_request(data), given)


def _request_envelope(request: dict[str, Any], given: dict[str, Any]) -> Envelope:
    ext = request.get(EXTENSION_KEY)
    if ext is not None and not isinstance(ext, dict):
        raise DecodeError("the prompt's 'actorbus' field must be an object")
    ext = ext or {}
    facts: dict[str, Any] = {}
    extras = {k: v for k, v in request.items() if k not in ("prompt", "attachments", EXTENSION_KEY)}
    if extras:
        facts["extras"] = extras
    content = _content_of(request, ext, facts)
    fields: dict[str, Any] = {"dst": given.get("default_dst", ""), "content": content}
    fields["intent"] = content_intent(content)
    for key in ("id", "ts", "src", "dst", "intent"):
        if key in ext:
            fields[key] = ext[key]
    if "dst" in given:  # where it arrived wins over what the sender wrote
        fields["dst"] = given["dst"]
    context = _ext_dict(ext, "context")
    if "session_id" in given:
        context.setdefault("session_id", given["session_id"])
    meta = _ext_dict(ext, "meta")
    meta.setdefault("protocol_hint", PROTOCOL)
    if SENDER_KEY in given:
        meta[SENDER_KEY] = given[SENDER_KEY]
    if facts:
        meta[FACTS_KEY] = facts
    return _envelope(fields, context, meta)


def _ext_dict(ext: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = ext.get(key, {})
    if not isinstance(value, dict):
        raise DecodeError(f"the 'actorbus' extension's {key!r} must be an object")
    return dict(value)


# Every envelope decoded with just the protocol hint shares one meta.
_meta = meta_builder(PROTOCOL)


def _envelope(fields: dict[str, Any], context: dict[str, Any], meta: dict[str, Any]) -> Envelope:
    try:
        if context:
            fields["context"] = EnvelopeContext.model_validate(context)
        fields["meta"] = _meta(meta)
        return Envelope.model_validate(fields)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DecodeError(
            f"Synadia message does not make an envelope: {where}: {err['msg']}"
        ) from exc


def _content_of(request: Mapping[str, Any], ext: Mapping[str, Any], facts: dict[str, Any]) -> Any:
    form = ext.get("content")
    prompt = request["prompt"]
    attachments = request.get("attachments")
    if form == "bytes":
        if not attachments:
            raise DecodeError("a prompt marked as bytes has no attachment")
        return _attachment_bytes(attachments[0])
    if form == "json":
        return _loads(prompt, "prompt marked as JSON")
    if attachments is not None:
        facts["form"] = "prompt"
        return {"prompt": prompt, "attachments": attachments}
    return prompt


def _attachment_bytes(attachment: Mapping[str, Any]) -> bytes:
    try:
        return base64.b64decode(attachment["content"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"Synadia attachment content is not base64: {exc}") from exc


# -- the reply stream ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One message of a reply stream: its body and its headers."""

    data: bytes
    headers: dict[str, str] | None = None

    @property
    def is_end(self) -> bool:
        return not self.data and not self.headers

    @property
    def is_error(self) -> bool:
        return bool(self.headers) and ERROR_CODE_HEADER in (self.headers or {})


ACK_FRAME = Frame(b'{"type":"status","data":"ack"}')
END_FRAME = Frame(b"")


def reply_chunk(env: Envelope) -> dict[str, Any]:
    """A reply or stream item envelope as a ``response`` chunk; what the envelope
    has beyond its text rides the chunk's ``actorbus`` field (clients ignore it)."""
    ext: dict[str, Any] = {}
    content = env.content
    data: Any
    if isinstance(content, str):
        data = content
    elif isinstance(content, bytes | bytearray | memoryview):
        ext["content"] = "bytes"
        data = {"text": "", "attachments": [_attachment(content)]}
    else:
        ext["content"] = "json"
        data = _dumps(content).decode("utf-8")
    chunk: dict[str, Any] = {"type": "response", "data": data}
    _fill_ext(env, ext, content_intent(content))
    chunk[EXTENSION_KEY] = ext
    return chunk


def reply_frames(env: Envelope) -> list[Frame]:
    """The frames for one envelope of a reply: an error frame and the end marker for
    ``$error``, the end marker for ``$end``, else one response chunk."""
    if env.intent == _INTENT_ERROR:
        return [error_frame(env.content), END_FRAME]
    if env.intent == _INTENT_END:
        return [END_FRAME]
    return [Frame(_dumps(reply_chunk(env)))]


def reply_stream(items: Iterable[Envelope], *, ack: bool = True) -> Iterator[Frame]:
    """A whole reply: the leading ack, every item's frames, the end marker once."""
    if ack:
        yield ACK_FRAME
    for env in items:
        frames = reply_frames(env)
        yield from frames
        if frames[-1].is_end:
            return
    yield END_FRAME


def status_chunk(token: str = "ack") -> Frame:
    """A ``status`` chunk (``ack`` is the leading ack and the keep-alive)."""
    return Frame(_dumps({"type": "status", "data": token}))


def query_chunk(query_id: str, reply_subject: str, prompt: str) -> Frame:
    """A mid-stream question; the caller answers once on ``reply_subject``."""
    data = {"id": query_id, "reply_subject": reply_subject, "prompt": prompt}
    return Frame(_dumps({"type": "query", "data": data}))


ChunkKind = Literal["response", "status", "query", "ignored", "error", "end"]


@dataclass(frozen=True)
class ReplyEvent:
    """One frame of an agent's reply, read: ``chunk`` for response/status/query,
    ``error`` for an error frame."""

    kind: ChunkKind
    chunk: dict[str, Any] | None = None
    error: ActorBusError | None = None

    @property
    def text(self) -> str | None:
        if self.kind != "response" or self.chunk is None:
            return None
        data = self.chunk["data"]
        return data if isinstance(data, str) else str(data["text"])


def read_frame(data: bytes, headers: Mapping[str, str] | None = None) -> ReplyEvent:
    """Classify one reply frame (error, end marker, chunk) and check its chunk."""
    if headers and ERROR_CODE_HEADER in headers:
        return ReplyEvent("error", error=error_from(Frame(data, dict(headers))))
    if not data and not headers:
        return ReplyEvent("end")
    chunk = _loads(data, "reply chunk")
    if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
        raise DecodeError("a Synadia reply chunk must be an object with a string 'type'")
    kind = chunk["type"]
    if kind not in ("response", "status", "query"):
        return ReplyEvent("ignored", chunk)  # the protocol says: drop unknown types
    _CHUNK_CHECKS[kind](chunk.get("data"))
    return ReplyEvent(kind, chunk)


def _check_response(data: Any) -> None:
    if isinstance(data, str):
        return
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise DecodeError("a response chunk's data must be text or {text, attachments}")
    _check_attachments(data.get("attachments"), "response")


def _check_status(data: Any) -> None:
    if not isinstance(data, str):
        raise DecodeError("a status chunk's data must be a string")


def _check_query(data: Any) -> None:
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("id", "reply_subject", "prompt")
    ):
        raise DecodeError("a query chunk's data needs string id, reply_subject and prompt")
    _check_attachments(data.get("attachments"), "query")


_CHUNK_CHECKS = {"response": _check_response, "status": _check_status, "query": _check_query}


def chunk_to_envelope(chunk: Mapping[str, Any], request: Envelope) -> Envelope:
    """A ``response`` chunk as the reply envelope to ``request`` (its fields from the
    chunk's extension when an actorbus agent sent it)."""
    if not isinstance(chunk, Mapping) or chunk.get("type") != "response":
        raise DecodeError("only a Synadia response chunk becomes a reply envelope")
    data = chunk.get("data")
    _check_response(data)
    ext = chunk.get(EXTENSION_KEY)
    ext = ext if isinstance(ext, dict) else {}
    form = ext.get("content")
    content: Any
    if isinstance(data, dict):
        attachments = data.get("attachments") or []
        if form == "bytes" and attachments:
            content = _attachment_bytes(attachments[0])
        else:  # text with attachments stays the {text, attachments} object
            content = dict(data) if attachments else data.get("text")
    elif form == "json" and isinstance(data, str):
        content = _loads(data, "chunk marked as JSON")
    else:
        content = data
    fields: dict[str, Any] = {"content": content, "intent": content_intent(content)}
    if ext:  # an actorbus agent said exactly who and what
        fields.update(src="", dst="")
        fields.update({k: ext[k] for k in ("id", "ts", "src", "dst", "intent") if k in ext})
        context = _ext_dict(ext, "context")
    else:  # any other agent: the reply to the request
        fields.update(src=request.dst, dst=request.src)
        context = {"trace_id": request.context.trace_id, "parent_id": request.id}
    meta = _ext_dict(ext, "meta")
    meta.setdefault("protocol_hint", PROTOCOL)
    return _envelope(fields, {k: v for k, v in context.items() if v is not None}, meta)


@dataclass
class ReplyStream:
    """Reads an agent's reply stream in order (pure; feed it every frame).

    The rules of the host: chunks until the end marker; an error frame is
    followed only by the end marker; nothing comes after the end marker.
    ``responses`` counts response chunks, ``acked`` says a status ack arrived.
    """

    ended: bool = False
    failed: ActorBusError | None = None
    acked: bool = False
    responses: int = 0
    events: list[ReplyEvent] = field(default_factory=list)

    def feed(self, data: bytes, headers: Mapping[str, str] | None = None) -> ReplyEvent:
        if self.ended:
            raise ProtocolError("Synadia reply stream: a frame after the end marker")
        event = read_frame(data, headers)
        if self.failed is not None and event.kind != "end":
            raise ProtocolError(f"Synadia reply stream: {event.kind} after the error frame")
        if event.kind == "end":
            self.ended = True
        elif event.kind == "error":
            self.failed = event.error
        elif event.kind == "status" and event.chunk and event.chunk["data"] == "ack":
            self.acked = True
        elif event.kind == "response":
            self.responses += 1
        self.events.append(event)
        return event


# -- errors ----------------------------------------------------------------------------------------

#: taxonomy code -> Nats-Service-Error-Code (HTTP style; an unknown code is 500)
TAXONOMY_TO_STATUS: dict[str, str] = {
    "E_DECODE": "400",
    "E_VALIDATION": "400",
    "E_PROTOCOL": "400",
    "E_ADDRESS": "400",
    "E_AUTH": "401",
    "E_NOT_FOUND": "404",
    "E_NO_RESPONDERS": "404",
    "E_EXPIRED": "408",
    "E_TOO_LARGE": "413",
    "E_RATE_LIMIT": "429",
    "E_CANCELLED": "499",
    "E_ENCODE": "500",
    "E_HANDLER": "500",
    "E_INTERNAL": "500",
    "E_UNSUPPORTED": "501",
    "E_STOPPED": "503",
    "E_CONN": "503",
    "E_TIMEOUT": "504",
}
#: Nats-Service-Error-Code -> taxonomy code, for agents that send no actorbus body.
STATUS_TO_TAXONOMY: dict[str, str] = {
    "400": "E_VALIDATION",
    "401": "E_AUTH",
    "403": "E_AUTH",
    "404": "E_NOT_FOUND",
    "408": "E_EXPIRED",
    "413": "E_TOO_LARGE",
    "429": "E_RATE_LIMIT",
    "499": "E_CANCELLED",
    "501": "E_UNSUPPORTED",
    "503": "E_STOPPED",
    "504": "E_TIMEOUT",
}


def describe(text: str) -> str:
    """A ``Nats-Service-Error`` value: one line, ASCII ``...`` past 200 characters."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= MAX_ERROR_DESCRIPTION else flat[: MAX_ERROR_DESCRIPTION - 3] + "..."


def error_to(err: ActorBusError) -> dict[str, str]:
    """The two micro-service error headers for an error."""
    return _error_headers(_error_body_of(err))


def _error_body_of(err: ActorBusError) -> dict[str, Any]:
    body = err.to_wire()
    retry = getattr(err, "retry_after", None)
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        body["retry_after"] = retry
    return body


def _error_headers(body: Mapping[str, Any]) -> dict[str, str]:
    code = TAXONOMY_TO_STATUS.get(str(body.get("code", "E_HANDLER")), "500")
    return {
        ERROR_HEADER: describe(str(body.get("message", "")) or "error"),
        ERROR_CODE_HEADER: code,
    }


def error_frame(err: ActorBusError | Any) -> Frame:
    """An error frame: the headers, and the actorbus error body as JSON context."""
    body = _error_body_of(err) if isinstance(err, ActorBusError) else err
    if not isinstance(body, dict):
        body = {"code": "E_HANDLER", "type": "Exception", "message": str(body)}
    return Frame(_dumps(body), _error_headers(body))


def error_from(obj: Any) -> ActorBusError:
    """The typed error for an error frame (:class:`Frame`) or its headers.

    The JSON body an actorbus agent sends gives the exact error; otherwise the
    status code decides (:data:`STATUS_TO_TAXONOMY`; others are remote errors).
    Malformed input gives a ProtocolError (returned, not raised).
    """
    headers = obj.headers if isinstance(obj, Frame) else obj
    if not isinstance(headers, Mapping) or not isinstance(headers.get(ERROR_CODE_HEADER), str):
        return ProtocolError(f"not a Synadia error frame: {obj!r:.200}")
    status = headers[ERROR_CODE_HEADER]
    description = str(headers.get(ERROR_HEADER, ""))
    body = _body_of(obj.data) if isinstance(obj, Frame) else None
    if body is None:
        body = {"code": STATUS_TO_TAXONOMY.get(status, "E_HANDLER"), "message": description}
        body["type"] = f"ServiceError{status}"
    return _error_instance(body)


def _body_of(data: bytes) -> dict[str, Any] | None:
    """The actorbus error body an error frame carries, if it carries one."""
    try:
        body = _json_decode(data) if data else None
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("code"), str) and isinstance(body.get("message"), str):
        return body
    return None


def _error_instance(body: Mapping[str, Any]) -> ActorBusError:
    code, message = str(body["code"]), str(body["message"])
    err = error_for_code(code, message, str(body.get("type") or code))
    retry = body.get("retry_after")
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        err.retry_after = retry  # type: ignore[attr-defined]
    return err


CODEC = register(
    Codec(PROTOCOL, encode, decode, error_to, error_from, carries=ENVELOPE_FIELDS_BUT_HINT)
)
