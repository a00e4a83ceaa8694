"""Persistent actor state: where an actor's declared state is kept between its
activations (``actors/state_keeper.py`` loads and saves it around turns).

One interface (:class:`~actorbus.state.store.StateStore`) with two backends: the
embedded default, JetStream key-value on the bus's own NATS
(:class:`~actorbus.state.kv_store.KeyValueStateStore`), and PostgreSQL for teams
whose state lives in a database (:mod:`actorbus.state.postgres_store`, the
``postgres`` extra). Every backend passes the one conformance suite
(``tests/state/test_store_conformance.py``). What a store holds is opaque bytes:
sealed to the actor type's key before it gets there (``state/sealing.py``).
"""

from actorbus.state.kv_store import KeyValueStateStore
from actorbus.state.store import StateSettings, StateStore, StoredState

__all__ = ["KeyValueStateStore", "StateSettings", "StateStore", "StoredState"]
