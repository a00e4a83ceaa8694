"""The gateway service: one aiohttp server exposing actors to outside clients.

Embed it::

    async with GatewayService(nats_url="nats://127.0.0.1:4222", namespace="ab") as gw:
        print(gw.http_url)                     # http://127.0.0.1:8480

or hand it an ActorSystem you run (``GatewayService(system=system, settings=...)``);
``python -m actorbus.services.gateway`` runs one from the shell. Agents are
found through the registry (``system.discover``): an agent is an actor type name.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec
import nats.js.errors
from aiohttp import web

from actorbus.actors.system import ActorSystem
from actorbus.codecs.envelope import new_id
from actorbus.codecs.errors import ActorBusError, AuthError
from actorbus.security.broker import DevCertificates
from actorbus.security.did import wba_authority
from actorbus.security.settings import actorbus_home, default_home
from actorbus.security.tokens import RateLimits
from actorbus.services.gateway import edges as edge_modules
from actorbus.services.gateway.auth import GatewayAuth
from actorbus.services.gateway.clients import development_clients, read_token_clients
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.edges.http import base_url, refusal
from actorbus.services.gateway.oauth import STATUS_SCOPE
from actorbus.services.gateway.push import PUSH_TYPE, PushConfigs, Pusher, delivery_class
from actorbus.services.gateway.settings import CoreSettings, GatewaySettings, default_db_path
from actorbus.services.gateway.store import TaskStore
from actorbus.services.gateway.tasks import TASKS_TYPE
from actorbus.services.gateway.tracing import server_spans
from actorbus.services.hosting import HostedService

log = logging.getLogger("actorbus.gateway")


@web.middleware
async def no_tracebacks(request: web.Request, handler: Any) -> web.StreamResponse:
    """Whatever goes wrong, the client gets JSON, never a traceback page."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        body = {"error": exc.reason.lower().replace(" ", "_"), "message": exc.text or exc.reason}
        return web.Response(
            body=msgspec.json.encode(body), status=exc.status, content_type="application/json"
        )
    except Exception:
        log.exception("gateway: %s %s failed", request.method, request.path)
        body = {"error": "internal", "message": "internal error in the gateway"}
        return web.Response(
            body=msgspec.json.encode(body), status=500, content_type="application/json"
        )


class GatewayService(HostedService):
    """A gateway; ``start()``/``stop()`` or ``async with``."""

    def __init__(
        self,
        *,
        system: ActorSystem | None = None,
        nats_url: str | list[str] | None = None,
        namespace: str = "ab",
        settings: GatewaySettings | None = None,
    ) -> None:
        super().__init__(system=system, nats_url=nats_url, namespace=namespace)
        self.settings = settings or GatewaySettings()
        self.auth: GatewayAuth | None = None
        self.db_path = Path(self.settings.db_path or default_db_path(self.namespace))
        self.store: TaskStore | None = None
        self._core: GatewayCore | None = None
        self._edges: list[edge_modules.Edge] = []
        self._push_http: aiohttp.ClientSession | None = None
        self._clients_file: tuple[Path, bool] | None = None  # development clients: where

    @property
    def core(self) -> GatewayCore:
        if self._core is None:
            raise RuntimeError("the gateway is not started")
        return self._core

    async def start(self) -> None:
        s = self.settings
        try:
            # it asks actors and hosts none but its own (open tasks' listeners, the
            # push notification worker): on a secured broker it takes no other's messages
            hosts = (TASKS_TYPE, PUSH_TYPE) if s.push_notifications else (TASKS_TYPE,)
            system = await self.open_system(
                f"gateway-{new_id()}", hosts=hosts, js_replicas=s.js_replicas
            )
            self.store = await TaskStore.open(self.db_path)
            self._core = GatewayCore(
                system,
                self.store,
                CoreSettings(
                    ask_timeout=s.ask_timeout,
                    stream_item_timeout=s.stream_item_timeout,
                    stop_timeout=s.stop_timeout,
                ),
            )
            self.auth = self._auth()
            self._core.auth = self.auth
            self._core.exposed = self._exposure(system)
            if self.auth is not None:
                self.auth.agent_names = self._agent_names
            if s.push_notifications:
                await self._start_push(system, self.store, self._core)
            stale = await self._core.recover()
            if stale:
                log.warning("gateway: %d task(s) of a previous run marked failed", stale)
            self._edges = [edge_modules.load(name)(self._core, s) for name in s.edges]
            tls = self.tls_context(s)
            await self.serve_http(
                self.app(), s.http_host, s.http_port, s.stop_timeout, tls, s.idle_timeout
            )
        except BaseException:
            await self.stop()
            raise
        log.info("gateway %s on namespace %s (db %s)", self.http_url, self.namespace, self.db_path)
        if self._clients_file is not None:
            self._tell_development_clients(*self._clients_file)

    def _tell_development_clients(self, path: Path, made: bool) -> None:
        """Say where a development machine's token clients are, and how to use them."""
        names = sorted(self.auth.token_server.clients if self.auth is not None else ())
        ca = ""
        https = self.http_url is not None and self.http_url.startswith("https:")
        if https and self.settings.tls_cert is None:  # the development certificate
            ca = f"--cacert {DevCertificates(actorbus_home()).ca_file} "
        log.warning(
            "gateway: token clients %s, their secrets in %s%s. A token for an agent: "
            "curl %s-u %s:SECRET %s/oauth/token -d grant_type=client_credentials "
            "-d scope=agent:NAME. In production give each client its own secret "
            "(--token-clients FILE).",
            ", ".join(names),
            path,
            " (made now: this home holds the development authority)" if made else "",
            ca,
            names[0] if names else "ID",
            self.http_url,
        )

    async def _start_push(self, system: ActorSystem, store: TaskStore, core: GatewayCore) -> None:
        """Push notifications: the configs' table, the delivery worker on the durable
        queue, the hook on every task change. Without JetStream, not served."""
        s = self.settings
        configs = await PushConfigs.open(store.db)
        self._push_http = aiohttp.ClientSession()
        try:
            await system.register(
                delivery_class(s.push_backoff),
                session=self._push_http,
                urls=s.push_urls,
                timeout=s.push_timeout,
            )
        except ActorBusError as e:
            log.warning("gateway: push notifications are off (%s)", e)
            return
        if s.push_urls == "any":
            log.warning("gateway: push notifications go to any URL (push_urls='any')")
        core.pusher = Pusher(system, configs, s.push_urls)
        core.on_change = core.pusher.on_change

    def _auth(self) -> GatewayAuth | None:
        s = self.settings
        issuer = self.token_issuer(s)
        if issuer is None:
            return None
        if s.request_ids == "optional":
            log.warning(
                "gateway: requests without an id are taken (request_ids='optional'): "
                "a replay of one cannot be refused"
            )
        token_secrets, token_scopes = dict(s.token_secrets), dict(s.token_scopes)
        if not token_secrets and s.development_clients:
            found = development_clients(default_home(self.namespace))
            if found is not None:
                token_secrets, token_scopes = read_token_clients(found[0])
                self._clients_file = found
        if not token_secrets and "*" not in s.open_agents:
            log.warning(
                "gateway: authentication is on and no token clients are configured "
                "(--token-clients FILE, GatewaySettings.token_secrets): nobody can get "
                "a token, so only open agents and DID-signed ANP requests are served"
            )
        return GatewayAuth(
            issuer,
            open_agents=s.open_agents,
            token_secrets=token_secrets,
            token_scopes=token_scopes,
            require_request_ids=s.request_ids == "required",
            limits=RateLimits(*s.rate_limits),
            public_url=s.public_url,
        )

    def _exposure(self, system: ActorSystem) -> frozenset[str] | None:
        """The agents served (None: all): ``expose``, else all on an open bus and
        the open agents on a secured one."""
        s = self.settings
        named = s.expose
        if named is None:
            if not system.runtime.security.secured:
                return None
            named = s.open_agents
            log.warning(
                "gateway: on a secured bus only the agents named are served (%s); "
                "name the others with --expose NAME (or --expose '*')",
                ", ".join(named) or "none yet",
            )
        return None if "*" in named else frozenset(named)

    async def _agent_names(self) -> list[str]:
        return [agent.name for agent in await self.core.agents()]

    def app(self) -> web.Application:
        tracing = self.system is not None and self.system.runtime.telemetry.tracing
        middlewares = [server_spans, no_tracebacks] if tracing else [no_tracebacks]
        if self.auth is not None:
            middlewares.append(self.auth.middleware)
        app = web.Application(middlewares=middlewares, client_max_size=self.settings.max_body)
        if self.auth is not None:
            app.router.add_routes(self.auth.routes())
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/status", self.status)
        app.router.add_get("/.well-known/did.json", self.did_document)
        for edge in self._edges:
            app.router.add_routes(edge.routes())
        return app

    async def stop(self) -> None:
        """Stop serving, stop the runs in flight, close the database and connection."""
        if self._core is not None:  # first: open streams end, so connections close at once
            await self._core.close()
        await self.stop_http()
        for edge in self._edges:
            with contextlib.suppress(Exception):
                await edge.close()
        self._edges = []
        self._core = None
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()
            self.store = None
        await self.close_system()
        if self._push_http is not None:  # after the delivery workers stopped with the system
            await self._push_http.close()
            self._push_http = None

    async def did_document(self, request: web.Request) -> web.Response:
        """The gateway system's identity as the did:wba document of its host (the
        spec's path for ``did:wba:<host>``); 404 when the bus is not secured."""
        identity = self.system.runtime.security.identity if self.system is not None else None
        if identity is None:
            raise web.HTTPNotFound(text="this gateway has no identity (the bus is not secured)")
        parts = urlsplit(base_url(request, self.settings.public_url))
        did = "did:wba:" + wba_authority(parts.hostname or "localhost", parts.port)
        return web.json_response(identity.did_document(did))

    async def healthz(self, request: web.Request) -> web.Response:
        """Healthy when connected and the registry's records are there to route by;
        else 503 saying what is wrong. Lists how many agents it can reach, with a
        warning when none (not unhealthy: agents may simply not have started)."""
        problems: list[str] = []
        agents = 0
        system = self.system
        if system is None or not system.nc.is_connected:
            problems.append("not connected to NATS (reconnecting)")
        else:
            try:
                store = await system.directory.store()
                await store.kv.status()
                agents = sum(1 for listing in await system.discover() if listing.address)
            except nats.js.errors.NotFoundError:
                problems.append(
                    "the registry's bucket is gone (the broker lost its store?); making it again"
                )
            except Exception as exc:
                problems.append(f"the registry cannot be read: {type(exc).__name__}: {exc}")
        body: dict[str, Any] = {"ok": not problems, "agents": agents}
        if problems:
            body["problems"] = problems
        elif agents == 0:
            body["warnings"] = [f"no agents are registered in namespace {self.namespace}"]
        return web.json_response(body, status=503 if problems else 200)

    async def status(self, request: web.Request) -> web.Response:
        """What runs here; with authentication on, only for a token for the
        audience ``gateway`` with ``gateway:status`` (it names paths and counts)."""
        if self.auth is not None:
            try:
                self.auth.check_operator(request, "gateway", STATUS_SCOPE)
            except AuthError as e:
                return refusal({"error": "unauthorized", "message": str(e)}, e)
        counts = await self.store.stats() if self.store is not None else {}
        return web.json_response(
            {
                "namespace": self.namespace,
                "url": self.http_url,
                "edges": list(self.settings.edges),
                "db": str(self.db_path),
                **counts,
            }
        )
