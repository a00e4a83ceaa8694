"""What a sender assumes about a destination when a call does not say how to deliver.

An actor type declares its delivery defaults (``Actor.durable``, or per intent
with ``@handler(durable=...)``); ``tell()`` honours them when the sending system
knows the type. It knows the types it hosts and those it was told about with
``ActorSystem.learn()``. A call's own ``durable=`` wins, but for one thing: a
durable message to a type known to read no durable queue (it has no durable
handler) is refused, since it would wait in JetStream unread.
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
from actorbus.codecs.errors import UnsupportedError

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
        self._core_only: set[str] = set()  # known to have no durable handler

    def learn(self, type_name: str, policy: DeliveryPolicy) -> None:
        if policy.default or policy.durable_intents:
            self._policies[type_name] = policy
            self._core_only.discard(type_name)
        else:
            self._policies.pop(type_name, None)  # all core: the fast path needs no entry
            self._core_only.add(type_name)

    def check_durable(self, address: str) -> None:
        """UnsupportedError when ``address``'s type is known to read no durable
        queue: a durable message to it would be stored and never delivered."""
        type_name = address.partition("/")[0]
        if type_name in self._core_only:
            raise UnsupportedError(
                f"a durable message to {address} would never be delivered: actor type "
                f"{type_name!r} has no durable handler, so its hosts read no durable queue. "
                "Make the handler durable (@handler(durable=True), or durable = True on "
                "the class), or send without durable=True"
            )

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
