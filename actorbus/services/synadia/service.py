"""Actor types as agents of the Synadia Agent Protocol for NATS.

Why a bridge and not a codec alone: the protocol's callers find agents by
asking ``$SRV.INFO.agents`` (NATS micro services), judge them alive by their
heartbeats and read replies as streams, so each served actor type needs a
live presence on NATS of its own. :class:`SynadiaBridge` gives every chosen
actor type one ``agents`` micro service on the system's connection
(:class:`BridgedAgent`), with the ``prompt`` and ``status`` endpoints exactly
as :func:`~actorbus.codecs.synadia.service_config` says, a heartbeat at start
and every ``heartbeat_interval`` seconds, and prompts answered by
:func:`~actorbus.services.synadia.prompt.serve_prompt`.

The owner token defaults to the system's namespace, so two namespaces on one
NATS server serve distinct agents (Synadia subjects are not namespaced). Each
prompt runs in a task of its own: nats.micro awaits an endpoint's handler per
request, and one slow actor must not hold up the prompts behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig

from actorbus.actors.system import ActorSystem
from actorbus.bus.startstop import AsyncStartStop
from actorbus.bus.tasks import spawn, stop_task, supervise
from actorbus.codecs.envelope import now_ms
from actorbus.codecs.synadia import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_SESSION,
    AgentSubject,
    agent_token,
    format_size,
    heartbeat_payload,
    parse_size,
    service_config,
)
from actorbus.services.synadia.prompt import PromptSettings, serve_prompt
from actorbus.services.synadia.targets import AgentSpec, Target, resolve_targets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BridgeSettings:
    """What every agent of one bridge shares."""

    session: str = DEFAULT_SESSION
    heartbeat_interval: int = DEFAULT_HEARTBEAT_INTERVAL_S  # whole seconds, as the protocol says
    max_payload: str = DEFAULT_MAX_PAYLOAD  # lowered to the server's limit when above it
    attachments_ok: bool = True
    min_sender_trust: Literal["any", "signed"] = "any"
    prompt: PromptSettings = field(default_factory=PromptSettings)
    stop_timeout: float = 5.0  # seconds prompts in flight get to finish on stop


class BridgedAgent:
    """One actor type as one ``agents`` micro service instance."""

    def __init__(
        self, system: ActorSystem, target: Target, owner: str, settings: BridgeSettings
    ) -> None:
        self.system = system
        self.target = target
        self.settings = settings
        self.subject = AgentSubject.new(agent_token(target.name), owner, settings.session)
        self.config = service_config(
            target.name,
            owner=owner,
            session=settings.session,
            description=target.description,
            max_payload=_clamped(settings.max_payload, system.nc.max_payload),
            attachments_ok=settings.attachments_ok,
            min_sender_trust=settings.min_sender_trust,
        )
        self._service: Service | None = None
        self._heartbeats: asyncio.Task[None] | None = None
        self._prompts: set[asyncio.Task[None]] = set()

    @property
    def instance_id(self) -> str:
        if self._service is None:
            raise RuntimeError("the agent has not started")
        return self._service.id

    @property
    def prompt_metadata(self) -> dict[str, str]:
        return dict(self.config["endpoints"][0]["metadata"])

    async def start(self) -> None:
        """Register the service and its endpoints, then send the first beat."""
        cfg = self.config
        self._service = await add_service(
            self.system.nc,
            ServiceConfig(
                name=cfg["name"],
                version=cfg["version"],
                description=cfg["description"],
                metadata=cfg["metadata"],
            ),
        )
        handlers = {"prompt": self._on_prompt, "status": self._on_status}
        for ep in cfg["endpoints"]:
            await self._service.add_endpoint(
                EndpointConfig(
                    name=ep["name"],
                    subject=ep["subject"],
                    queue_group=ep["queue_group"],
                    metadata=ep["metadata"] or None,
                    handler=handlers[ep["name"]],
                )
            )
        await self.system.nc.flush()  # started = reachable: no race with a caller
        await self._beat()
        self._heartbeats = supervise("synadia heartbeats", self._beat_every_interval, logger=log)

    def heartbeat(self) -> dict[str, Any]:
        """The heartbeat (and ``status`` reply) payload as of now."""
        return heartbeat_payload(
            self.subject,
            instance_id=self.instance_id,
            ts_ms=now_ms(),
            interval_s=self.settings.heartbeat_interval,
            prompt_metadata=self.prompt_metadata,
            extras={"actorbus_type": self.target.name},
        )

    async def _beat(self) -> None:
        await self.system.nc.publish(self.subject.heartbeat, msgspec.json.encode(self.heartbeat()))

    async def _beat_every_interval(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            try:
                await self._beat()
            except Exception:  # a missed beat is logged; the next one may go out
                log.warning(
                    "synadia heartbeat for %s failed", self.subject.heartbeat, exc_info=True
                )

    async def _on_status(self, request: Request) -> None:
        await request.respond(msgspec.json.encode(self.heartbeat()))

    async def _on_prompt(self, request: Request) -> None:
        spawn(
            serve_prompt(self.system, self.target, request, self.settings.prompt),
            f"synadia prompt {self.subject.prompt}",
            self._prompts,
        )

    async def stop(self) -> None:
        """Stop beating and serving; prompts in flight get ``stop_timeout`` to
        finish, then are cancelled (their callers still get the end marker)."""
        await stop_task(self._heartbeats, what="synadia heartbeats")
        self._heartbeats = None
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.stop()
        if self._prompts:
            _, pending = await asyncio.wait(set(self._prompts), timeout=self.settings.stop_timeout)
            for task in pending:
                await stop_task(task)


def _clamped(max_payload: str, server_limit: int) -> str:
    """Never advertise more than the server lets through (as the official host)."""
    if server_limit > 0 and parse_size(max_payload) > server_limit:
        return format_size(server_limit)
    return max_payload


class SynadiaBridge(AsyncStartStop):
    """Serve actor types of ``system`` as Synadia agents.

    ``agents``: actor classes or type names (looked up in the registry for
    their schemas); None serves every healthy actorbus type the registry
    lists when the bridge starts (:meth:`refresh` adds later ones).
    ``owner`` defaults to the system's namespace.
    """

    def __init__(
        self,
        system: ActorSystem,
        agents: Sequence[AgentSpec] | None = None,
        *,
        owner: str | None = None,
        settings: BridgeSettings | None = None,
    ) -> None:
        self.system = system
        self.owner = owner or system.namespace
        self.settings = settings or BridgeSettings()
        self._specs = list(agents) if agents is not None else None
        self.agents: dict[str, BridgedAgent] = {}

    async def start(self) -> None:
        await self.refresh()

    async def refresh(self) -> list[BridgedAgent]:
        """Start agents for the targets not served yet; returns the new ones."""
        started: list[BridgedAgent] = []
        for target in await resolve_targets(self.system, self._specs):
            if target.name in self.agents:
                continue
            agent = BridgedAgent(self.system, target, self.owner, self.settings)
            await agent.start()
            self.agents[target.name] = agent
            started.append(agent)
        return started

    async def stop(self) -> None:
        agents, self.agents = list(self.agents.values()), {}
        await asyncio.gather(*(a.stop() for a in agents), return_exceptions=True)
