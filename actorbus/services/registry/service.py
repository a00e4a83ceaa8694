"""One registry instance: store, leader election, lifecycles, HTTP API and actor.

Run as many instances as you like on one namespace: they share the store
(JetStream KV), any of them answers any request, and exactly one, the holder
of the ``leader`` lease in ``actorbus-{ns}-registry-leader``, runs the
lifecycles (expiry of ephemeral services, health checks of persistent ones,
agent-card retries). When the leader dies its lease expires after
``leader_ttl`` seconds and another instance takes over within ``leader_ttl / 3``
more (see :class:`actorbus.bus.leases.LeaderElection`).

Embed it::

    async with RegistryService(nats_url="nats://127.0.0.1:4222", namespace="ab") as reg:
        print(reg.http_url)

or hand it an ActorSystem you already run (``RegistryService(system=system)``);
``python -m actorbus.services.registry`` runs one from the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from actorbus.actors.system import ActorSystem
from actorbus.bus.leases import LeaderElection, LeaseBucket
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.envelope import new_id
from actorbus.services.face import FaceSettings
from actorbus.services.hosting import HostedService
from actorbus.services.registry.actor import RegistryActor
from actorbus.services.registry.cards import AgentInfoFetcher
from actorbus.services.registry.core import Registry
from actorbus.services.registry.http import RegistryHttp
from actorbus.services.registry.lifecycle import Lifecycle
from actorbus.services.registry.store import RegistryStore

log = logging.getLogger("actorbus.registry")

LEADER_KEY = "leader"


def leader_bucket(ns: str) -> str:
    return f"actorbus-{ns}-registry-leader"


@dataclass(frozen=True)
class RegistrySettings(FaceSettings):
    """How a registry instance runs; the defaults follow the spec. Writes over
    HTTP need a bearer token (``registry:write``) where ``auth`` says so; reads
    need none."""

    replicas: int = 1  # of the buckets; 3 on a cluster
    leader_ttl: float = 3.0  # seconds a dead leader's lease outlives it
    sweep_interval: float = 1.0  # seconds between the leader's lifecycle sweeps
    card_timeout: float = 5.0  # seconds an agent card fetch may take
    card_retry_interval: float = 30.0  # seconds between retries of a failed card fetch
    default_wait: float = 300.0  # a blocking query's wait when the client gives none
    max_wait: float = 600.0  # the longest wait a blocking query gets
    http_host: str = "127.0.0.1"
    http_port: int | None = 0  # 0: any free port; None: no HTTP API
    actor_key: str | None = "main"  # the RegistryActor's key; None: no actor
    instance_id: str | None = None  # default: a fresh id per start


class RegistryService(HostedService):
    """A registry instance; ``start()``/``stop()`` or ``async with``."""

    def __init__(
        self,
        *,
        system: ActorSystem | None = None,
        nats_url: str | list[str] | None = None,
        namespace: str = "ab",
        settings: RegistrySettings | None = None,
    ) -> None:
        super().__init__(system=system, nats_url=nats_url, namespace=namespace)
        self.settings = settings or RegistrySettings()
        self.instance_id = self.settings.instance_id or f"registry-{new_id()}"
        self._store: RegistryStore | None = None
        self._registry: Registry | None = None
        self._fetcher = AgentInfoFetcher(self.settings.card_timeout)
        self._lifecycle: Lifecycle | None = None
        self._lifecycle_task: asyncio.Task[None] | None = None
        self._election: LeaderElection | None = None
        self._actor_address: str | None = None

    # -- parts ---------------------------------------------------------------------
    @property
    def store(self) -> RegistryStore:
        if self._store is None:
            raise RuntimeError("the registry is not started")
        return self._store

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            raise RuntimeError("the registry is not started")
        return self._registry

    @property
    def lifecycle(self) -> Lifecycle | None:
        """The lifecycle runner while this instance leads (None otherwise)."""
        return self._lifecycle if self.is_leader else None

    @property
    def election(self) -> LeaderElection:
        if self._election is None:
            raise RuntimeError("the registry is not started")
        return self._election

    @property
    def is_leader(self) -> bool:
        return self._election is not None and self._election.is_leader

    # -- start and stop ------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        try:
            system = await self.open_system(
                self.instance_id, hosts=[RegistryActor.type_name], js_replicas=s.replicas
            )
            js = system.runtime.js
            self._store = await RegistryStore.open(js, self.namespace, replicas=s.replicas)
            self._registry = Registry(self._store, self._fetcher, max_wait=s.max_wait)
            self._lifecycle = Lifecycle(
                self._store,
                self._fetcher,
                sweep_interval=s.sweep_interval,
                card_retry_interval=s.card_retry_interval,
            )
            leases = await LeaseBucket.open(
                js, leader_bucket(self.namespace), s.leader_ttl, replicas=s.replicas
            )
            self._election = LeaderElection(
                leases,
                LEADER_KEY,
                self.instance_id,
                on_elected=self._lead,
                on_lost=self._follow,
            )
            await self._election.start()
            if s.http_port is not None:
                await self._start_http(s.http_host, s.http_port)
            if s.actor_key is not None:
                ref = await system.spawn(RegistryActor, s.actor_key, registry=self._registry)
                self._actor_address = ref.address
        except BaseException:
            await self.stop()
            raise
        log.info(
            "registry %s on namespace %s%s%s",
            self.instance_id,
            self.namespace,
            f", HTTP {self.http_url}" if self.http_url else "",
            ", leader" if self.is_leader else "",
        )

    async def _start_http(self, host: str, port: int) -> None:
        api = RegistryHttp(
            self.registry,
            self.status,
            default_wait=self.settings.default_wait,
            writers=self.token_verifier(self.settings),
        )
        tls = self.tls_context(self.settings)
        await self.serve_http(api.app(), host, port, shutdown_timeout=1.0, tls=tls)

    async def _lead(self) -> None:
        assert self._lifecycle is not None
        self._lifecycle_task = supervise("registry lifecycle", self._lifecycle.run, logger=log)
        log.info("registry %s leads namespace %s", self.instance_id, self.namespace)

    async def _follow(self) -> None:
        task, self._lifecycle_task = self._lifecycle_task, None
        await stop_task(task, what="registry lifecycle")

    async def stop(self) -> None:
        """Stop serving, step down (releasing the lease), close what was opened."""
        await self.stop_http()
        if self._actor_address is not None and self.system is not None:
            with contextlib.suppress(Exception):
                await self.system.stop_actor(self._actor_address, timeout=2.0)
            self._actor_address = None
        if self._election is not None:
            await self._election.stop()
        await self._follow()
        await self._fetcher.close()
        if self._store is not None:
            await self._store.close()
        await self.close_system()

    async def status(self) -> dict[str, Any]:
        """What ``GET /status`` shows."""
        store = self.store
        leader: str | None = None
        if self._election is not None:
            with contextlib.suppress(Exception):
                leader = await self._election.leases.holder(LEADER_KEY)
        return {
            "instance": self.instance_id,
            "namespace": self.namespace,
            "leader": self.is_leader,
            "leader_instance": leader,
            "services": len(store.list_services()),
            "routes": len(store.list_routes()),
            "index": store.index,
        }
