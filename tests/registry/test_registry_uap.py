"""UAP records: validation against the spec's schema, typed errors, record builders."""

from __future__ import annotations

from typing import Any

import pytest

from actorbus.codecs.errors import ValidationFailedError
from actorbus.codecs.uap import (
    RouteResponse,
    ServiceResponse,
    UapConflictError,
    UapValidationError,
    actor_agent_info,
    ephemeral_service,
    format_duration,
    new_route,
    new_service,
    parse_duration,
    skill,
    uap_schema,
    updated_route,
    updated_service,
)

BASE: dict[str, Any] = {"name": "search", "host": "127.0.0.1", "port": 8080, "protocol": "http"}


def invalid(body: Any) -> UapValidationError:
    with pytest.raises(UapValidationError) as info:
        new_service(body, now_ms=1)
    return info.value


def test_schema_ships_with_the_package() -> None:
    defs = uap_schema()["definitions"]
    for name in ("CreateServiceRequest", "ServiceResponse", "RouteResponse", "EphemeralCheck"):
        assert name in defs


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15), ("500ms", 0.5), ("1m30s", 90), ("1h", 3600), ("2.5s", 2.5), ("10", 10)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "15 s", "15x", "1m x", "-1s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_a_minimal_registration_gets_the_spec_defaults() -> None:
    svc = new_service(BASE, now_ms=1234)
    assert svc.ephemeral
    assert svc.kind == "ephemeral"
    assert svc.healthy
    assert svc.created_at == svc.updated_at == 1234
    assert svc.retries == 5
    assert svc.connect_timeout == 60000
    assert svc.ephemeral_check is not None
    check = svc.ephemeral_check
    assert (check.interval, check.unhealthy_after, check.delete_after) == (15, 30, 60)
    assert len(svc.id) == 32
    body = svc.to_json()
    assert "agent_info" not in body
    assert body["name"] == "search"


def test_extra_fields_are_kept_and_registry_fields_ignored() -> None:
    svc = new_service({**BASE, "id": "mine", "owner": "team-a", "index": 99}, now_ms=5)
    assert svc.id == "mine"
    assert svc.to_json()["owner"] == "team-a"
    assert svc.index == 0


@pytest.mark.parametrize(
    ("body", "path", "reason"),
    [
        ([], "$", "must be object, not array"),
        ({**BASE, "port": "80"}, "$.port", "must be integer, not string"),
        ({k: v for k, v in BASE.items() if k != "host"}, "$.host", "is required"),
        ({**BASE, "tags": ["a", 1]}, "$.tags[1]", "must be string"),
        ({**BASE, "ephemeral_check": {"check_type": "TTL", "x": 1}}, "$.ephemeral_check.x", ""),
        ({**BASE, "ephemeral_check": {}}, "$.ephemeral_check.check_type", "is required"),
        (
            {**BASE, "ephemeral_check": {"check_type": "TTL", "renewal_interval": "soon"}},
            "$.ephemeral_check.renewal_interval",
            "not a duration",
        ),
        (
            {**BASE, "ephemeral_check": {"check_type": "HTTP"}},
            "$.ephemeral_check.check_type",
            "TTL",
        ),
        (
            {
                **BASE,
                "ephemeral_check": {
                    "check_type": "TTL",
                    "renewal_unhealthy_timeout": "10s",
                    "renewal_delete_timeout": "5s",
                },
            },
            "$.ephemeral_check.renewal_delete_timeout",
            "shorter",
        ),
        (
            {**BASE, "ephemeral_check": {"check_type": "TTL", "renewal_delete_timeout": "25h"}},
            "$.ephemeral_check.renewal_delete_timeout",
            "24h at most",
        ),
        ({**BASE, "port": 70000}, "$.port", "between 1 and 65535"),
        ({**BASE, "name": " "}, "$.name", "empty"),
        ({**BASE, "health_status": "meh"}, "$.health_status", "healthy, unhealthy"),
        ({**BASE, "id": 7}, "$.id", "must be string"),
        (
            {**BASE, "persistent_check": {"check_type": "HTTP", "check_http_url": "/h"}},
            "$.persistent_check",
            "persistent services only",
        ),
        (
            {
                **BASE,
                "ephemeral": False,
                "persistent_check": {"check_type": "TCP", "check_http_url": "/h"},
            },
            "$.persistent_check.check_type",
            "HTTP or HTTPS",
        ),
        (
            {
                **BASE,
                "ephemeral": False,
                "persistent_check": {
                    "check_type": "HTTP",
                    "check_http_url": "/h",
                    "check_http_method": "POST",
                },
            },
            "$.persistent_check.check_http_method",
            "GET, HEAD, OPTIONS",
        ),
    ],
)
def test_invalid_registrations_name_the_field(body: Any, path: str, reason: str) -> None:
    err = invalid(body)
    assert err.path == path
    assert reason in err.reason
    assert str(err).startswith(path)
    assert isinstance(err, ValidationFailedError)
    assert err.code == "E_VALIDATION"


def test_update_keeps_what_the_body_leaves_out() -> None:
    svc = new_service({**BASE, "tags": ["a"], "path": "/v1"}, now_ms=1)
    svc.index = 3
    new = updated_service(svc, {**BASE, "port": 9090}, now_ms=2)
    assert new.port == 9090
    assert new.tags == ["a"]
    assert new.path == "/v1"
    assert new.id == svc.id
    assert new.created_at == 1
    assert new.updated_at == 2
    with pytest.raises(UapConflictError, match="ephemeral"):
        updated_service(svc, {**BASE, "ephemeral": False}, now_ms=3)
    with pytest.raises(UapValidationError, match=r"\$\.id"):
        updated_service(svc, {**BASE, "id": "other"}, now_ms=3)
    with pytest.raises(UapValidationError, match=r"\$\.protocol: is required"):
        updated_service(svc, {"name": "x", "host": "h", "port": 1}, now_ms=3)


def test_routes() -> None:
    route = new_route({"name": "chat", "service": "llm", "paths": ["/chat"]}, now_ms=1)
    assert isinstance(route, RouteResponse)
    assert route.to_json()["paths"] == ["/chat"]
    with pytest.raises(UapValidationError) as info:
        new_route({"name": "chat", "service": "llm", "colour": "red"}, now_ms=1)
    assert info.value.path == "$.colour"
    with pytest.raises(UapValidationError, match=r"\$\.service: is required"):
        new_route({"name": "chat"}, now_ms=1)
    with pytest.raises(UapValidationError, match=r"\$\.strip_path: must be boolean"):
        new_route({"name": "chat", "service": "s", "strip_path": "yes"}, now_ms=1)
    moved = updated_route(route, {"name": "chat2", "service": "llm"}, now_ms=2)
    assert moved.name == "chat2"
    assert moved.paths == ["/chat"]
    assert moved.id == route.id


def test_ephemeral_service_from_python() -> None:
    info = actor_agent_info(
        "echo",
        description="echoes",
        skills=[skill("echo", "Echo", "says it back", tags=["text"])],
        intents={"Question": {"type": "object"}, "bytes": None},
    )
    svc = ephemeral_service(
        "echo",
        agent_info=info,
        tags=["actor"],
        path="ab.any.echo",
        service_id="sys1-echo",
        renewal_interval=0.5,
        unhealthy_after=1,
        delete_after=2.5,
    )
    assert isinstance(svc, ServiceResponse)
    assert svc.id == "sys1-echo"
    assert svc.ephemeral
    assert svc.protocol == "nats"
    assert svc.ephemeral_check is not None
    assert svc.ephemeral_check.renewal_interval == "500ms"
    assert svc.ephemeral_check.delete_after == 2.5
    assert svc.agent_info == {
        "actorbus": {
            "address": "echo",
            "description": "echoes",
            "skills": [
                {"id": "echo", "name": "Echo", "description": "says it back", "tags": ["text"]}
            ],
            "intents": {"Question": {"type": "object"}, "bytes": None},
        }
    }
    with pytest.raises(UapValidationError, match="renewal_delete_timeout"):
        ephemeral_service("x", unhealthy_after=10, delete_after=5)
