"""Topics for actors that exist only in this process (spawned under a generated
key, keyed): one shared subscription per topic and type, each member still
getting each message once, in order, within its own mailbox bound; addresses
named by their spawner keep a subscription of their own (queue group), so
their replicas in other processes still share each message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _util import WAIT
from pydantic import BaseModel

from actorbus import Actor, handler
from actorbus.testing import eventually

pytestmark = pytest.mark.transports("nats", "local")

TOPIC = "wire.*"


class Story(BaseModel):
    seq: int


class Listener(Actor):
    type_name = "listener"

    def __init__(self, seen: dict[str, list[int]], hold: asyncio.Event | None = None) -> None:
        self.seen, self.hold = seen, hold

    @handler(topic=TOPIC)
    async def story(self, item: Story) -> None:
        if self.hold is not None and item.seq == 0:
            await self.hold.wait()  # this member is slow; the others must not wait for it
        self.seen.setdefault(self.address, []).append(item.seq)


class Tiny(Listener):
    type_name = "tiny-listener"
    mailbox_size = 3


class KeyedListener(Actor):
    type_name = "keyed-listener"
    keyed = True
    idle_timeout = 0.3
    seen: dict[str, list[int]] = {}

    @handler
    async def wake(self, _: dict[str, Any]) -> None:
        return None

    @handler(topic=TOPIC)
    async def story(self, item: Story) -> None:
        KeyedListener.seen.setdefault(self.address, []).append(item.seq)


def everyone_has(seen: dict[str, list[int]], addresses: list[str], n: int) -> bool:
    return all(len(seen.get(a, [])) >= n for a in addresses)


async def test_actors_spawned_under_generated_keys_share_one_subscription(system: Any) -> None:
    seen: dict[str, list[int]] = {}
    refs = [await system.spawn(Listener, seen=seen) for _ in range(40)]
    addresses = [ref.address for ref in refs]
    assert system.hosting.fanout.members(TOPIC, "listener") == set(addresses)
    for i in range(20):
        await system.publish("wire.world", Story(seq=i))
    await eventually(lambda: everyone_has(seen, addresses, 20), what="every story to all 40")
    await system.publish("wire.world", Story(seq=99))  # a marker: nothing more came before it
    await eventually(lambda: everyone_has(seen, addresses, 21), what="the marker")
    assert seen == {a: [*range(20), 99] for a in addresses}  # once each, in order


async def test_a_slow_member_holds_up_no_other(system: Any) -> None:
    seen: dict[str, list[int]] = {}
    hold = asyncio.Event()
    slow = await system.spawn(Listener, seen=seen, hold=hold)
    quick = await system.spawn(Listener, seen=seen)
    for i in range(5):
        await system.publish("wire.local", Story(seq=i))
    await eventually(lambda: len(seen.get(quick.address, [])) == 5, what="the quick member's 5")
    assert slow.address not in seen  # still in its first story
    hold.set()
    await eventually(lambda: len(seen.get(slow.address, [])) == 5, what="the slow member's 5")
    assert seen[slow.address] == list(range(5))


async def test_a_member_past_its_mailbox_bound_drops_and_counts_its_own(system: Any) -> None:
    seen: dict[str, list[int]] = {}
    hold = asyncio.Event()
    full = await system.spawn(Tiny, seen=seen, hold=hold)
    free = await system.spawn(Tiny, seen=seen)
    n = 20
    for i in range(n):  # one at a time: the free member keeps up, the held one cannot
        await system.publish("wire.flood", Story(seq=i))
        await eventually(lambda i=i: len(seen.get(free.address, [])) == i + 1, what=f"story {i}")
    dropped = system.runtime.mailboxes.dropped
    await eventually(lambda: dropped.get(full.address, 0) > 0, what="the full member's drops")
    hold.set()
    await eventually(
        lambda: len(seen.get(full.address, [])) + dropped[full.address] == n,
        what="each story handled or counted",
    )
    assert len(seen[full.address]) <= Tiny.mailbox_size + 1  # the one in hand and the bound
    assert free.address not in dropped


async def test_replicas_under_a_generated_key_share_each_message(system: Any) -> None:
    seen: dict[str, list[int]] = {}
    ref = await system.spawn(Listener, replicas=3, seen=seen)
    n = 30
    for i in range(n):
        await system.publish("wire.pool", Story(seq=i))
    await eventually(lambda: len(seen.get(ref.address, [])) >= n, what="all 30")
    await system.publish("wire.pool", Story(seq=99))
    await eventually(lambda: seen[ref.address][-1:] == [99], what="the marker")
    assert sorted(seen[ref.address]) == [*range(n), 99]  # none lost, none twice


async def test_a_named_address_in_two_processes_still_takes_each_message_once(
    system: Any, make_system: Any
) -> None:
    seen: dict[str, list[int]] = {}
    other = await make_system()
    await system.spawn(Listener, "desk", seen=seen)
    await other.spawn(Listener, "desk", seen=seen)
    assert not system.hosting.fanout.members(TOPIC, "listener")  # its own queue group
    n = 40
    for i in range(n):
        await system.publish("wire.desk", Story(seq=i))
    await eventually(lambda: len(seen.get("listener/desk", [])) >= n, what="all 40")
    await system.publish("wire.desk", Story(seq=99))
    await eventually(lambda: 99 in seen["listener/desk"], what="the marker")
    assert sorted(seen["listener/desk"]) == [*range(n), 99]


async def test_keyed_actors_share_a_subscription_and_give_it_back_when_passivated(
    system: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(KeyedListener, "seen", {})
    await system.register(KeyedListener)
    keys = [f"keyed-listener/k{i}" for i in range(5)]
    for address in keys:
        await system.ask(address, {})
    assert system.hosting.fanout.members(TOPIC, "keyed-listener") == set(keys)
    await system.publish("wire.keyed", Story(seq=1))
    await eventually(lambda: everyone_has(KeyedListener.seen, keys, 1), what="the story to all 5")
    assert all(KeyedListener.seen[a] == [1] for a in keys)
    await eventually(  # passivated: members gone, the subscription given back
        lambda: not system.hosting.fanout.members(TOPIC, "keyed-listener"),
        what="the idle keyed actors leaving",
        timeout=WAIT,
    )
    await system.publish("wire.keyed", Story(seq=2))
    await system.ask(keys[0], {})  # active again: a member again
    await system.publish("wire.keyed", Story(seq=3))
    await eventually(lambda: KeyedListener.seen[keys[0]][-1:] == [3], what="the next story")
    assert KeyedListener.seen[keys[0]] == [1, 3]  # nothing while it was passivated
