"""The registry's HTTP API: every endpoint, its errors, blocking queries, OpenAPI."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from _registry import running_registry

from actorbus.bus.server import EmbeddedServer
from actorbus.services.registry import RegistryService
from actorbus.services.registry.http import INDEX_HEADER, RegistryHttp

SERVICE: dict[str, Any] = {
    "name": "search",
    "host": "127.0.0.1",
    "port": 8080,
    "protocol": "http",
    "tags": ["eu"],
    "agent_protocol": "a2a",
    "agent_info": {"a2a_agent_card": {"name": "search"}},
}
PERSISTENT: dict[str, Any] = {**SERVICE, "name": "billing", "ephemeral": False, "tags": ["us"]}
_JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def reg(nats_server: EmbeddedServer, ns: str) -> AsyncIterator[RegistryService]:
    async with running_registry(nats_server.url, ns) as r:
        yield r


@pytest.fixture
async def http(reg: RegistryService) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=reg.http_url) as s:
        yield s


async def call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None, **kw: Any
) -> tuple[int, Any, aiohttp.ClientResponse]:
    if body is not None:
        kw["json"] = body
    async with http.request(method, path, **kw) as resp:
        text = await resp.text()
        data = None
        if text:
            assert resp.content_type == "application/json", text
            data = await resp.json()
        return resp.status, data, resp


def assert_error(status: int, data: Any, want: int, code: str, field: str | None = None) -> None:
    assert status == want, data
    assert data["error"] == code, data
    assert data["message"], data
    if field is not None:
        assert data["field"] == field, data


# -- services ------------------------------------------------------------------


async def test_register_and_read_back(http: aiohttp.ClientSession) -> None:
    status, svc, _ = await call(http, "POST", "/services", SERVICE)
    assert status == 201
    assert svc["name"] == "search"
    assert svc["ephemeral"] is True
    assert svc["index"] >= 1
    assert svc["health_status"] == "healthy"
    assert svc["id"]
    assert svc["ephemeral_check"]["renewal_interval"] == "15s"
    status, found, resp = await call(http, "GET", "/services")
    assert status == 200
    assert found == [svc]
    assert int(resp.headers[INDEX_HEADER]) == svc["index"]
    status, named, _ = await call(http, "GET", "/services/search")
    assert status == 200
    assert named == [svc]
    status, by_id, _ = await call(http, "GET", f"/services/{svc['id']}")
    assert status == 200
    assert by_id == [svc]


async def test_a_body_without_content_type_is_json(http: aiohttp.ClientSession) -> None:
    status, svc, _ = await call(
        http,
        "POST",
        "/services",
        data=json.dumps(SERVICE).encode(),
        skip_auto_headers=["Content-Type"],
    )
    assert status == 201
    assert svc["name"] == "search"


async def test_register_errors(http: aiohttp.ClientSession) -> None:
    status, data, _ = await call(http, "POST", "/services", {**SERVICE, "port": "x"})
    assert_error(status, data, 400, "invalid_request", "$.port")
    bad = {k: v for k, v in SERVICE.items() if k != "name"}
    status, data, _ = await call(http, "POST", "/services", bad)
    assert_error(status, data, 400, "invalid_request", "$.name")
    bad = {**SERVICE, "ephemeral_check": {"check_type": "TTL", "renewal_interval": "often"}}
    status, data, _ = await call(http, "POST", "/services", bad)
    assert_error(status, data, 400, "invalid_request", "$.ephemeral_check.renewal_interval")
    status, data, _ = await call(http, "POST", "/services", [1, 2])
    assert_error(status, data, 400, "invalid_request", "$")
    status, data, _ = await call(http, "POST", "/services", data=b"{nope", headers=_JSON)
    assert_error(status, data, 400, "invalid_request", "$")
    assert "not valid JSON" in data["message"]
    status, data, _ = await call(http, "POST", "/services", data=b"", headers=_JSON)
    assert_error(status, data, 400, "invalid_request", "$")
    status, data, _ = await call(
        http, "POST", "/services", data=b"name=x", headers={"Content-Type": "text/plain"}
    )
    assert_error(status, data, 415, "unsupported_media_type")
    status, data, _ = await call(http, "POST", "/services", data=b"\xff\xfe", headers=_JSON)
    assert_error(status, data, 400, "invalid_request", "$")
    status, _, _ = await call(http, "POST", "/services", {**SERVICE, "id": "fixed"})
    assert status == 201
    status, data, _ = await call(http, "POST", "/services", {**SERVICE, "id": "fixed"})
    assert_error(status, data, 409, "conflict")
    status, data, _ = await call(http, "POST", "/services", data=b"x" * 2_000_000, headers=_JSON)
    assert_error(status, data, 413, "too_large")


async def test_update(http: aiohttp.ClientSession) -> None:
    _, svc, _ = await call(http, "POST", "/services", SERVICE)
    path = f"/services/{svc['id']}"
    status, new, _ = await call(http, "PATCH", path, {**SERVICE, "port": 9090, "tags": ["x"]})
    assert status == 200
    assert new["port"] == 9090
    assert new["tags"] == ["x"]
    assert new["index"] > svc["index"]
    assert new["created_at"] == svc["created_at"]
    assert new["updated_at"] >= svc["updated_at"]
    assert new["agent_info"] == SERVICE["agent_info"]  # left out of the body: kept
    status, data, _ = await call(http, "PATCH", "/services/nope", SERVICE)
    assert_error(status, data, 404, "not_found")
    status, data, _ = await call(http, "PATCH", path, {"name": "search", "port": 1})
    assert_error(status, data, 400, "invalid_request", "$.host")
    status, data, _ = await call(http, "PATCH", path, {**SERVICE, "ephemeral": False})
    assert_error(status, data, 409, "conflict")
    status, data, _ = await call(http, "PATCH", path, data=b"[", headers=_JSON)
    assert_error(status, data, 400, "invalid_request", "$")


async def test_renew_and_delete(http: aiohttp.ClientSession) -> None:
    _, svc, _ = await call(http, "POST", "/services", SERVICE)
    _, per, _ = await call(http, "POST", "/services", PERSISTENT)
    status, body, _ = await call(http, "PUT", f"/services/{svc['id']}/renewal")
    assert status == 204
    assert body is None
    status, data, _ = await call(http, "PUT", "/services/nope/renewal")
    assert_error(status, data, 404, "not_found")
    status, data, _ = await call(http, "PUT", f"/services/{per['id']}/renewal")
    assert_error(status, data, 409, "conflict")
    status, body, _ = await call(http, "DELETE", f"/services/{svc['id']}")
    assert status == 204
    assert body is None
    status, data, _ = await call(http, "DELETE", f"/services/{svc['id']}")
    assert_error(status, data, 404, "not_found")
    status, data, _ = await call(http, "GET", "/services/search")
    assert_error(status, data, 404, "not_found")
    _, left, _ = await call(http, "GET", "/services")
    assert [s["id"] for s in left] == [per["id"]]


async def test_list_filters_and_instances(http: aiohttp.ClientSession) -> None:
    _, a, _ = await call(http, "POST", "/services", SERVICE)
    _, b, _ = await call(http, "POST", "/services", {**SERVICE, "port": 8081, "tags": ["us"]})
    _, c, _ = await call(http, "POST", "/services", {**PERSISTENT, "agent_protocol": "acp"})
    _, named, _ = await call(http, "GET", "/services/search")
    assert [s["id"] for s in named] == [a["id"], b["id"]]
    _, eu, _ = await call(http, "GET", "/services?tag=eu")
    assert [s["id"] for s in eu] == [a["id"]]
    _, acp, _ = await call(http, "GET", "/services?agent_protocol=acp")
    assert [s["id"] for s in acp] == [c["id"]]
    _, sick, _ = await call(http, "GET", "/services?health_status=unhealthy")
    assert sick == []


async def test_blocking_query_wakes_on_a_change(
    http: aiohttp.ClientSession, reg: RegistryService
) -> None:
    _, _, resp = await call(http, "GET", "/services")
    index = int(resp.headers[INDEX_HEADER])
    assert index == 0  # nothing yet: index=0 blocks until something arrives
    t = time.monotonic()
    query = asyncio.create_task(call(http, "GET", f"/services?index={index}&wait=10s"))
    await asyncio.sleep(0.2)
    assert not query.done()
    _, svc, _ = await call(http, "POST", "/services", SERVICE)
    status, found, resp = await asyncio.wait_for(query, 5.0)
    assert time.monotonic() - t < 2.0  # well before the 10 s wait
    assert status == 200
    assert [s["id"] for s in found] == [svc["id"]]
    assert int(resp.headers[INDEX_HEADER]) == svc["index"] > index


async def test_blocking_query_times_out_when_nothing_changes(
    http: aiohttp.ClientSession,
) -> None:
    _, svc, _ = await call(http, "POST", "/services", SERVICE)
    await call(http, "POST", "/routes", {"name": "r", "service": "search"})  # not a service
    t = time.monotonic()
    status, found, resp = await call(http, "GET", f"/services?index={svc['index']}&wait=400ms")
    assert 0.35 <= time.monotonic() - t < 3.0
    assert status == 200
    assert found == [svc]
    assert int(resp.headers[INDEX_HEADER]) == svc["index"]


async def test_blocking_query_parameters(http: aiohttp.ClientSession) -> None:
    status, data, _ = await call(http, "GET", "/services?index=abc")
    assert_error(status, data, 400, "invalid_request", "index")
    status, data, _ = await call(http, "GET", "/services?index=-1")
    assert_error(status, data, 400, "invalid_request", "index")
    status, data, _ = await call(http, "GET", "/services?index=1&wait=forever")
    assert_error(status, data, 400, "invalid_request", "wait")
    # An index beyond anything the registry ever had answers at once.
    t = time.monotonic()
    status, _, _ = await call(http, "GET", "/services?index=999999&wait=10s")
    assert status == 200
    assert time.monotonic() - t < 2.0


# -- routes ----------------------------------------------------------------------

ROUTE: dict[str, Any] = {"name": "chat route", "service": "search", "paths": ["/chat"]}


async def test_routes_crud(http: aiohttp.ClientSession) -> None:
    status, route, _ = await call(http, "POST", "/routes", ROUTE)
    assert status == 201
    assert route["name"] == "chat route"
    assert route["id"]
    assert route["index"]
    path = "/routes/" + quote("chat route")
    status, got, resp = await call(http, "GET", path)
    assert status == 200
    assert got == route
    assert int(resp.headers[INDEX_HEADER]) == route["index"]
    status, new, _ = await call(http, "PATCH", path, {**ROUTE, "strip_path": True})
    assert status == 200
    assert new["strip_path"] is True
    assert new["paths"] == ["/chat"]
    assert new["index"] > route["index"]
    assert new["id"] == route["id"]
    status, listed, _ = await call(http, "GET", "/routes")
    assert status == 200
    assert listed == [new]
    status, _, _ = await call(http, "DELETE", path)
    assert status == 204
    status, data, _ = await call(http, "GET", path)
    assert_error(status, data, 404, "not_found")


async def test_route_rename(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", "/routes", ROUTE)
    await call(http, "POST", "/routes", {**ROUTE, "name": "taken"})
    path = "/routes/" + quote("chat route")
    status, data, _ = await call(http, "PATCH", path, {**ROUTE, "name": "taken"})
    assert_error(status, data, 409, "conflict")
    status, moved, _ = await call(http, "PATCH", path, {**ROUTE, "name": "chat"})
    assert status == 200
    assert moved["name"] == "chat"
    _, listed, _ = await call(http, "GET", "/routes")
    assert sorted(r["name"] for r in listed) == ["chat", "taken"]


async def test_route_errors(http: aiohttp.ClientSession) -> None:
    status, data, _ = await call(http, "POST", "/routes", {"name": "x"})
    assert_error(status, data, 400, "invalid_request", "$.service")
    status, data, _ = await call(http, "POST", "/routes", {**ROUTE, "weight": 3})
    assert_error(status, data, 400, "invalid_request", "$.weight")
    status, data, _ = await call(http, "POST", "/routes", {**ROUTE, "paths": "/chat"})
    assert_error(status, data, 400, "invalid_request", "$.paths")
    await call(http, "POST", "/routes", ROUTE)
    status, data, _ = await call(http, "POST", "/routes", ROUTE)
    assert_error(status, data, 409, "conflict")
    status, data, _ = await call(http, "PATCH", "/routes/nope", ROUTE)
    assert_error(status, data, 404, "not_found")
    status, data, _ = await call(http, "PATCH", "/routes/" + quote("chat route"), {"x": 1})
    assert_error(status, data, 400, "invalid_request")
    status, data, _ = await call(http, "DELETE", "/routes/nope")
    assert_error(status, data, 404, "not_found")
    status, data, _ = await call(
        http, "POST", "/routes", data=b"{}", headers={"Content-Type": "application/xml"}
    )
    assert_error(status, data, 415, "unsupported_media_type")


async def test_routes_blocking_query(http: aiohttp.ClientSession) -> None:
    _, _, resp = await call(http, "GET", "/routes")
    index = int(resp.headers[INDEX_HEADER])
    query = asyncio.create_task(call(http, "GET", f"/routes?index={index}&wait=10s"))
    await asyncio.sleep(0.1)
    await call(http, "POST", "/services", SERVICE)  # a service change does not wake it
    await asyncio.sleep(0.2)
    assert not query.done()
    t = time.monotonic()
    _, route, _ = await call(http, "POST", "/routes", ROUTE)
    _status, found, resp = await asyncio.wait_for(query, 5.0)
    assert time.monotonic() - t < 2.0
    assert found == [route]
    assert int(resp.headers[INDEX_HEADER]) == route["index"]


# -- the rest ----------------------------------------------------------------------


async def test_unknown_paths_and_methods_are_json(http: aiohttp.ClientSession) -> None:
    status, data, _ = await call(http, "GET", "/nothing/here")
    assert_error(status, data, 404, "not_found")
    status, data, resp = await call(http, "DELETE", "/services")
    assert_error(status, data, 405, "method_not_allowed")
    assert "GET" in resp.headers["Allow"]
    assert "POST" in resp.headers["Allow"]
    status, data, _ = await call(http, "POST", "/services/x/renewal")
    assert_error(status, data, 405, "method_not_allowed")


async def test_openapi_lists_every_endpoint(
    http: aiohttp.ClientSession, reg: RegistryService
) -> None:
    status, doc, _ = await call(http, "GET", "/openapi.json")
    assert status == 200
    assert doc["openapi"].startswith("3.1")
    documented = {
        (re.sub(r"\{[^}]+\}", "{}", path), method.upper())
        for path, item in doc["paths"].items()
        for method in item
        if method != "parameters"
    }
    app = RegistryHttp(reg.registry, reg.status).app()
    served = {
        (re.sub(r"\{[^}]+\}", "{}", route.resource.canonical), route.method)
        for route in app.router.routes()
        if route.resource is not None
    }
    assert served == documented
    schemas = doc["components"]["schemas"]
    for name in ("CreateServiceRequest", "ServiceResponse", "RouteResponse", "Error"):
        assert name in schemas

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [v for k, v in node.items() if k == "$ref"] + [
                r for v in node.values() for r in refs(v)
            ]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    for ref in refs(doc):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


async def test_status(http: aiohttp.ClientSession, reg: RegistryService) -> None:
    await call(http, "POST", "/services", SERVICE)
    status, data, _ = await call(http, "GET", "/status")
    assert status == 200
    assert data["instance"] == reg.instance_id
    assert data["leader"] is True
    assert data["leader_instance"] == reg.instance_id
    assert data["services"] == 1
    assert data["routes"] == 0
    assert data["index"] >= 1
