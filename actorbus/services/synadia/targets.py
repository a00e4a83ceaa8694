"""Which actor a bridged Synadia agent calls, and how.

A Synadia prompt is text (or ``{prompt, attachments}``); an actor takes a
typed message by intent. A :class:`Target` holds what the bridge needs to turn
one into the other: the actor's address, the JSON schema of each intent (from
the class itself, or from the registry record announced by whoever hosts it)
and, when the class is at hand, which intents stream, so the bridge calls
``stream()`` or ``ask()`` directly instead of asking and falling back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from actorbus.actors.actor import Actor
from actorbus.actors.listing import Listing
from actorbus.actors.system import ActorSystem
from actorbus.codecs.common import fit_to_intent

AgentSpec = str | type[Actor]


@dataclass(frozen=True)
class Target:
    """One actor type served as a Synadia agent."""

    name: str  # the actor type name (``actorbus_type`` in the service metadata)
    address: str  # where prompts go: the type (anycast) or ``type/key``
    description: str = ""
    intents: dict[str, Any] = field(default_factory=dict)  # intent -> JSON schema | None
    streaming: frozenset[str] | None = None  # intents that stream; None: not known

    @classmethod
    def of_class(cls, actor: type[Actor]) -> Target:
        intents = {
            intent: spec.model.model_json_schema() if spec.model is not None else None
            for intent, spec in actor.handlers.items()
        }
        doc = (actor.__doc__ or "").strip().split("\n")[0]
        return cls(
            name=actor.type_name,
            address=actor.type_name,
            description=actor.description or doc,
            intents=intents,
            streaming=frozenset(i for i, s in actor.handlers.items() if s.streaming),
        )

    @classmethod
    def of_listing(cls, listing: Listing) -> Target:
        return cls(
            name=listing.name,
            address=listing.address or listing.name,
            description=str(listing.native.get("description") or ""),
            intents=listing.intents,
        )

    def streams(self, intent: str) -> bool | None:
        """Whether the handler for ``intent`` streams (None: not known here)."""
        return None if self.streaming is None else intent in self.streaming

    def choose_intent(self, intent: str, content: Any) -> tuple[str, Any]:
        """The intent to call with, and the content shaped for its handler.

        A prompt's intent is generic (``text``/``dict``): when the actor has no
        such handler but exactly one handler, that one takes it. Text for a
        handler taking a model is parsed as a JSON object, or becomes the
        model's only required string field, so ``"hi"`` reaches
        ``Question(text: str)`` as ``{"text": "hi"}``.
        """
        return fit_to_intent(self.intents, intent, content)


async def resolve_targets(system: ActorSystem, agents: Sequence[AgentSpec] | None) -> list[Target]:
    """The targets for ``agents`` (classes, or type names looked up in the
    registry); every healthy actorbus type in the registry when None."""
    if agents is None:
        listings = await system.discover(protocol="actorbus")
        return _unique(Target.of_listing(x) for x in listings if x.address)
    out: list[Target] = []
    for spec in agents:
        if isinstance(spec, str):
            found = [x for x in await system.discover(name=spec, healthy=False) if x.address]
            out.append(Target.of_listing(found[0]) if found else Target(spec, spec))
        else:
            out.append(Target.of_class(spec))
    return _unique(out)


def _unique(targets: Iterable[Target]) -> list[Target]:
    """One target per type name (several systems may host one type)."""
    seen: dict[str, Target] = {}
    for t in targets:
        seen.setdefault(t.name, t)
    return list(seen.values())
