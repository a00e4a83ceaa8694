"""The Synadia agent as a NATS micro service: protocol constants, subjects, payload
sizes, the service info and its discovery, and heartbeats."""

from __future__ import annotations

import base64
import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec

from actorbus.codecs.errors import (
    DecodeError,
    EncodeError,
    InvalidAddressError,
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


_json_encode = msgspec.json.Encoder().encode
json_decode = msgspec.json.Decoder().decode


def dumps(obj: Any) -> bytes:
    try:
        return _json_encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot be written as JSON: {exc}") from exc


def loads(data: bytes | str, what: str) -> Any:
    try:
        return json_decode(data)
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
    data = loads(obj, "heartbeat") if isinstance(obj, bytes | str) else obj
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
