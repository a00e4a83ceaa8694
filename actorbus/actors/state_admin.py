"""Looking at actor state from outside (``actorbus state ls|get|rm``): which
actors of a type have state, what one holds (opened where this machine holds
the type's key, its size otherwise), and deleting it for good."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actorbus.bus.subjects import Address
from actorbus.codecs.errors import InvalidAddressError, StateError
from actorbus.state.record import StateRecord
from actorbus.state.sealing import is_sealed, open_state, sealed_size

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime


@dataclass(frozen=True)
class StateView:
    """One actor's stored state as seen from here."""

    address: str
    revision: int
    sealed: bool
    size: int  # bytes stored
    version: int | None = None  # None: sealed to a key this process does not hold
    state: dict[str, Any] | None = None
    applied: str | None = None  # the last durable message it reflects: seq@stream

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "address": self.address,
            "revision": self.revision,
            "sealed": self.sealed,
            "size": self.size,
        }
        if self.state is None:
            body["state"] = f"<sealed: {self.size} bytes>"
        else:
            body.update(version=self.version, state=self.state, applied=self.applied)
        return body


def _actor(address: str) -> Address:
    addr = Address.parse(address)
    if addr.key in (None, "*"):
        raise InvalidAddressError(f"state belongs to one actor: give type/key, not {address!r}")
    return addr


async def state_keys(rt: Runtime, type_: str) -> list[str]:
    """The addresses of ``type_``'s actors that have state."""
    Address.parse(type_)  # a type name, validated
    return [f"{type_}/{key}" async for key in rt.state_store().keys(type_)]


async def read_state(rt: Runtime, address: str) -> StateView | None:
    """What ``address`` has stored (None: nothing)."""
    addr = _actor(address)
    stored = await rt.state_store().load(addr.type, addr.key or "")
    if stored is None:
        return None
    where = str(addr)
    sealed = is_sealed(stored.data)
    view = StateView(where, stored.revision, sealed, len(stored.data))

    def key_for(kid: str) -> Any:
        return rt.security.reading_key(addr.type, kid)

    try:
        record = StateRecord.decode(open_state(stored.data, where, key_for), where)
    except StateError:
        if not sealed:
            raise
        return StateView(where, stored.revision, True, sealed_size(stored.data))
    applied = record.applied.header() if record.applied is not None else None
    return StateView(
        view.address, view.revision, sealed, view.size, record.version, record.state, applied
    )


async def remove_state(rt: Runtime, address: str) -> bool:
    """Delete ``address``'s state for good; False when there was none. A running
    activation of it fails its next write (its revision is gone) and stops."""
    addr = _actor(address)
    store = rt.state_store()
    if await store.load(addr.type, addr.key or "") is None:
        return False
    await store.delete(addr.type, addr.key or "")
    return True
