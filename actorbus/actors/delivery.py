"""What a sender assumes about a destination when a call does not say how to deliver.

An actor type declares its delivery defaults (``Actor.durable``, or per intent
with ``@handler(durable=...)``); ``tell()`` honours them when the sending system
knows the type. It knows the types it hosts and those it was told about with
``ActorSystem.learn()``; the registry teaches it about the rest (advertised
policies). A call's own ``durable=`` always wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from actorbus.actors.messages import (
    INTENT_BYTES,
    INTENT_DATA,
    INTENT_DICT,
    INTENT_NONE,
    INTENT_TEXT,
    remember,
)

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """A type's defaults: ``default`` for intents not listed in ``durable_intents``."""

    default: bool = False
    durable_intents: frozenset[str] = field(default_factory=frozenset)
    core_intents: frozenset[str] = field(default_factory=frozenset)

    def durable_for(self, intent: str) -> bool:
        if intent in self.durable_intents:
            return True
        if intent in self.core_intents:
            return False
        return self.default

    @classmethod
    def of(cls, actor: type[Actor]) -> DeliveryPolicy:
        specs = actor.handlers.values()
        return cls(
            default=actor.durable,
            durable_intents=frozenset(s.intent for s in specs if s.durable),
            core_intents=frozenset(s.intent for s in specs if not s.durable),
        )

    def to_json(self) -> dict[str, Any]:
        """The form actors advertise in the registry."""
        return {
            "default": self.default,
            "durable_intents": sorted(self.durable_intents),
            "core_intents": sorted(self.core_intents),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeliveryPolicy:
        return cls(
            default=bool(data.get("default", False)),
            durable_intents=frozenset(map(str, data.get("durable_intents", ()))),
            core_intents=frozenset(map(str, data.get("core_intents", ()))),
        )


class DeliveryDefaults:
    """Known policies by actor type name."""

    def __init__(self) -> None:
        self._policies: dict[str, DeliveryPolicy] = {}

    def learn(self, type_name: str, policy: DeliveryPolicy) -> None:
        if policy.default or policy.durable_intents:
            self._policies[type_name] = policy
        else:
            self._policies.pop(type_name, None)  # all core: the fast path needs no entry

    def durable_for(self, address: str, message: Any, intent: str | None) -> bool:
        """Should this message to ``address`` go durably? (A dict lookup for unknown
        or all-core types, which is most traffic.)"""
        type_name, keyed, _ = address.partition("/")
        policy = self._policies.get(type_name)
        if policy is None or not keyed:  # durable queues are per 'type/key'
            return False
        return policy.durable_for(intent or intent_for(message))


def intent_for(value: Any) -> str:
    """The intent ``to_content`` would give ``value`` (without serializing it)."""
    if isinstance(value, BaseModel):
        return remember(type(value))
    if value is None:
        return INTENT_NONE
    if isinstance(value, bytes | bytearray | memoryview):
        return INTENT_BYTES
    if isinstance(value, dict):
        return INTENT_DICT
    if isinstance(value, str):
        return INTENT_TEXT
    return INTENT_DATA
