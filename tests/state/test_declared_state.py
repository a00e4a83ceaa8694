"""Declared actor state: loaded before the first message of every activation,
saved when a turn changed it (before the answer), rolled back when a turn
failed, fenced against a stale activation, sealed to the type's key."""

from __future__ import annotations

from typing import Any

import pytest
from _util import raw_member
from pydantic import BaseModel

from actorbus import (
    Actor,
    ActorBusError,
    ActorSystem,
    RemoteError,
    StateConflictError,
    StateError,
    StateTooLargeError,
    handler,
)
from actorbus.state.kv_store import state_bucket, state_entry
from actorbus.testing import eventually

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
    await eventually(  # passivated after idle_timeout (0.3 s) by the sweep
        lambda: "st-keyed/k" not in system.local_actors(), what="passivated"
    )
    assert await system.ask("st-keyed/k", Deposit(amount=1), timeout=WAIT) == 10


async def test_clear_state_really_deletes(make_system: Any) -> None:
    system = await make_system()
    await system.spawn(Account, "c")
    await system.ask("st-account/c", Deposit(amount=4), timeout=WAIT)
    assert await system.ask("st-account/c", "x", intent="close", timeout=WAIT) == 0
    kv = await system.runtime.js.key_value(state_bucket(system.namespace))
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
    return msg, system.runtime.intake.decode(msg, address)


async def test_state_is_sealed_and_written_only_by_its_types_hosts(actorbus_home: Any) -> None:
    """On the secured broker the store holds ciphertext only, and a member for
    another type can neither open the state nor write it."""
    import uuid

    import nats
    import nats.errors

    from actorbus.bus.server import EmbeddedServer, ServerConfig
    from actorbus.codecs.errors import StateError
    from actorbus.security.secure_broker import SecureBroker, join_options
    from actorbus.state.sealing import is_sealed, open_state

    ns = f"s{uuid.uuid4().hex[:8]}"
    broker = SecureBroker()
    async with EmbeddedServer(
        ServerConfig(host="127.0.0.1", extra=broker.server_config([ns]))
    ) as server:
        joined = await join_options(server.url, ns, "host", hosts=["st-account"])
        host = await ActorSystem.connect(server.url, namespace=ns, registry=False, **joined)
        spy = await raw_member(server.url, broker, ns, "spy", ["spy"])
        try:
            await host.spawn(Account, "s")
            assert await host.ask("st-account/s", Deposit(amount=42), timeout=WAIT) == 42
            kv = await spy.jetstream(timeout=1.0).key_value(state_bucket(ns))
            stored = await kv.get(state_entry("st-account", "s"))
            value = stored.value or b""
            assert is_sealed(value)
            assert b"balance" not in value  # the record's field names are sealed too
            with pytest.raises(StateError, match="does not hold"):
                open_state(value, "st-account/s", lambda kid: None)
            with pytest.raises((nats.errors.Error, TimeoutError)):  # refused: no answer
                await kv.put(state_entry("st-account", "s"), b"\x80")
            assert await host.ask("st-account/s", Deposit(amount=1), timeout=WAIT) == 43
        finally:
            await spy.close()
            await host.close(timeout=2.0)


class CentsState(BaseModel):
    cents: int = 0


class AccountInCents(Actor):
    """Version 2 of st-account's state: cents, brought over from version 1."""

    type_name = "st-account"
    state: CentsState
    state_version = 2

    @classmethod
    def migrate_state(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        if version == 1:
            return {"cents": data["balance"] * 100}
        return super().migrate_state(data, version)

    @handler(intent="balance")
    async def balance(self, _: str) -> int:
        return self.state.cents


class AccountWithoutMigration(Actor):
    type_name = "st-account"
    state: CentsState
    state_version = 3
    max_restarts = 0

    @handler(intent="balance")
    async def balance(self, _: str) -> int:
        return self.state.cents


async def test_an_older_state_loads_through_migrate_state_or_names_both_versions(
    make_system: Any,
) -> None:
    system = await make_system()
    await system.spawn(Account, "m")
    await system.ask("st-account/m", Deposit(amount=3), timeout=WAIT)
    await system.stop_actor("st-account/m")
    await system.spawn(AccountInCents, "m")
    assert await system.ask("st-account/m", "?", intent="balance", timeout=WAIT) == 300
    await system.stop_actor("st-account/m")
    with pytest.raises(ActorBusError, match=r"StateVersionError.*version 2 .* version 3"):
        await system.spawn(AccountWithoutMigration, "m")


class Hoard(BaseModel):
    items: list[str] = []


class Hoarder(Actor):
    type_name = "st-hoarder"
    state: Hoard

    @handler
    async def add(self, d: Deposit) -> int:
        self.state.items.append("x" * d.amount)
        return len(self.state.items)


async def test_a_state_too_large_for_its_store_is_a_typed_error_and_nothing_changes(
    make_system: Any,
) -> None:
    system = await make_system()
    await system.spawn(Hoarder, "h")
    assert await system.ask("st-hoarder/h", Deposit(amount=10), timeout=WAIT) == 1
    with pytest.raises(StateTooLargeError, match="at most"):
        await system.ask("st-hoarder/h", Deposit(amount=2 * 1024 * 1024), timeout=WAIT)
    assert await system.ask("st-hoarder/h", Deposit(amount=10), timeout=WAIT) == 2  # undone


async def test_the_account_keeps_its_balance_in_postgres(
    make_system: Any, postgres_dsn: str
) -> None:
    from actorbus import StateSettings
    from actorbus.state.postgres_store import PostgresStateStore

    system = await make_system()
    store = PostgresStateStore(postgres_dsn, namespace=system.namespace)
    db = await make_system(state=StateSettings(store=store))
    await db.spawn(Account, "pg")
    assert await db.ask("st-account/pg", Deposit(amount=8), timeout=WAIT) == 8
    await db.stop_actor("st-account/pg")
    again = await make_system(
        state=StateSettings(store=PostgresStateStore(postgres_dsn, namespace=system.namespace))
    )
    await again.spawn(Account, "pg")
    assert await again.ask("st-account/pg", Deposit(amount=1), timeout=WAIT) == 9
    wrong = await make_system(state=StateSettings(store=PostgresStateStore(postgres_dsn)))
    with pytest.raises(StateError, match="namespace"):
        wrong.runtime.state_store()


class DurableHoarder(Hoarder):
    type_name = "st-dhoarder"
    durable = True


async def test_a_durable_turn_whose_state_write_failed_is_not_taken_as_applied(
    make_system: Any,
) -> None:
    """The write of a durable turn is refused (too large): the message is not
    marked applied, so its retries run the handler again (and fail again) until it
    is dead-lettered; it is never acked as done unseen."""
    from actorbus import DurableSettings
    from actorbus.testing import eventually

    fast = DurableSettings(backoff=(0.05, 0.1), ack_wait=5.0)
    system = await make_system(durable=fast)
    await system.spawn(DurableHoarder, "d")
    await system.tell("st-dhoarder/d", Deposit(amount=2 * 1024 * 1024), durable=True)

    async def dead() -> list[Any]:
        letters: list[Any] = await system.dead_letters("st-dhoarder/d")
        return letters

    [letter] = await eventually(dead, what="the too-large turn dead-lettered")
    assert letter.code == "E_STATE_TOO_LARGE"
    assert letter.attempts == 3  # each attempt ran the handler: none was skipped
    assert await system.ask("st-dhoarder/d", Deposit(amount=1), timeout=WAIT) == 1
