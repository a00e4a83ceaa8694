"""What one process hosts: cells by address, and the types it hosts lazily.

A plain table, shared by hosting (which fills it) and the virtual-actor router
(which reads it to place keys and passivate idle ones).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from nats.aio.subscription import Subscription

from actorbus.bus.tasks import YieldEvery

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor
    from actorbus.actors.cell import ActorCell
    from actorbus.actors.type_inbox import TypeInbox


class TypeHost:
    """A type registered for lazy activation in this process."""

    def __init__(self, cls: type[Actor], kwargs: dict[str, Any]) -> None:
        self.cls = cls
        self.kwargs = kwargs
        self.subs: list[Subscription] = []
        self.rr = itertools.count()
        self.inbox: TypeInbox | None = None  # its durable messages, when it has any
        self.reading = YieldEvery()  # its shared subscriptions give the loop a turn


class Residents:
    def __init__(self) -> None:
        self.cells: dict[str, list[ActorCell]] = {}  # address -> local replicas
        self.hosts: dict[str, TypeHost] = {}  # type name -> lazily hosted type

    def addresses_of(self, type_name: str) -> list[str]:
        return [a for a in self.cells if a.startswith(type_name + "/")]
