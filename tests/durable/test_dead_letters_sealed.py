"""Dead letters on a secured broker: a sealed message replayed long after it was
sealed, and who may delete a dead letter."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, ClassVar

import pytest

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.codecs.errors import AuthError
from actorbus.testing import TestBroker, eventually

FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=5.0)
SKEW_MS = 1_000  # the receivers' clock-skew allowance: a dead letter is old within a test


class Till(Actor):
    """Fails while broken; counts what it took."""

    type_name = "till"
    broken: ClassVar[bool] = True
    taken: ClassVar[list[int]] = []
    arrived: ClassVar[asyncio.Event]

    @handler(durable=True)
    async def take(self, amount: dict[str, Any]) -> None:
        if Till.broken:
            raise RuntimeError("the till is broken")
        Till.taken.append(int(amount["n"]))
        Till.arrived.set()


class Cashier(Actor):
    """Sends to the till from a handler: sealed by the cashier type's key."""

    type_name = "cashier"

    @handler
    async def ring(self, amount: dict[str, Any]) -> str:
        await self.tell("till/1", amount, durable=True)
        return "rung"


async def test_a_sealed_dead_letter_is_stamped_again_by_its_senders_host() -> None:
    """Replayed after the receivers' skew allowance, the message is stamped again
    with its sender's key (held by the cashier's host) and taken; a member may
    not delete a dead letter, and says so (an admin may)."""
    Till.broken, Till.taken, Till.arrived = True, [], asyncio.Event()
    with TestBroker() as broker:
        joined = await broker.join("dl")
        security = dataclasses.replace(joined["security"], skew_ms=SKEW_MS)
        options: dict[str, Any] = {**joined, "security": security, "durable": FAST}
        host = await ActorSystem.connect(broker.url, namespace="dl", **options)
        try:
            await host.register(Till)
            await host.register(Cashier)
            assert await host.ask("cashier/1", {"n": 7}) == "rung"
            # retried, then dead-lettered: no event crosses that stream
            letters = await eventually(lambda: host.dead_letters("till/1"), 20, "a dead letter")
            await asyncio.sleep(SKEW_MS / 1000 + 0.2)  # older than the receiver allows
            Till.broken = False
            with pytest.raises(AuthError, match=r"sent again but is still listed.*its admin may"):
                await host.replay_dead_letter(letters[0].seq)
            await asyncio.wait_for(Till.arrived.wait(), 10)
            assert Till.taken == [7]  # stamped again: taken, not refused as played back
            with pytest.raises(AuthError, match="a member may not delete"):
                await host.drop_dead_letter(letters[0].seq)
        finally:
            await host.close()
