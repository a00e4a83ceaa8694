"""Durable delivery: stored before the send returns, delivered at least once (also to
an actor that was not running), acked after success, retried, dead-lettered."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from pydantic import BaseModel

from actorbus import Actor, ActorBusError, InvalidAddressError, handler
from actorbus.bus.jetstream import DurableSettings, dlq_stream_name

FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=5.0)
WAIT = 10.0


class Entry(BaseModel):
    n: int


class Ledger(Actor):
    """Records what it handled; fails on demand to exercise retries."""

    type_name = "ledger"
    durable = True

    def __init__(self, seen: list[int], want: int, done: asyncio.Event, fail: dict[int, int]):
        self.seen = seen
        self.want = want
        self.done = done
        self.fail = fail  # n -> how many more times to fail (-1: always)

    @handler
    async def add(self, e: Entry) -> None:
        left = self.fail.get(e.n, 0)
        if left:
            self.fail[e.n] = left - 1 if left > 0 else left
            raise RuntimeError(f"entry {e.n} is not welcome yet")
        self.seen.append(e.n)
        if len(self.seen) >= self.want:
            self.done.set()


async def spawn_ledger(system: Any, key: str, want: int, fail: dict[int, int] | None = None):
    seen: list[int] = []
    done = asyncio.Event()
    await system.spawn(Ledger, key, seen=seen, want=want, done=done, fail=fail or {})
    return seen, done


async def test_messages_sent_while_the_actor_is_down_arrive_in_order(make_system) -> None:
    system = await make_system(durable=FAST)
    for n in range(300):
        await system.tell("ledger/offline", Entry(n=n), durable=True)
    seen, done = await spawn_ledger(system, "offline", want=300)
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == list(range(300))


async def test_a_failing_message_is_retried_until_it_succeeds_and_order_holds(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    seen, done = await spawn_ledger(system, "retry", want=3, fail={1: 2})
    for n in range(3):
        await system.tell("ledger/retry", Entry(n=n), durable=True)
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == [0, 1, 2]


async def test_poison_goes_to_dead_letters_after_its_attempts_and_blocks_nothing(
    make_system, ns: str
) -> None:
    system = await make_system(durable=FAST)
    seen, done = await spawn_ledger(system, "poison", want=2, fail={1: -1})
    for n in range(3):
        await system.tell("ledger/poison", Entry(n=n), durable=True)
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == [0, 2]
    record = await dead_letter(system, ns, "ledger/poison")
    assert record["attempts"] == FAST.max_deliver
    assert record["code"] == "E_HANDLER"
    assert "not welcome" in record["reason"]
    original = msgpack.unpackb(record["original"])
    assert original["content"] == {"n": 1}


async def test_a_payload_that_cannot_validate_is_dead_lettered_at_once(
    make_system, ns: str
) -> None:
    system = await make_system(durable=FAST)
    seen, done = await spawn_ledger(system, "invalid", want=1)
    await system.tell("ledger/invalid", {"n": "not a number"}, intent="Entry", durable=True)
    await system.tell("ledger/invalid", Entry(n=7), durable=True)
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == [7]
    record = await dead_letter(system, ns, "ledger/invalid")
    assert record["attempts"] == 1
    assert record["code"] == "E_VALIDATION"


async def test_a_repeated_message_id_is_stored_once(make_system) -> None:
    system = await make_system(durable=FAST)
    await system.durable_ready()
    out = system._encode("ledger/dedup", Entry(n=1), None, None, None, None, durable=True)
    for _ in range(3):  # a sender retrying after a lost publish-ack
        await system.mux.request(
            system.subjects.durable(_addr("ledger/dedup")), out.body, out.headers, 5
        )
    await system.tell("ledger/dedup", Entry(n=2), durable=True)
    seen, done = await spawn_ledger(system, "dedup", want=2)
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == [1, 2]


async def test_an_expired_message_is_dropped_not_delivered_late(make_system) -> None:
    system = await make_system(durable=FAST)
    await system.tell("ledger/ttl", Entry(n=1), durable=True, ttl_ms=1)
    await asyncio.sleep(0.01)  # let the 1 ms ttl pass: the point of this test is time
    await system.tell("ledger/ttl", Entry(n=2), durable=True)
    seen, done = await spawn_ledger(system, "ttl", want=1)
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == [2]
    inbox = next(iter(system._inboxes.values()))
    assert inbox.expired == 1


async def test_durable_sends_need_a_keyed_address(system) -> None:
    with pytest.raises(InvalidAddressError, match="type/key"):
        await system.tell("ledger", Entry(n=1), durable=True)


async def test_durable_needs_jetstream(tmp_path) -> None:
    from actorbus import ActorSystem
    from actorbus.bus.server import EmbeddedServer, ServerConfig

    with EmbeddedServer(ServerConfig(jetstream=False)) as server:
        system = await ActorSystem.connect(server.url)
        try:
            with pytest.raises(ActorBusError, match="needs JetStream"):
                await system.tell("ledger/x", Entry(n=1), durable=True)
        finally:
            await system.close()


def _addr(text: str) -> Any:
    from actorbus.bus.subjects import Address

    return Address.parse(text)


async def dead_letter(system: Any, ns: str, address: str) -> dict[str, Any]:
    msg = await system.js.get_last_msg(
        dlq_stream_name(ns), system.subjects.dead_letter(_addr(address))
    )
    record: dict[str, Any] = msgpack.unpackb(msg.data)
    return record
