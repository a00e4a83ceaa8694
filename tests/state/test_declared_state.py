"""Declared actor state: loaded before the first message of every activation,
saved when a turn changed it (before the answer), rolled back when a turn
failed, fenced against a stale activation, sealed to the type's key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, RemoteError, StateConflictError, handler
from actorbus.state.kv_store import state_bucket, state_entry

WAIT = 10.0


class Deposit(BaseModel):
    amount: int


class AccountState(BaseModel):
    balance: int = 0
    history: list[int] = []


class Account(Actor):
    type_name = "st-account"
    state: AccountState

    @handler
    async def deposit(self, d: Deposit) -> int:
        self.state.balance += d.amount
        self.state.history.append(d.amount)
        if d.amount < 0:
            raise ValueError("no overdrafts")  # after changing the state: rolled back
        return self.state.balance

    @handler(intent="balance")
    async def balance(self, _: str) -> int:
        return self.state.balance

    @handler(intent="close")
    async def close(self, _: str) -> int:
        await self.clear_state()
        return self.state.balance


class KeyedAccount(Account):
    type_name = "st-keyed"
    keyed = True
    idle_timeout = 0.3


async def test_state_survives_a_stop_and_a_new_process(make_system: Any) -> None:
    system = await make_system()
    await system.spawn(Account, "a")
    assert await system.ask("st-account/a", Deposit(amount=5), timeout=WAIT) == 5
    assert await system.ask("st-account/a", Deposit(amount=7), timeout=WAIT) == 12
    await system.stop_actor("st-account/a")
    other = await make_system()  # another process: nothing in memory
    await other.spawn(Account, "a")
    assert await other.ask("st-account/a", "?", intent="balance", timeout=WAIT) == 12


async def test_a_failed_turn_leaves_no_trace(make_system: Any) -> None:
    system = await make_system()
    await system.spawn(Account, "b")
    assert await system.ask("st-account/b", Deposit(amount=3), timeout=WAIT) == 3
    with pytest.raises(RemoteError, match="no overdrafts"):
        await system.ask("st-account/b", Deposit(amount=-1), timeout=WAIT)
    assert await system.ask("st-account/b", "?", intent="balance", timeout=WAIT) == 3
    await system.stop_actor("st-account/b")
    await system.spawn(Account, "b")
    assert await system.ask("st-account/b", Deposit(amount=1), timeout=WAIT) == 4


async def test_a_keyed_actor_keeps_its_state_across_passivation(make_system: Any) -> None:
    system = await make_system()
    await system.register(KeyedAccount)
    assert await system.ask("st-keyed/k", Deposit(amount=9), timeout=WAIT) == 9
    for _ in range(100):  # passivated after idle_timeout (0.3 s) by the sweep
        if "st-keyed/k" not in system.local_actors():
            break
        await asyncio.sleep(0.05)
    assert "st-keyed/k" not in system.local_actors()
    assert await system.ask("st-keyed/k", Deposit(amount=1), timeout=WAIT) == 10


async def test_clear_state_really_deletes(make_system: Any) -> None:
    system = await make_system()
    await system.spawn(Account, "c")
    await system.ask("st-account/c", Deposit(amount=4), timeout=WAIT)
    assert await system.ask("st-account/c", "x", intent="close", timeout=WAIT) == 0
    kv = await system.js.key_value(state_bucket(system.namespace))
    history = await kv.history(state_entry("st-account", "c"))
    assert all(not entry.value for entry in history)  # no revision keeps the old state


async def test_a_stale_activation_cannot_overwrite_a_newer_state(make_system: Any) -> None:
    """Two activations of one actor (the first lost its lease in a partition and
    does not know): the newer one claims the state as it starts, so the older
    one's next write is refused and it stops, loudly; the newer state stands."""
    old_process, new_process = await make_system(), await make_system()
    await old_process.spawn(Account, "d")
    assert await old_process.ask("st-account/d", Deposit(amount=1), timeout=WAIT) == 1
    await new_process.spawn(Account, "d")  # both now answer st-account/d
    new_cell = new_process.hosting.residents.cells["st-account/d"][0]
    old_cell = old_process.hosting.residents.cells["st-account/d"][0]
    assert new_cell.instance.state.balance == 1
    await new_cell.deliver_durable(*_local(new_process, "st-account/d", Deposit(amount=10)))
    failed = await old_cell.deliver_durable(*_local(old_process, "st-account/d", Deposit(amount=5)))
    assert isinstance(failed, StateConflictError)
    assert old_cell.state == "stopped"
    assert new_cell.instance.state.balance == 11
    third = await make_system()
    await third.spawn(Account, "d")
    assert await third.ask("st-account/d", "?", intent="balance", timeout=WAIT) == 11


def _local(system: ActorSystem, address: str, message: Any) -> tuple[Any, Any]:
    """A message as a cell receives it (no reply subject), decoded."""
    from nats.aio.msg import Msg

    from actorbus.actors.sending import SendOptions

    out = system.sender.encode(address, message, SendOptions())
    msg = Msg(_client=system.nc, subject="x", data=out.body, headers=None)
    from actorbus.bus.client import LazyHeaders

    msg.headers = dict(LazyHeaders(out.headers).items())
    return msg, system.replies.decode(msg, address)
