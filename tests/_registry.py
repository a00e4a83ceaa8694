"""Helpers for the registry tests (importable as ``_registry``: tests/ is on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from _util import child_env, terminate
from aiohttp import web

from actorbus.codecs.uap import ServiceResponse
from actorbus.services.registry import RegistryService, RegistrySettings
from actorbus.services.registry.store import RegistryStore

# Short times, so lifecycles play out in a fraction of a second.
FAST = RegistrySettings(
    leader_ttl=1.5,
    sweep_interval=0.05,
    card_timeout=1.0,
    card_retry_interval=0.2,
    default_wait=10.0,
)


@contextlib.asynccontextmanager
async def running_registry(url: str, ns: str, **overrides: Any) -> AsyncIterator[RegistryService]:
    """A RegistryService in this process with FAST settings (plus ``overrides``)."""
    async with RegistryService(
        nats_url=url, namespace=ns, settings=replace(FAST, **overrides)
    ) as reg:
        yield reg


async def wait_for_service(
    store: RegistryStore,
    service_id: str,
    predicate: Callable[[ServiceResponse | None], bool],
    timeout: float = 5.0,
) -> ServiceResponse | None:
    """Until ``predicate(store.get_service(id))`` holds, woken by the store's changes."""
    deadline = time.monotonic() + timeout
    while True:
        svc = store.get_service(service_id)
        if predicate(svc):
            return svc
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"service {service_id} never matched; last seen {svc!r}")
        await store.wait_for_change(store.services_index, left, "services")


class Target:
    """A small HTTP server on 127.0.0.1 standing in for a registered service:
    ``/health`` answers 200 or 503 (``healthy``), and agent documents are
    served from ``documents`` (path -> JSON)."""

    def __init__(self) -> None:
        self.healthy = True
        self.documents: dict[str, Any] = {}
        self.health_hits = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _health(self, request: web.Request) -> web.Response:
        self.health_hits += 1
        return web.json_response({"ok": self.healthy}, status=200 if self.healthy else 503)

    async def _document(self, request: web.Request) -> web.Response:
        doc = self.documents.get(request.path)
        if doc is None:
            return web.json_response({"error": "no such document"}, status=404)
        return web.json_response(doc)

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_route("*", "/health", self._health)
        app.router.add_get("/{tail:.*}", self._document)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@contextlib.asynccontextmanager
async def target() -> AsyncIterator[Target]:
    t = Target()
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


@dataclass
class RegistryProcess:
    """A registry instance in its own OS process (``python -m actorbus.services.registry``)."""

    proc: asyncio.subprocess.Process
    url: str
    instance: str
    stderr: Any

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return str(self.stderr.read().decode(errors="replace"))


@contextlib.asynccontextmanager
async def registry_process(
    nats_url: str, ns: str, *extra: str, timeout: float = 15.0
) -> AsyncIterator[RegistryProcess]:
    """Start a registry process with short times; yield once it printed "ready";
    SIGTERM (then SIGKILL) it on the way out."""
    with tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "actorbus.services.registry",
            "--nats",
            nats_url,
            "--namespace",
            ns,
            "--http",
            "127.0.0.1:0",
            "--leader-ttl",
            "1.5",
            "--sweep-interval",
            "0.05",
            *extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=child_env(),
        )
        try:
            assert proc.stdout is not None
            first = await asyncio.wait_for(proc.stdout.readline(), timeout)
            ready = await asyncio.wait_for(proc.stdout.readline(), timeout)
            if ready.strip() != b"ready":
                stderr.seek(0)
                raise RuntimeError(f"registry process failed: {first!r} {stderr.read()!r}")
            words = first.decode().split()  # registry URL instance ID namespace NS
            yield RegistryProcess(proc, words[1], words[3], stderr)
        finally:
            await terminate(proc)
