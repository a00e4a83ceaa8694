"""What the gateway, the registry and the router share as services: the ActorSystem they run
on (given by the caller, or connected and later closed by the service) and the
HTTP server of their face."""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from actorbus.actors.system import ActorSystem
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.startstop import AsyncStartStop
from actorbus.security.broker import DevCertificates
from actorbus.security.identity import Identity
from actorbus.security.secure_broker import join_options
from actorbus.security.settings import actorbus_home, default_home
from actorbus.security.tokens import TokenIssuer, TokenVerifier
from actorbus.services.face import FaceSettings

log = logging.getLogger("actorbus.services")


class HostedService(AsyncStartStop):
    """A service on an ActorSystem, with an HTTP face; ``start()``/``stop()`` or
    ``async with``. Give ``system=`` to share one, or ``nats_url=`` to have the
    service connect its own (and close it when it stops)."""

    def __init__(
        self,
        *,
        system: ActorSystem | None,
        nats_url: str | list[str] | None,
        namespace: str,
    ) -> None:
        if (system is None) == (nats_url is None):
            raise ValueError("give either system= or nats_url=")
        self.system: ActorSystem | None = system
        self._owns_system = system is None
        self._nats_url = nats_url
        self.namespace = system.namespace if system is not None else namespace
        self.http_url: str | None = None
        self._runner: web.AppRunner | None = None

    async def open_system(
        self, name: str, hosts: Sequence[str] | None = None, *, js_replicas: int = 1
    ) -> ActorSystem:
        """The system to run on: the one given, or a new connection called ``name``
        (on a secured broker, limited to the actor types ``hosts`` when given),
        creating the namespace's durable streams with ``js_replicas`` (3 on a
        cluster: every process of a namespace must ask for the same)."""
        if self.system is None:
            assert self._nats_url is not None
            urls = [self._nats_url] if isinstance(self._nats_url, str) else self._nats_url
            joining = await join_options(urls[0], self.namespace, name, hosts=hosts)
            self.system = await ActorSystem.connect(
                urls,
                namespace=self.namespace,
                name=name,
                durable=DurableSettings(replicas=js_replicas),
                **joining,
            )
        return self.system

    def token_issuer(self, face: FaceSettings) -> TokenIssuer | None:
        """The namespace's token issuer the HTTP face's calls are checked against
        (see :class:`FaceSettings`); None when ``auth`` is "open", or "auto" on an
        open bus (anyone may call)."""
        if face.auth == "open" or (face.auth == "auto" and not self._secured()):
            return None
        key = face.issuer_key or default_home(self.namespace) / "token-issuer.key"
        return TokenIssuer(Identity.load(key), face.token_domain)

    def token_verifier(self, face: FaceSettings) -> TokenVerifier | None:
        """What checks the bearer tokens of the HTTP face's calls (None: anyone may
        call)."""
        issuer = self.token_issuer(face)
        return None if issuer is None else TokenVerifier.of(issuer)

    def tls_context(self, face: FaceSettings) -> ssl.SSLContext | None:
        """The HTTPS server context of the HTTP face, or None for plain HTTP (see
        :class:`FaceSettings`). Plain HTTP on a secured bus is logged: bearer
        tokens would cross the network readable."""
        secured = self._secured()
        if face.tls == "off" or (face.tls == "auto" and not secured):
            if secured:
                log.warning("%s: plain HTTP on a secured bus (tls='off')", type(self).__name__)
            return None
        if face.tls_cert is not None and face.tls_key is not None:
            cert_file, key_file = Path(face.tls_cert), Path(face.tls_key)
        else:
            dev = DevCertificates(actorbus_home())
            cert_file, key_file = dev.cert_file, dev.key_file
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert_file, key_file)
        return ctx

    def _secured(self) -> bool:
        return self.system is not None and self.system.runtime.security.secured

    async def close_system(self) -> None:
        """Close the system if this service connected it (bounded)."""
        if self._owns_system and self.system is not None:
            with contextlib.suppress(Exception):
                await self.system.close(timeout=2.0)
            self.system = None

    async def serve_http(
        self,
        app: web.Application,
        host: str,
        port: int,
        shutdown_timeout: float,
        tls: ssl.SSLContext | None = None,
        idle_timeout: float = 75.0,
    ) -> None:
        """Listen on ``host:port`` (0: any free port), over TLS when given a
        server context; ``http_url`` says where. A connection that holds no whole
        request for ``idle_timeout`` seconds (silent, sending its headers slowly,
        or idle between requests) is closed."""
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=shutdown_timeout,
            keepalive_timeout=idle_timeout,
            # after an answer to a request whose body was not read (a 408, a 413),
            # what is still coming is drained this long, then the connection closes
            lingering_time=2.0,
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, ssl_context=tls).start()
        bound = self._runner.addresses[0]
        h, p = bound[0], bound[1]
        shown = f"[{h}]" if ":" in h else h
        self.http_url = f"{'https' if tls else 'http'}://{shown}:{p}"

    async def stop_http(self) -> None:
        """Stop listening and close open connections (bounded by the shutdown timeout)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(Exception):
                await runner.cleanup()
