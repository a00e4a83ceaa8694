"""Every ActorSystem in the registry: its actor types announced, others discovered.

Each actor type a system hosts (``spawn`` or ``register``) is announced as an
ephemeral UAP service in the namespace's registry bucket: its name, skills,
tags, the JSON schema of every message it takes, the protocols it speaks, its
delivery defaults. The record is renewed every 15 s and deleted on a clean
shutdown; a registry service (if one runs) marks it unhealthy and deletes it
when renewals stop. Discovery reads an in-memory mirror of the bucket, kept
current by a watcher, so ``discover()`` and ``ask(skill=...)`` cost no round trip.
Health is judged here too (the last renewal's age, ``listing.py``), so
discovery stays right when no registry service runs at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Unpack

from actorbus.actors.delivery import DeliveryPolicy
from actorbus.actors.handlers import HandlerSpec
from actorbus.actors.listing import AGENT_PROTOCOL, DiscoveryQuery, Listing, read_listing
from actorbus.bus.registration import Registration
from actorbus.bus.service_records import ServiceRecords
from actorbus.bus.tasks import spawn, stop_task
from actorbus.codecs.errors import ActorNotFoundError
from actorbus.codecs.uap import ServiceResponse, actor_agent_info, ephemeral_service, skill

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.registry")


class Directory:
    """The registry side of one ActorSystem."""

    def __init__(self, rt: Runtime, enabled: bool) -> None:
        self.rt = rt
        self.enabled = enabled
        self._store: ServiceRecords | None = None
        self._opening = asyncio.Lock()
        self._registrations: dict[str, Registration] = {}
        self._announcing: set[asyncio.Task[None]] = set()
        self._rr = itertools.count()

    async def store(self) -> ServiceRecords:
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    rt = self.rt
                    self._store = await ServiceRecords.open(
                        rt.js, rt.namespace, replicas=rt.durable_settings.replicas
                    )
        return self._store

    # -- announcing --------------------------------------------------------
    def announce(self, cls: type[Actor]) -> None:
        """Register ``cls`` in the background (spawn must not wait for it)."""
        if not self.enabled or not cls.advertise or cls.type_name in self._registrations:
            return
        spawn(self._announce(cls), f"announce {cls.type_name}", self._announcing)

    async def _announce(self, cls: type[Actor]) -> None:
        try:
            store = await self.store()
            record = service_record(cls, self.rt.system_id)
            if cls.type_name in self._registrations:
                return
            registration = Registration(store, record)
            self._registrations[cls.type_name] = registration
            await registration.start()
        except Exception as exc:  # no JetStream, say: the actors work without it
            log.warning("could not register %s in the registry: %r", cls.type_name, exc)

    async def restore_if_lost(self) -> None:
        """After the broker lost its store: the registry's buckets made again and
        this system's actor types registered again at once (not at their next
        renewal), so discovery finds them within seconds."""
        if self._store is None or not await self._store.restore_if_lost():
            return
        for registration in list(self._registrations.values()):
            await registration.register_again()

    async def announced(self, timeout: float = 5.0) -> None:
        """Wait until every announcement started so far has been stored."""
        if self._announcing:
            await asyncio.wait(set(self._announcing), timeout=timeout)

    async def close(self, timeout: float) -> None:
        """Deregister (bounded by ``timeout``) and stop watching."""
        for task in list(self._announcing):
            await stop_task(task, what="an announcement")  # none may register after this
        registrations = list(self._registrations.values())
        self._registrations.clear()
        if registrations:
            # With no broker there is nobody to tell: the records expire by themselves.
            tell = self.rt.nc.is_connected
            stopping = {
                spawn(r.stop(deregister=tell), f"deregister {r.record.id}") for r in registrations
            }
            await asyncio.wait(stopping, timeout=timeout)
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()

    # -- discovering -------------------------------------------------------
    async def discover(self, **query: Unpack[DiscoveryQuery]) -> list[Listing]:
        unknown = set(query) - set(DiscoveryQuery.__annotations__)
        if unknown:  # what mypy catches for typed callers, said at run time for the rest
            raise TypeError(f"discover() got unknown filter(s): {', '.join(sorted(unknown))}")
        await self.announced()  # our own types are there before we look
        store = await self.store()
        now_ms = time.time() * 1000
        skill, protocol = query.get("skill"), query.get("protocol")
        healthy = query.get("healthy", True)
        found = []
        for svc in store.list_services(name=query.get("name"), tags=query.get("tags", ())):
            listing = read_listing(svc, store.renewed_at(svc.id), now_ms)
            if healthy and not listing.healthy:
                continue
            if skill is not None and skill not in listing.skills:
                continue
            if protocol is not None and protocol not in listing.protocols:
                continue
            found.append(listing)
        return found

    async def address_for(self, skill: str) -> str:
        """An address offering ``skill`` (AgentAnycast's skill addressing): one of the
        healthy actor types that do, in turn; NATS picks the instance."""
        addresses = sorted(
            {
                listing.address
                for listing in await self.discover(skill=skill)
                if listing.address is not None
            }
        )
        if not addresses:
            raise ActorNotFoundError(f"no healthy actor offers skill {skill!r}")
        return addresses[next(self._rr) % len(addresses)]


def service_record(cls: type[Actor], system_id: str) -> ServiceResponse:
    """The ephemeral service announcing actor type ``cls`` hosted by ``system_id``."""
    intents: dict[str, dict[str, Any] | None] = {
        intent: spec.model.model_json_schema() if spec.model is not None else None
        for intent, spec in cls.handlers.items()
    }
    replies = {
        intent: spec.reply_model.model_json_schema()
        for intent, spec in cls.handlers.items()
        if spec.reply_model is not None
    }
    info = actor_agent_info(
        cls.type_name,
        description=cls.description or (cls.__doc__ or "").strip().split("\n")[0],
        skills=[skill(s, s, _intent_description(cls, s)) for s in skills_of_class(cls)],
        intents=intents,
        replies=replies,
    )
    info[AGENT_PROTOCOL].update(
        {
            "calls": {intent: call_kind(spec) for intent, spec in cls.handlers.items()},
            "prompts": dict(cls.prompts),
            "protocols": list(cls.protocols),
            "keyed": cls.keyed,
            "key_by_session": cls.key_by_session,
            "delivery": DeliveryPolicy.of(cls).to_json(),
            "system": system_id,
        }
    )
    return ephemeral_service(
        cls.type_name,
        agent_protocol=AGENT_PROTOCOL,
        agent_info=info,
        tags=list(cls.tags),
        protocol="nats",
        path=cls.type_name,
        service_id=f"{system_id}-{cls.type_name}",
    )


def call_kind(spec: HandlerSpec) -> dict[str, Any]:
    """How an intent is called, for callers that choose by it (an agent offers a
    model only the tools it can call): the handler's name, whether it streams,
    is durable (told, stored, no reply), may keep a gateway task open (its
    reply can be a question for a person), and what it does (its docstring)."""
    return {
        "handler": spec.method,
        "streams": spec.streaming,
        "durable": spec.durable,
        "opens_task": spec.opens_task,
        "description": spec.description,
    }


def _intent_description(cls: type[Actor], skill_id: str) -> str:
    """A skill's description: its handler's, when the skill is an intent."""
    spec = cls.handlers.get(skill_id)
    return spec.description if spec is not None else ""


def skills_of_class(cls: type[Actor]) -> tuple[str, ...]:
    """Declared skills, else the intents it handles (what it can be asked to do)."""
    return tuple(cls.skills) or tuple(sorted(cls.handlers))
