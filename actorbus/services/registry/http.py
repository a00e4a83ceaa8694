"""The registry's HTTP API (spec 5.2), on aiohttp.

Bodies are JSON; a request without a Content-Type is read as JSON too (some
clients send none), any other media type is a 415. Every error is a JSON body
``{"error": <code>, "message": <text>, "field": <JSON path, for 400s>}`` with the
matching status (400 invalid, 404 unknown, 405 wrong method, 409 conflict, 413
too large, 415 not JSON), never a traceback.

Blocking queries (``GET /services`` and ``GET /routes`` with ``index``): the
response comes when the index moves past ``index`` or after ``wait`` (default
5 min, at most 10 min; ``"10s"``, ``"500ms"`` or seconds). The body is the
schema's plain array (``GetAllServiceSuccessResponse``), so the index travels in
the ``X-Registry-Index`` header (as Consul's ``X-Consul-Index``): pass it back
as ``index`` to wait for the next change. ``index=0`` blocks too while the
registry is empty (0 means "seen nothing"). Each record also carries its own
``index``, the revision it was last written at.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from actorbus.codecs.errors import ActorBusError, AuthError
from actorbus.codecs.uap import (
    UapConflictError,
    UapNotFoundError,
    UapValidationError,
    parse_duration,
)
from actorbus.security.tokens import TokenVerifier
from actorbus.services.registry.core import Registry
from actorbus.services.registry.openapi import openapi_document
from actorbus.services.registry.store import Kind

log = logging.getLogger("actorbus.registry.http")
WRITE_CAPABILITY = "registry:write"

INDEX_HEADER = "X-Registry-Index"
JSON_TYPES = ("application/json",)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
StatusFn = Callable[[], Awaitable[dict[str, Any]]]


def error_response(
    status: int, code: str, message: str, field: str | None = None, **headers: str
) -> web.Response:
    body: dict[str, Any] = {"error": code, "message": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status, headers=headers or None)


_HTTP_CODES = {
    400: "invalid_request",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
}


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Typed errors and aiohttp's own HTTP errors as JSON; anything else a 500
    that names no internals (the traceback goes to the log)."""
    try:
        return await handler(request)
    except UapValidationError as exc:
        return error_response(400, "invalid_request", str(exc), exc.path)
    except UapNotFoundError as exc:
        return error_response(404, "not_found", str(exc))
    except UapConflictError as exc:
        return error_response(409, "conflict", str(exc))
    except AuthError as exc:
        return error_response(401, "unauthorized", str(exc), **{"WWW-Authenticate": "Bearer"})
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        extra = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        code = _HTTP_CODES.get(exc.status, "error")
        where = f"{request.method} {request.path}"
        if exc.status == 404:
            message = f"no such endpoint: {where} (the API is described at /openapi.json)"
        elif exc.status == 405:
            message = f"{where} is not allowed (allowed: {extra.get('Allow', 'none')})"
        elif exc.text and not exc.text.startswith(str(exc.status)):
            message = exc.text
        else:
            message = exc.reason
        return error_response(exc.status, code, message, **extra)
    except ActorBusError as exc:
        log.warning("%s %s: %s", request.method, request.path, exc)
        return error_response(503, "unavailable", str(exc))
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal", "internal error; the registry's log has details")


async def json_body(request: web.Request) -> Any:
    """The request body as JSON: 415 for a non-JSON media type, 400 for no or bad JSON."""
    if request.headers.get("Content-Type"):
        mime = request.content_type
        if mime not in JSON_TYPES and not mime.endswith("+json"):
            raise web.HTTPUnsupportedMediaType(
                text=f"the body must be JSON: send Content-Type application/json (or none), "
                f"not {mime}"
            )
    raw = await request.read()
    if not raw.strip():
        raise UapValidationError("$", "a JSON body is required")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise UapValidationError("$", "the body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UapValidationError(
            "$", f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None


def blocking_params(request: web.Request, default_wait: float) -> tuple[int | None, float]:
    """``index`` (None: answer at once) and ``wait`` seconds from the query."""
    q = request.query
    index: int | None = None
    if "index" in q:
        try:
            index = int(q["index"])
        except ValueError:
            raise UapValidationError("index", "must be a whole number") from None
        if index < 0:
            raise UapValidationError("index", "must not be negative")
    wait = default_wait
    if "wait" in q:
        try:
            wait = parse_duration(q["wait"])
        except ValueError as exc:
            raise UapValidationError("wait", str(exc)) from None
    return index, wait


def _json(data: Any, status: int = 200, index: int | None = None) -> web.Response:
    headers = {INDEX_HEADER: str(index)} if index is not None else None
    return web.json_response(data, status=status, headers=headers)


def _json_body(body: bytes, index: int) -> web.Response:
    return web.Response(
        body=body, content_type="application/json", headers={INDEX_HEADER: str(index)}
    )


class BodyCache:
    """Serialized read answers, valid for one index: discovery reads far outnumber
    changes, and every blocked client asks for the same list when one happens, so
    each answer is encoded once per index instead of once per request."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.index = -1
        self.bodies: dict[str, bytes] = {}

    def get(self, index: int, key: str, build: Callable[[], Any]) -> bytes:
        if index != self.index:
            self.bodies.clear()
            self.index = index
        body = self.bodies.get(key)
        if body is None:
            body = json.dumps(build(), ensure_ascii=False).encode()
            if len(self.bodies) < self.size:
                self.bodies[key] = body
        return body


class RegistryHttp:
    """The routes of the API, bound to one :class:`Registry`."""

    def __init__(
        self,
        registry: Registry,
        status: StatusFn,
        *,
        default_wait: float = 300.0,
        writers: TokenVerifier | None = None,
    ) -> None:
        self.registry = registry
        self.writers = writers  # None: anyone may write
        self.status_fn = status
        self.default_wait = default_wait
        self._openapi: str | None = None
        self._services_cache = BodyCache()
        self._routes_cache = BodyCache()

    @web.middleware
    async def write_guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A change needs a bearer token for the audience ``registry`` with the
        capability ``registry:write`` (from a gateway's ``POST /auth/token``)."""
        if self.writers is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError("changing the registry needs a bearer token (registry:write)")
            self.writers.check(token.strip(), "registry", "write", [WRITE_CAPABILITY])
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[json_errors, self.write_guard])
        app.add_routes(
            [
                web.post("/services", self.create_service),
                web.get("/services", self.list_services, allow_head=False),
                web.get("/services/{name}", self.get_services, allow_head=False),
                web.patch("/services/{id}", self.update_service),
                web.delete("/services/{id}", self.delete_service),
                web.put("/services/{id}/renewal", self.renew_service),
                web.post("/routes", self.create_route),
                web.get("/routes", self.list_routes, allow_head=False),
                web.get("/routes/{name}", self.get_route, allow_head=False),
                web.patch("/routes/{name}", self.update_route),
                web.delete("/routes/{name}", self.delete_route),
                web.get("/openapi.json", self.openapi, allow_head=False),
                web.get("/status", self.status, allow_head=False),
            ]
        )
        return app

    async def _wait(self, request: web.Request, kind: Kind) -> int:
        index, wait = blocking_params(request, self.default_wait)
        store = self.registry.store
        if index is None:
            return store.index_of(kind)
        return await self.registry.wait(index, wait, kind)

    # -- services ------------------------------------------------------------------
    async def create_service(self, request: web.Request) -> web.Response:
        svc = await self.registry.register(await json_body(request))
        return _json(svc.to_json(), 201)

    async def list_services(self, request: web.Request) -> web.Response:
        await self._wait(request, "services")
        q = request.query
        tags = sorted(q.getall("tag", []))
        protocol, health = q.get("agent_protocol"), q.get("health_status")

        def build() -> list[dict[str, Any]]:
            found = self.registry.services(tags=tags, agent_protocol=protocol, health_status=health)
            return [s.to_json() for s in found]

        index = self.registry.store.services_index
        key = json.dumps(["list", tags, protocol, health])
        return _json_body(self._services_cache.get(index, key, build), index)

    async def get_services(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        found = self.registry.services_named(name)  # raises UapNotFoundError first
        index = self.registry.store.services_index
        body = self._services_cache.get(index, "name:" + name, lambda: [s.to_json() for s in found])
        return _json_body(body, index)

    async def update_service(self, request: web.Request) -> web.Response:
        svc = await self.registry.update(request.match_info["id"], await json_body(request))
        return _json(svc.to_json())

    async def renew_service(self, request: web.Request) -> web.Response:
        await self.registry.renew(request.match_info["id"])
        return web.Response(status=204)

    async def delete_service(self, request: web.Request) -> web.Response:
        await self.registry.deregister(request.match_info["id"])
        return web.Response(status=204)

    # -- routes --------------------------------------------------------------------
    async def create_route(self, request: web.Request) -> web.Response:
        route = await self.registry.create_route(await json_body(request))
        return _json(route.to_json(), 201)

    async def list_routes(self, request: web.Request) -> web.Response:
        await self._wait(request, "routes")
        service = request.query.get("service")
        index = self.registry.store.routes_index
        body = self._routes_cache.get(
            index,
            json.dumps(["list", service]),
            lambda: [r.to_json() for r in self.registry.routes(service=service)],
        )
        return _json_body(body, index)

    async def get_route(self, request: web.Request) -> web.Response:
        route = self.registry.route(request.match_info["name"])
        index = self.registry.store.routes_index
        body = self._routes_cache.get(index, "name:" + route.name, route.to_json)
        return _json_body(body, index)

    async def update_route(self, request: web.Request) -> web.Response:
        route = await self.registry.update_route(
            request.match_info["name"], await json_body(request)
        )
        return _json(route.to_json())

    async def delete_route(self, request: web.Request) -> web.Response:
        await self.registry.delete_route(request.match_info["name"])
        return web.Response(status=204)

    # -- about ---------------------------------------------------------------------
    async def openapi(self, request: web.Request) -> web.Response:
        if self._openapi is None:
            self._openapi = json.dumps(openapi_document(), ensure_ascii=False)
        return web.Response(text=self._openapi, content_type="application/json")

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(await self.status_fn())
