"""A durable turn's state change, its sends and its ack commit as one: a host
process SIGKILLed at any point of a turn (before the state write, between the
write and the sends, between the sends and the ack), or from outside at random,
leaves the state reflecting each message exactly once and each send stored
exactly once."""

from __future__ import annotations

import asyncio
import random
import signal
from typing import Any

import pytest
from _actors import Balance, Deposit, Ledger, Vault
from _util import run_host

from actorbus.actors import faults
from actorbus.testing import queue_drained

WAIT = 30.0
ACK_WAIT = 1.0  # a killed host's message comes back this fast


async def _all_arrived(got: list[int], changed: asyncio.Event, total: int) -> None:
    async with asyncio.timeout(60):
        while len(set(got)) < total:
            changed.clear()
            await changed.wait()


async def _ledger(system: Any) -> tuple[list[int], asyncio.Event]:
    got: list[int] = []
    changed = asyncio.Event()
    await system.spawn(Ledger, "l", got=got, changed=changed)
    return got, changed


@pytest.mark.parametrize(
    "point", [faults.BEFORE_STATE_WRITE, faults.AFTER_STATE_WRITE, faults.AFTER_SENDS]
)
async def test_a_host_killed_inside_a_turn_applies_and_sends_each_message_once(
    make_system: Any, nats_server: Any, ns: str, point: str
) -> None:
    system = await make_system()
    got, changed = await _ledger(system)
    total = 8
    for n in range(total):
        await system.tell("st-vault/a", Deposit(n=n, amount=n + 1), durable=True)
    kill = {"ACTORBUS_TEST_KILL_AT": f"{point}:3"}
    async with run_host(
        "_actors:Vault", nats_server.url, ns, "a", ack_wait=ACK_WAIT, env=kill
    ) as h:
        async with asyncio.timeout(WAIT):
            await h.proc.wait()  # it killed itself at the third turn's point
        assert h.proc.returncode == -signal.SIGKILL
    async with run_host("_actors:Vault", nats_server.url, ns, "a", ack_wait=ACK_WAIT):
        await _all_arrived(got, changed, total)
        state = await system.ask("st-vault/a", "?", intent="balance", returns=Balance)
        assert state.balance == sum(n + 1 for n in range(total))
        assert state.seen == total
        await queue_drained(system, "st-vault/a")
    await queue_drained(system, "st-ledger/l")
    assert sorted(got) == list(range(total))  # each send stored and handled once


async def test_outside_kills_at_random_lose_and_repeat_nothing(
    make_system: Any, nats_server: Any, ns: str
) -> None:
    """Deposits stream in while the host is SIGKILLed three times at random
    moments and started again: the balance is exact, every send arrived once."""
    system = await make_system()
    got, changed = await _ledger(system)
    total = 300
    rng = random.Random(7)

    async def deposits() -> None:
        for n in range(total):
            await system.tell("st-vault/r", Deposit(n=n, amount=1 + n % 5), durable=True)

    sending = asyncio.create_task(deposits())
    for _ in range(3):
        async with run_host("_actors:Vault", nats_server.url, ns, "r", ack_wait=ACK_WAIT) as h:
            await asyncio.sleep(rng.uniform(0.3, 1.0))  # the moment of the kill: at random
            h.proc.send_signal(signal.SIGKILL)
            await h.proc.wait()
    await sending
    async with run_host("_actors:Vault", nats_server.url, ns, "r", ack_wait=ACK_WAIT):
        await _all_arrived(got, changed, total)
        state = await system.ask("st-vault/r", "?", intent="balance", returns=Balance)
        await queue_drained(system, "st-vault/r")
    await queue_drained(system, "st-ledger/l")
    assert state.balance == sum(1 + n % 5 for n in range(total))
    assert state.seen == total
    assert sorted(got) == list(range(total))


async def test_a_broker_sigkilled_under_sealed_durable_turns_loses_and_refuses_nothing(
    tmp_path: Any, ns: str
) -> None:
    """The broker is SIGKILLed while sealed deposits stream into a lazily hosted
    type with state, and comes back on its store. Deliveries it repeats (its
    consumers' progress since the last sync is gone) are the same stored messages,
    not replays: none is refused or dead-lettered, and every deposit counts once."""
    from _util import own_broker

    from actorbus import DurableSettings, SecuritySettings

    secured = SecuritySettings(home=tmp_path / "home")
    fast = DurableSettings(ack_wait=ACK_WAIT)
    async with own_broker(tmp_path) as broker:
        host = await broker.system(ns, security=secured, durable=fast)
        got, changed = await _ledger(host)
        await host.register(Vault)
        sender = await broker.system(ns, security=secured, durable=fast)
        total = 600

        async def deposits() -> None:
            for n in range(total):
                await sender.tell("st-vault/a", Deposit(n=n, amount=1), durable=True, timeout=WAIT)

        sending = asyncio.create_task(deposits())
        try:
            async with asyncio.timeout(WAIT):
                while len(got) < total // 3:  # well under way
                    changed.clear()
                    await changed.wait()
            broker.kill_and_restart()
            async with asyncio.timeout(WAIT):
                await sending
        finally:
            sending.cancel()
        await _all_arrived(got, changed, total)
        state = await host.ask("st-vault/a", "?", intent="balance", returns=Balance)
        assert (state.balance, state.seen) == (total, total)
        assert await host.dead_letters("st-vault/a") == []
        assert await host.dead_letters("st-ledger/l") == []
        assert sorted(set(got)) == list(range(total))
