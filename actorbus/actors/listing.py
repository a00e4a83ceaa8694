"""What discovery finds: a service record of the registry, read for use.

The registry's records are UAP services; an actor type's record says, under
``agent_info["actorbus"]``, what its hosts announced (its address, intents and
their schemas, how each is called). :class:`Listing` is that record as callers
use it, judged healthy by the age of its last renewal (no registry service need
run), and :class:`DiscoveryQuery` what ``discover()`` filters by.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from actorbus.codecs.uap import EphemeralCheck, ServiceResponse

AGENT_PROTOCOL = "actorbus"  # the agent_protocol of actor types' records


class DiscoveryQuery(TypedDict, total=False):
    """What ``discover()`` looks for; every given filter must match."""

    skill: str | None  # offers this skill
    tags: Iterable[str]  # carries every one of these tags
    protocol: str | None  # speaks this protocol ("actorbus", "a2a" ...)
    name: str | None  # is registered under this name
    healthy: bool  # only healthy ones (the default), or all


@dataclass(frozen=True)
class Listing:
    """One discovered agent (a service record, read for use)."""

    name: str
    service_id: str
    agent_protocol: str | None
    address: str | None  # where actorbus sends to it (actor types on the bus)
    skills: frozenset[str]
    tags: frozenset[str]
    protocols: frozenset[str]
    healthy: bool
    url: str | None = None  # for services reached over HTTP
    service: ServiceResponse | None = field(default=None, repr=False, compare=False)

    @property
    def native(self) -> dict[str, Any]:
        """What an actor type's hosts announced about it (its description, skills,
        intents, replies); {} for other services."""
        info = self.service.agent_info if self.service is not None else None
        native = info.get("actorbus") if isinstance(info, dict) else None
        return native if isinstance(native, dict) else {}

    @property
    def calls(self) -> dict[str, dict[str, Any]]:
        """How each intent is called (``handler``, ``streams``, ``durable``,
        ``opens_task``, ``description``);
        {} for services that do not say (an older actorbus: all plain asks)."""
        calls = self.native.get("calls")
        return dict(calls) if isinstance(calls, dict) else {}

    def description_of(self, intent: str) -> str:
        """What ``intent``'s handler does (its docstring's first paragraph); "" when
        the type's hosts do not say."""
        found = self.calls.get(intent)
        text = found.get("description") if isinstance(found, dict) else None
        return text if isinstance(text, str) else ""

    @property
    def intents(self) -> dict[str, Any]:
        """The intents an actor type handles, each with its message's JSON schema
        (None for raw content); {} for other services."""
        intents = self.native.get("intents")
        return dict(intents) if isinstance(intents, dict) else {}


def read_listing(svc: ServiceResponse, renewed_ms: int | None, now_ms: float) -> Listing:
    info = svc.agent_info or {}
    native = info.get(AGENT_PROTOCOL) if svc.agent_protocol == AGENT_PROTOCOL else None
    healthy = svc.healthy
    check = svc.ephemeral_check
    if svc.ephemeral and healthy:  # judged here too: no registry service may be running
        last = renewed_ms if renewed_ms is not None else svc.updated_at
        limit = (check or EphemeralCheck()).unhealthy_after * 1000
        healthy = now_ms - last < limit
    url = None
    if svc.host:
        port = f":{svc.port}" if svc.port else ""
        url = f"{svc.protocol}://{svc.host}{port}{svc.path or ''}"
    protocols = set(native.get("protocols", ())) if isinstance(native, dict) else set()
    if svc.agent_protocol:
        protocols.add(svc.agent_protocol)
    return Listing(
        name=svc.name,
        service_id=svc.id,
        agent_protocol=svc.agent_protocol,
        address=str(native["address"]) if isinstance(native, dict) else None,
        skills=frozenset(_skill_names(info)),
        tags=frozenset(svc.tags),
        protocols=frozenset(protocols),
        healthy=healthy,
        url=url,
        service=svc,
    )


def _skill_names(info: dict[str, Any]) -> set[str]:
    """Skill ids and names from any protocol's description (actorbus, an A2A card...)."""
    names: set[str] = set()
    for doc in info.values():
        if not isinstance(doc, dict):
            continue
        for s in doc.get("skills") or ():
            if isinstance(s, dict):
                names.update(str(s[k]) for k in ("id", "name") if s.get(k))
            elif isinstance(s, str):
                names.add(s)
    return names
