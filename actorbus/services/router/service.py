"""A router instance: the :class:`RouterActor` on the bus and its HTTP face.

    async with RouterService(nats_url=url, settings=RouterSettings(http_port=8490)) as router:
        ...

HTTP (JSON in, JSON out; errors as ``{"error": {"code", "message"}}`` with the
taxonomy's HTTP status):

- ``POST /select``: a scenario (``{"description", "modules": [{"id", "name",
  "tasks", "issues"}]}``, or one scenario in ProtocolRouterBench's form) ->
  ``{"decisions": [records]}``;
- ``POST /route``: a :class:`RouteRequest` -> a :class:`RouteDecision`;
- ``POST /observe``: an :class:`Observation` -> 204;
- ``GET /healthz``.

On a secured bus ``/route`` and ``/observe`` need a bearer token (see
:class:`RouterSettings`): one names the namespace's actors, the other steers
where calls go.

Every request is answered by asking the actor over the bus, so the HTTP face
and bus callers see the same state.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from actorbus.actors.system import ActorSystem
from actorbus.codecs.common import read_json
from actorbus.codecs.errors import ActorBusError, AuthError, DecodeError, ValidationFailedError
from actorbus.security.tokens import TokenVerifier
from actorbus.services.face import FaceSettings
from actorbus.services.hosting import HostedService
from actorbus.services.router.actor import (
    Observation,
    RouteDecision,
    RouterActor,
    RouteRequest,
    SelectRequest,
)

log = logging.getLogger("actorbus.router")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_GUARDED = {"/route": "route", "/observe": "observe"}  # path -> the capability it needs
_STATUS = {
    "E_AUTH": 401,
    "E_DECODE": 400,
    "E_VALIDATION": 400,
    "E_NOT_FOUND": 404,
    "E_TIMEOUT": 504,
    "E_NO_RESPONDERS": 503,
}


@dataclass(frozen=True)
class RouterSettings(FaceSettings):
    """How a router instance runs. Where ``auth`` says so, ``POST /route`` (it
    names the namespace's actors) and ``/observe`` (it steers the latency-aware
    policy) need a bearer token for the audience ``router`` with
    ``router:route`` / ``router:observe`` (a gateway's ``POST /auth/token``);
    ``/select`` reads nothing but the request and stays open."""

    http_host: str = "127.0.0.1"
    http_port: int | None = 0  # 0: any free port; None: no HTTP face
    actor_key: str = "main"
    ask_timeout: float = 10.0


class RouterService(HostedService):
    def __init__(
        self,
        *,
        system: ActorSystem | None = None,
        nats_url: str | list[str] | None = None,
        namespace: str = "ab",
        settings: RouterSettings | None = None,
    ) -> None:
        super().__init__(system=system, nats_url=nats_url, namespace=namespace)
        self.settings = settings or RouterSettings()
        self.address = f"{RouterActor.type_name}/{self.settings.actor_key}"
        self.callers: TokenVerifier | None = None  # None: the HTTP face is open

    async def start(self) -> None:
        s = self.settings
        try:
            system = await self.open_system(f"router-{s.actor_key}", hosts=[RouterActor.type_name])
            await system.spawn(RouterActor, s.actor_key, discover=system.discover)
            self.callers = self.token_verifier(s)
            if s.http_port is not None:
                await self.serve_http(
                    self.app(), s.http_host, s.http_port, 2.0, self.tls_context(s)
                )
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await self.stop_http()
        if self.system is not None and not self._owns_system:
            with contextlib.suppress(Exception):
                await self.system.stop_actor(self.address)
        await self.close_system()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024, middlewares=[self.guard])
        app.router.add_get("/healthz", self.healthz)
        app.router.add_post("/select", self.select)
        app.router.add_post("/route", self.route)
        app.router.add_post("/observe", self.observe)
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """``/route`` and ``/observe`` for callers whose token grants them (see
        :class:`RouterSettings`); 401 with ``WWW-Authenticate: Bearer`` otherwise."""
        call = _GUARDED.get(request.path)
        if self.callers is not None and call is not None:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            try:
                if scheme.lower() != "bearer" or not token.strip():
                    raise AuthError(f"{request.path} needs a bearer token (router:{call})")
                self.callers.check(token.strip(), "router", call, [f"router:{call}"])
            except AuthError as err:
                response = _error(err)
                response.headers["WWW-Authenticate"] = "Bearer"
                return response
        return await handler(request)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "actor": self.address})

    async def select(self, request: web.Request) -> web.Response:
        async def work(body: Any) -> Any:
            if isinstance(body, dict) and "module" in body:  # ProtocolRouterBench's form
                body = {
                    "description": body.get("description", ""),
                    "modules": [
                        {
                            "id": str(i),
                            "name": m.get("name", ""),
                            "tasks": m.get("tasks", []),
                            "issues": m.get("potential_issues", []),
                        }
                        for i, m in enumerate(body["module"], 1)
                        if isinstance(m, dict)
                    ],
                }
            records = await self._ask(SelectRequest.model_validate(body))
            return {"decisions": records}

        return await self._answer(request, work)

    async def route(self, request: web.Request) -> web.Response:
        async def work(body: Any) -> Any:
            decision = await self._ask(RouteRequest.model_validate(body), RouteDecision)
            return decision.model_dump()

        return await self._answer(request, work)

    async def observe(self, request: web.Request) -> web.Response:
        async def work(body: Any) -> Any:
            await self._ask(Observation.model_validate(body))
            return None

        return await self._answer(request, work)

    async def _ask(self, message: Any, returns: type[Any] | None = None) -> Any:
        assert self.system is not None
        return await self.system.ask(
            self.address, message, timeout=self.settings.ask_timeout, returns=returns
        )

    async def _answer(self, request: web.Request, work: Any) -> web.Response:
        try:
            result = await work(read_json(await request.read(), "the request body"))
        except ValidationError as exc:
            err: ActorBusError = ValidationFailedError(
                "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            )
            return _error(err)
        except (ActorBusError, DecodeError) as exc:
            return _error(exc)
        if result is None:
            return web.Response(status=204)
        return web.json_response(result)


def _error(err: ActorBusError) -> web.Response:
    body = {"error": {"code": err.code, "message": str(err)}}
    return web.json_response(body, status=_STATUS.get(err.code, 500))
