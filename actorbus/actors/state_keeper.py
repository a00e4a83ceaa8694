"""One activation's declared state: loaded and claimed before its first message,
saved at the end of each turn that changed it, before the turn's answer goes out.

- Activation loads the stored state (or the model's defaults), brings an older
  version's through the type's ``migrate_state``, and writes it back as its own
  (a claim): from then on an older activation of the same actor (one that lost
  its lease in a partition) fails its next write with
  :class:`~actorbus.codecs.errors.StateConflictError` and stops, rather than
  overwrite the newer state.
- A turn that fails leaves no trace: the state goes back to what was saved.
- A durable turn commits its state, its held sends and the message's position as
  one write (``state/record.py``); the message is acked after the sends went out.
  A redelivered message the state already reflects is not run again.

Every write is compare-and-set on the store's revision and sealed to the type's
key (``state/sealing.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from actorbus.actors import faults
from actorbus.actors.outbox import Outbox, current_outbox
from actorbus.codecs.envelope import new_id
from actorbus.codecs.errors import StateVersionError
from actorbus.codecs.wire import pack, unpack
from actorbus.security.identity import Identity
from actorbus.state.record import Position, StateRecord
from actorbus.state.sealing import StateSeal, open_state
from actorbus.state.store import StateStore
from actorbus.telemetry import OFF, Telemetry, metrics as meters, spans

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.state")


class StateKeeper:
    """The state of one activation of ``cls`` at ``key``."""

    def __init__(
        self,
        store: StateStore,
        cls: type[Actor],
        key: str,
        seal: StateSeal,
        key_for: Callable[[str], Identity | None],
        telemetry: Telemetry = OFF,
    ) -> None:
        assert cls.state_model is not None
        self.store = store
        self.cls = cls
        self.model: type[BaseModel] = cls.state_model
        self.key = key
        self.address = f"{cls.type_name}/{key}"
        self._seal = seal
        self._key_for = key_for
        self._telemetry = telemetry
        self._owner = new_id()
        self._revision: int | None = None
        self._record = StateRecord(cls.state_version, {}, self._owner)
        self._saved = b""  # the state as last saved, packed: what a turn is compared with

    async def activate(self) -> BaseModel:
        """Load (or start from the defaults), migrate, and claim the state."""
        if self._telemetry.tracing:
            with spans.state_operation("load", self.address) as span:
                stored = await self.store.load(self.cls.type_name, self.key)
                span.set_attribute("actorbus.state.size", len(stored.data) if stored else 0)
        else:
            stored = await self.store.load(self.cls.type_name, self.key)
        if stored is None:
            state = self.model()
        else:
            record = StateRecord.decode(
                open_state(stored.data, self.address, self._key_for), self.address
            )
            state = self._current(record)
            self._record, self._revision = record, stored.revision
        # The claim keeps the last applied message and its sends: one acked by
        # nobody yet is still known as applied after a crash.
        dumped = state.model_dump(mode="json")
        await self._write(dumped, pack(dumped), self._record.applied, self._record.sends)
        return state

    def _current(self, record: StateRecord) -> BaseModel:
        """A stored state as this version's model (through ``migrate_state``)."""
        version, data = record.version, record.state
        if version != self.cls.state_version:
            data = self.cls.migrate_state(data, version)
        try:
            return self.model.model_validate(data)
        except ValidationError as exc:
            raise StateVersionError(
                f"the stored state of {self.address} (version {version}) does not load as "
                f"{self.model.__name__} version {self.cls.state_version}: {exc.errors()[:3]}; "
                "raise state_version and bring it over in migrate_state()"
            ) from None

    def applied(self, position: Position) -> bool:
        """Is the durable message at ``position`` in the state already? Then its
        recorded sends go out again (into the turn's outbox: the stream drops
        repeats by id) and it is not run again."""
        if not self._record.covers(position):
            return False
        box = current_outbox.get()
        if box is not None and self._record.applied == position:
            box.held = Outbox.of_rows(self._record.sends).held
        log.info("%s: the durable message at %s is in its state already", self.address, position)
        return True

    async def end_turn(
        self, inst: Actor, failed: Exception | None, position: Position | None
    ) -> None:
        """After a turn: put the state back when it failed; else save it if it
        changed (a durable turn, at ``position``, with its held sends)."""
        if failed is not None:
            inst.state = self.rolled_back()
            return
        box = current_outbox.get() if position is not None else None
        await self.save(inst.state, position, box.rows() if box is not None else None)

    async def save(
        self,
        state: BaseModel,
        position: Position | None = None,
        sends: list[list[Any]] | None = None,
    ) -> None:
        """Save ``state`` if it changed; a durable turn's (``position``) goes with
        its sends and position."""
        dumped = state.model_dump(mode="json")
        packed = pack(dumped)
        if packed == self._saved and not sends:
            return
        if position is None:
            await self._write(dumped, packed, self._record.applied, self._record.sends)
            return
        faults.reached(faults.BEFORE_STATE_WRITE)
        await self._write(dumped, packed, position, list(sends or []))
        faults.reached(faults.AFTER_STATE_WRITE)

    def rolled_back(self) -> BaseModel:
        """The state as last saved: what a failed turn leaves."""
        return self.model.model_validate(unpack(self._saved))

    async def clear(self) -> BaseModel:
        """Delete the stored state for good; the instance starts again from the
        model's defaults (not written until a turn changes them)."""
        await self.store.delete(self.cls.type_name, self.key)
        self._revision = None
        self._record = StateRecord(self.cls.state_version, {}, self._owner)
        state = self.model()
        self._saved = pack(state.model_dump(mode="json"))
        return state

    async def _write(
        self,
        dumped: dict[str, Any],
        packed: bytes,
        applied: Position | None,
        sends: list[list[Any]],
    ) -> None:
        """Write a new record; what this keeper knows changes only once it is
        stored (a refused write leaves the last saved record in force)."""
        record = StateRecord(self.cls.state_version, dumped, self._owner, applied, sends)
        value = self._seal.seal(self.address, record.encode())
        telemetry = self._telemetry
        if not telemetry.on:
            self._revision = await self._save(value)
        else:
            started = time.perf_counter()
            if telemetry.tracing:
                with spans.state_operation("save", self.address) as span:
                    span.set_attribute("actorbus.state.size", len(value))
                    self._revision = await self._save(value)
            else:
                self._revision = await self._save(value)
            if telemetry.metrics:
                labels = {"actorbus.destination.type": self.cls.type_name}
                meters.state_size.record(len(value), labels)
                meters.state_write_duration.record(time.perf_counter() - started, labels)
        self._record, self._saved = record, packed

    async def _save(self, value: bytes) -> int:
        return await self.store.save(self.cls.type_name, self.key, value, self._revision)


def keeper_for(rt: Runtime, cls: type[Actor], key: str) -> StateKeeper:
    """The keeper of one activation's state, on the system's store, sealing to the
    type's key when the system is secured."""
    security = rt.security
    seal = StateSeal(security.state_key(cls.type_name))
    return StateKeeper(rt.state_store(), cls, key, seal, security.held_key, rt.telemetry)
