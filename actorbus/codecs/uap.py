"""The UAP registry's objects: services and routes, as the spec's schema defines them.

Requests are validated against the spec's own JSON schema
(``schemas/uap-schema.json``, definitions ``CreateServiceRequest``,
``UpdateServiceRequest``, ``CreateRouteRequest``, ``UpdateRouteRequest``), so the
registry accepts exactly what the spec says; the first problem found becomes a
:class:`UapValidationError` naming its JSON path (``$.ephemeral_check.renewal_interval``)
and what is wrong with it. A few rules the schema cannot express (durations that
parse, known check types, a port in range) are checked after it, with the same error.

:class:`ServiceResponse` and :class:`RouteResponse` use the schema's field names
exactly. Services keep any extra fields their registrant sent (the schema allows
them); the registry adds two of its own, ``health_output`` (why the status last
changed) and ``agent_info_error`` (why the agent card could not be fetched).

Times are Unix milliseconds; ``index`` is the record's revision in the registry's
key-value bucket. Durations are Go-style strings (``"15s"``, ``"500ms"``, ``"1m30s"``)
as in the schema's defaults; a bare number means seconds.

:func:`ephemeral_service` builds a self-registered service record from Python,
for an ActorSystem that announces its actor types.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError as PydanticValidationError

from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.uap_schema import (
    RequestDefinition as RequestDefinition,
    UapValidationError as UapValidationError,
    json_path as json_path,
    json_type,
    uap_schema as uap_schema,
    validate_request as validate_request,
)

HEALTHY = "healthy"
UNHEALTHY = "unhealthy"
HEALTH_STATUSES = (HEALTHY, UNHEALTHY)
CHECK_METHODS = ("GET", "HEAD", "OPTIONS")
# The registry keeps renewal state this long, so no ephemeral timeout may be longer.
MAX_RENEWAL_TIMEOUT = 24 * 3600.0

# Fields only the registry writes; a client sending them is ignored, not refused.
_REGISTRY_OWNED = ("created_at", "updated_at", "index", "health_output", "agent_info_error")


# -- errors -------------------------------------------------------------------


class UapNotFoundError(ActorBusError, LookupError):
    """No service or route with that id or name."""

    code = "E_UAP_NOT_FOUND"


class UapConflictError(ActorBusError):
    """The request contradicts what is stored: a name or id taken, a record changed
    by someone else in the meantime, a persistent service renewed like an ephemeral one."""

    code = "E_UAP_CONFLICT"


# -- durations ------------------------------------------------------------------

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``"15s"``, ``"1m30s"``, ``"250ms"``) or a
    bare number of seconds; ValueError otherwise."""
    s = text.strip()
    if _NUMBER.fullmatch(s):
        return float(s)
    total, pos = 0.0, 0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"{text!r} is not a duration (write e.g. '15s', '500ms', '1m30s')")
    return total


def format_duration(seconds: float) -> str:
    """The shortest duration string for ``seconds`` that parses back to it."""
    if 0 < seconds < 1 and float(seconds * 1000).is_integer():
        return f"{int(seconds * 1000)}ms"
    return f"{seconds:g}s"


# -- models ---------------------------------------------------------------------


class EphemeralCheck(BaseModel):
    """How a self-registered service proves it is alive: renewals (``PUT .../renewal``)."""

    model_config = ConfigDict(extra="forbid")

    check_type: str = "TTL"
    renewal_delete_timeout: str = "60s"
    renewal_interval: str = "15s"
    renewal_unhealthy_timeout: str = "30s"

    @property
    def interval(self) -> float:
        """Seconds between renewals the service is expected to send."""
        return parse_duration(self.renewal_interval)

    @property
    def unhealthy_after(self) -> float:
        """Seconds without a renewal before the service is marked unhealthy."""
        return parse_duration(self.renewal_unhealthy_timeout)

    @property
    def delete_after(self) -> float:
        """Seconds without a renewal before the service is deleted."""
        return parse_duration(self.renewal_delete_timeout)


class PersistentCheck(BaseModel):
    """How the registry's leader checks a persistent service: an HTTP(S) request."""

    model_config = ConfigDict(extra="forbid")

    check_type: str
    check_interval: str = "15s"
    check_timeout: str = "5s"
    check_unhealthy_timeout: str = "60s"
    check_http_url: str
    check_http_method: str | None = None

    @property
    def interval(self) -> float:
        return parse_duration(self.check_interval)

    @property
    def timeout(self) -> float:
        return parse_duration(self.check_timeout)

    @property
    def unhealthy_after(self) -> float:
        """Seconds without a passing check before the service is marked unhealthy."""
        return parse_duration(self.check_unhealthy_timeout)

    @property
    def method(self) -> str:
        return (self.check_http_method or "GET").upper()


class ServiceResponse(BaseModel):
    """A registered service (schema: ``ServiceResponse``); extra fields are kept."""

    __intent__ = "uap.ServiceResponse"
    model_config = ConfigDict(extra="allow")

    id: str
    created_at: int = 0
    updated_at: int = 0
    index: int = 0
    ephemeral: bool = True
    name: str
    retries: int = 5
    protocol: str = "http"
    host: str | None = None
    port: int | None = None
    path: str | None = None
    connect_timeout: int = 60000
    write_timeout: int = 60000
    read_timeout: int = 60000
    tags: list[str] = []
    health_status: str = HEALTHY
    ephemeral_check: EphemeralCheck | None = None
    persistent_check: PersistentCheck | None = None
    agent_protocol: str | None = None
    agent_info: dict[str, Any] | None = None
    agent_info_url: str | None = None
    health_output: str | None = None
    agent_info_error: str | None = None

    @property
    def kind(self) -> Literal["ephemeral", "persistent"]:
        return "ephemeral" if self.ephemeral else "persistent"

    @property
    def healthy(self) -> bool:
        return self.health_status == HEALTHY

    def to_json(self) -> dict[str, Any]:
        """The response body: schema field names, unset optional fields left out."""
        return self.model_dump(mode="json", exclude_none=True)


class RouteResponse(BaseModel):
    """A gateway route (schema: ``RouteResponse``; no extra fields)."""

    __intent__ = "uap.RouteResponse"
    model_config = ConfigDict(extra="forbid")

    id: str
    created_at: int = 0
    updated_at: int = 0
    index: int = 0
    name: str
    gateway_id: str | None = None
    protocols: list[str] | None = None
    methods: list[str] | None = None
    hosts: list[str] | None = None
    paths: list[str] | None = None
    headers: list[str] | None = None
    https_redirect_status_code: int | None = None
    regex_priority: int | None = None
    strip_path: bool | None = None
    preserve_host: bool | None = None
    request_buffering: bool | None = None
    response_buffering: bool | None = None
    snis: list[str] | None = None
    sources: list[str] | None = None
    destinations: list[str] | None = None
    tags: list[str] | None = None
    agent_protocol: str | None = None
    service: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


# -- services -------------------------------------------------------------------


def new_id() -> str:
    return uuid.uuid4().hex


def _model(cls: type[ServiceResponse], data: dict[str, Any]) -> ServiceResponse:
    try:
        return cls.model_validate(data)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        raise UapValidationError(json_path(first["loc"]), first["msg"]) from None


def _duration(value: str, path: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UapValidationError(path, str(exc)) from None
    if seconds <= 0:
        raise UapValidationError(path, "must be longer than 0s")
    return seconds


def check_service(svc: ServiceResponse) -> ServiceResponse:
    """The rules beside the schema: a name, a port in range, a known health status,
    check settings that fit the kind of service and parse. Returns ``svc``."""
    if not svc.name.strip():
        raise UapValidationError("$.name", "must not be empty")
    if not svc.id or len(svc.id) > 256:
        raise UapValidationError("$.id", "must be 1 to 256 characters")
    if svc.port is not None and not 0 < svc.port < 65536:
        raise UapValidationError("$.port", "must be between 1 and 65535")
    if svc.health_status not in HEALTH_STATUSES:
        raise UapValidationError("$.health_status", f"must be one of {', '.join(HEALTH_STATUSES)}")
    for field in ("retries", "connect_timeout", "write_timeout", "read_timeout"):
        if getattr(svc, field) < 0:
            raise UapValidationError(f"$.{field}", "must not be negative")
    if svc.ephemeral:
        if svc.persistent_check is not None:
            raise UapValidationError(
                "$.persistent_check", "applies to persistent services only (ephemeral is true)"
            )
        _check_ephemeral(svc.ephemeral_check or EphemeralCheck())
    else:
        if svc.ephemeral_check is not None:
            raise UapValidationError(
                "$.ephemeral_check", "applies to ephemeral services only (ephemeral is false)"
            )
        if svc.persistent_check is not None:
            _check_persistent(svc.persistent_check)
    return svc


def _check_ephemeral(check: EphemeralCheck) -> None:
    base = "$.ephemeral_check"
    if check.check_type.upper() != "TTL":
        raise UapValidationError(f"{base}.check_type", "must be TTL for an ephemeral service")
    _duration(check.renewal_interval, f"{base}.renewal_interval")
    unhealthy = _duration(check.renewal_unhealthy_timeout, f"{base}.renewal_unhealthy_timeout")
    delete = _duration(check.renewal_delete_timeout, f"{base}.renewal_delete_timeout")
    if delete < unhealthy:
        raise UapValidationError(
            f"{base}.renewal_delete_timeout", "must not be shorter than renewal_unhealthy_timeout"
        )
    if delete > MAX_RENEWAL_TIMEOUT:
        raise UapValidationError(f"{base}.renewal_delete_timeout", "must be 24h at most")


def _check_persistent(check: PersistentCheck) -> None:
    base = "$.persistent_check"
    if check.check_type.upper() not in ("HTTP", "HTTPS"):
        raise UapValidationError(f"{base}.check_type", "must be HTTP or HTTPS")
    if not check.check_http_url.strip():
        raise UapValidationError(f"{base}.check_http_url", "must not be empty")
    if check.method not in CHECK_METHODS:
        raise UapValidationError(
            f"{base}.check_http_method", f"must be one of {', '.join(CHECK_METHODS)}"
        )
    for field in ("check_interval", "check_timeout", "check_unhealthy_timeout"):
        _duration(getattr(check, field), f"{base}.{field}")


def _client_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in _REGISTRY_OWNED}


def new_service(body: Any, *, now_ms: int) -> ServiceResponse:
    """A service from a ``POST /services`` body (schema ``CreateServiceRequest``).

    An ``id`` in the body is used as the service id (registrants that want a
    stable id, to register again after a crash); otherwise one is generated.
    ``ephemeral`` defaults to true; an ephemeral service gets the default
    ``ephemeral_check`` when it sends none.
    """
    data = _client_fields(validate_request("CreateServiceRequest", body))
    sid = data.pop("id", None)
    if sid is not None and not isinstance(sid, str):
        raise UapValidationError("$.id", f"must be string, not {json_type(sid)}")
    data.setdefault("ephemeral", True)
    if data["ephemeral"] and data.get("ephemeral_check") is None:
        data["ephemeral_check"] = {}
    svc = _model(ServiceResponse, {**data, "id": sid or new_id(), "created_at": now_ms})
    svc.updated_at = now_ms
    return check_service(svc)


def updated_service(existing: ServiceResponse, body: Any, *, now_ms: int) -> ServiceResponse:
    """``existing`` with the fields of a ``PATCH /services/{id}`` body (schema
    ``UpdateServiceRequest``) replaced; fields the body leaves out are kept.

    Raises UapConflictError when the body would turn an ephemeral service into a
    persistent one or back (delete it and register again instead).
    """
    data = _client_fields(validate_request("UpdateServiceRequest", body))
    if "id" in data and data.pop("id") != existing.id:
        raise UapValidationError("$.id", "a service's id cannot change")
    if "ephemeral" in data and data["ephemeral"] != existing.ephemeral:
        raise UapConflictError(
            f"service {existing.id} is {existing.kind}; delete it and register it again "
            "to change its kind"
        )
    merged = existing.model_dump(mode="json", exclude_none=True)
    merged.update(data)
    if "agent_info" in data:
        merged.pop("agent_info_error", None)
    if existing.ephemeral and merged.get("ephemeral_check") is None:
        merged["ephemeral_check"] = {}
    svc = _model(ServiceResponse, merged)
    svc.updated_at = now_ms
    return check_service(svc)


def ephemeral_service(
    name: str,
    *,
    agent_protocol: str | None = "actorbus",
    agent_info: Mapping[str, Any] | None = None,
    tags: Sequence[str] = (),
    host: str | None = None,
    port: int | None = None,
    protocol: str = "nats",
    path: str | None = None,
    service_id: str | None = None,
    renewal_interval: float = 15.0,
    unhealthy_after: float = 30.0,
    delete_after: float = 60.0,
    extra: Mapping[str, Any] | None = None,
) -> ServiceResponse:
    """A self-registered (ephemeral) service record, built in Python.

    The registrant puts it with ``RegistryStore.put_service`` and then calls
    ``RegistryStore.renew(service.id)`` every ``renewal_interval`` seconds; the
    registry's leader marks it unhealthy after ``unhealthy_after`` seconds without
    a renewal and deletes it after ``delete_after``. For an actor type on the bus,
    ``protocol`` is ``"nats"`` and ``path`` its subject or address; ``agent_info``
    describes it (see :func:`actor_agent_info`). Pass a stable ``service_id``
    (say ``f"{system_id}-{type_name}"``) so registering again replaces the record.
    ``extra`` adds fields of your own (the schema allows them).
    """
    svc = ServiceResponse.model_validate(
        {
            **(extra or {}),
            "id": service_id or new_id(),
            "name": name,
            "ephemeral": True,
            "agent_protocol": agent_protocol,
            "agent_info": dict(agent_info) if agent_info is not None else None,
            "tags": list(tags),
            "host": host,
            "port": port,
            "protocol": protocol,
            "path": path,
            "ephemeral_check": EphemeralCheck(
                renewal_interval=format_duration(renewal_interval),
                renewal_unhealthy_timeout=format_duration(unhealthy_after),
                renewal_delete_timeout=format_duration(delete_after),
            ),
        }
    )
    return check_service(svc)


def skill(
    skill_id: str,
    name: str,
    description: str = "",
    *,
    tags: Sequence[str] = (),
    examples: Sequence[str] = (),
) -> dict[str, Any]:
    """One skill, shaped like an A2A ``AgentSkill`` (id, name, description, tags)."""
    out: dict[str, Any] = {"id": skill_id, "name": name, "description": description}
    out["tags"] = list(tags)
    if examples:
        out["examples"] = list(examples)
    return out


def actor_agent_info(
    address: str,
    *,
    description: str = "",
    skills: Sequence[Mapping[str, Any]] = (),
    intents: Mapping[str, Mapping[str, Any] | None] | None = None,
    replies: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """``agent_info`` for an actor type reached over the bus (``agent_protocol``
    ``"actorbus"``): its address, what it does, the JSON schema of each message it
    takes, by intent (None for untyped handlers), and of each reply a handler
    declares as a model (so an edge can promise its shape: MCP's outputSchema)."""
    info: dict[str, Any] = {"address": address, "description": description}
    info["skills"] = [dict(s) for s in skills]
    info["intents"] = {k: (dict(v) if v is not None else None) for k, v in (intents or {}).items()}
    if replies:
        info["replies"] = {k: dict(v) for k, v in replies.items()}
    return {"actorbus": info}


# -- routes ---------------------------------------------------------------------


def _route(data: dict[str, Any]) -> RouteResponse:
    try:
        route = RouteResponse.model_validate(data)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        raise UapValidationError(json_path(first["loc"]), first["msg"]) from None
    if not route.name.strip():
        raise UapValidationError("$.name", "must not be empty")
    if route.service is not None and not route.service.strip():
        raise UapValidationError("$.service", "must not be empty")
    return route


def new_route(body: Any, *, now_ms: int) -> RouteResponse:
    """A route from a ``POST /routes`` body (schema ``CreateRouteRequest``)."""
    data = validate_request("CreateRouteRequest", body)
    return _route({**data, "id": new_id(), "created_at": now_ms, "updated_at": now_ms})


def updated_route(existing: RouteResponse, body: Any, *, now_ms: int) -> RouteResponse:
    """``existing`` with the fields of a ``PATCH /routes/{name}`` body (schema
    ``UpdateRouteRequest``) replaced. A different ``name`` renames the route."""
    data = validate_request("UpdateRouteRequest", body)
    merged = existing.model_dump(mode="json", exclude_none=True)
    merged.update(data)
    merged["updated_at"] = now_ms
    return _route(merged)
