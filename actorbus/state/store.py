"""The one interface every state backend implements, and its settings.

A store keeps, per actor (type and key), one opaque value and a revision that
grows with every write. Writes are compare-and-set on the revision: a writer says
which revision it last saw (None: that there is none yet), and a write from an
activation that lost to a newer one fails with
:class:`~actorbus.codecs.errors.StateConflictError` instead of overwriting it
(Orleans' ETags, Dapr's concurrency control). Values larger than ``max_size``
are refused with :class:`~actorbus.codecs.errors.StateTooLargeError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from actorbus.codecs.errors import StateConflictError


def revision_conflict(type_: str, key: str, revision: int | None) -> StateConflictError:
    """What a store raises for a write whose revision is no longer the stored one:
    another activation wrote since, or the state was deleted (``actorbus state
    rm``), which a store cannot tell apart from its revision alone."""
    read = "nothing stored" if revision is None else f"revision {revision}"
    return StateConflictError(
        f"the state of {type_}/{key} was written by another activation, or deleted, "
        f"since this one read {read}"
    )


@dataclass(frozen=True)
class StoredState:
    """A value as the store holds it."""

    data: bytes
    revision: int


@dataclass(frozen=True)
class StateSettings:
    """How actor state is kept (``ActorSystem.connect(state=...)``).

    - ``store``: a backend of your own (a :class:`PostgresStateStore`, say);
      None: JetStream key-value on the bus's NATS, made on first use.
    - ``history``: revisions the key-value store keeps per actor (1: the current
      state only; more for forensics, at that many times the storage).
    - ``ttl``: seconds after its last write when an actor's state is dropped as
      abandoned (None: kept until ``clear_state()``).
    - ``replicas``: the key-value bucket's replicas (None: the durable
      settings' own, 3 on a cluster).
    """

    store: StateStore | None = None
    history: int = 1
    ttl: float | None = None
    replicas: int | None = None


@runtime_checkable
class StateStore(Protocol):
    """Where actor state is kept. Each call names the actor type and key."""

    @property
    def max_size(self) -> int:
        """The largest value (bytes) one entry takes."""
        ...

    async def load(self, type_: str, key: str) -> StoredState | None:
        """The current value, or None when there is none (never written, cleared,
        or dropped by the ttl)."""
        ...

    async def save(self, type_: str, key: str, data: bytes, revision: int | None) -> int:
        """Write ``data`` if the current revision is ``revision`` (None: if there
        is no value yet); return the new revision. StateConflictError otherwise,
        StateTooLargeError when ``data`` exceeds ``max_size``."""
        ...

    async def delete(self, type_: str, key: str) -> None:
        """Remove the value for good (no revision of it stays readable)."""
        ...

    def keys(self, type_: str) -> AsyncIterator[str]:
        """The keys of ``type_`` that have a value."""
        ...

    async def close(self) -> None:
        """Let go of connections (bounded); the store is not used after."""
        ...
