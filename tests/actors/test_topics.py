"""Pub/sub topics: handlers subscribed with topic=, wildcards, fan-out per address,
one delivery per address across replicas."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, NamedTuple

import pytest
from _util import WAIT, barrier
from pydantic import BaseModel

from actorbus import Actor, Encoding, Envelope, InvalidAddressError, handler


class TpNews(BaseModel):
    seq: int


class TpAlert(BaseModel):
    seq: int


class Got(NamedTuple):
    key: str
    instance: int
    dst: str
    seq: int


class Reader(Actor):
    type_name = "reader"

    def __init__(self, inbox: asyncio.Queue[Got]) -> None:
        self.inbox = inbox

    def _record(self, seq: int) -> None:
        self.inbox.put_nowait(Got(self.key, id(self), self.envelope.dst, seq))

    @handler(topic="news.*")
    async def news(self, item: TpNews) -> None:
        self._record(item.seq)

    @handler(topic="alerts.>")
    async def alert(self, item: TpAlert) -> None:
        self._record(item.seq)


async def take(inbox: asyncio.Queue[Got], n: int) -> list[Got]:
    return [await asyncio.wait_for(inbox.get(), WAIT) for _ in range(n)]


async def test_topic_handler_receives_publish(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    await system.publish("news.sport", TpNews(seq=1))
    (got,) = await take(inbox, 1)
    assert got.key == "a"
    assert got.seq == 1
    assert got.dst == "topic:news.sport"


async def test_star_matches_one_token_only(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    await system.publish("news.too.deep", TpNews(seq=1))
    await system.publish("news", TpNews(seq=2))
    await system.publish("news.ok", TpNews(seq=3))
    # same connection, same subscription: had 1 or 2 been delivered, they came first
    (got,) = await take(inbox, 1)
    assert (got.seq, got.dst) == (3, "topic:news.ok")


async def test_gt_matches_the_rest(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    await system.publish("alerts", TpAlert(seq=0))  # '>' needs at least one more token
    await system.publish("alerts.disk", TpAlert(seq=1))
    await system.publish("alerts.disk.sda.full", TpAlert(seq=2))
    got = await take(inbox, 2)
    assert [(g.seq, g.dst) for g in got] == [
        (1, "topic:alerts.disk"),
        (2, "topic:alerts.disk.sda.full"),
    ]


async def test_each_address_gets_each_message_once(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    await system.spawn(Reader, "b", inbox=inbox)
    await system.publish("news.x", TpNews(seq=1))
    await system.publish("news.x", TpNews(seq=2))  # marker: after it, nothing more of seq 1
    per_key: dict[str, list[int]] = {"a": [], "b": []}
    while per_key["a"][-1:] != [2] or per_key["b"][-1:] != [2]:
        got = await asyncio.wait_for(inbox.get(), WAIT)
        per_key[got.key].append(got.seq)
    assert per_key == {"a": [1, 2], "b": [1, 2]}


async def test_replicas_of_one_address_share_topic_messages(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "shared", replicas=2, inbox=inbox)
    assert system.local_actors() == {"reader/shared": 2}
    n = 60
    for i in range(n):
        await system.publish("news.x", TpNews(seq=i))
    got = await take(inbox, n)
    assert sorted(g.seq for g in got) == list(range(n)), "a message was lost or duplicated"
    per_instance = Counter(g.instance for g in got)
    assert len(per_instance) == 2, f"only one replica got messages: {per_instance}"
    # nothing else trickles in: one more message is the very next thing seen
    await system.publish("news.x", TpNews(seq=999))
    (last,) = await take(inbox, 1)
    assert last.seq == 999
    assert inbox.empty()


async def test_replicas_and_other_address_together(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "pair", replicas=2, inbox=inbox)
    await system.spawn(Reader, "solo", inbox=inbox)
    n = 30
    for i in range(n):
        await system.publish("alerts.cpu", TpAlert(seq=i))
    got = await take(inbox, 2 * n)
    by_key: dict[str, list[int]] = {"pair": [], "solo": []}
    for g in got:
        by_key[g.key].append(g.seq)
    assert sorted(by_key["pair"]) == list(range(n))
    assert by_key["solo"] == list(range(n))


async def test_publish_from_another_system(system, make_system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    publisher = await make_system()
    for i in range(5):
        await publisher.publish("news.remote", TpNews(seq=i))
    assert [g.seq for g in await take(inbox, 5)] == list(range(5))


async def test_topics_do_not_cross_namespaces(system, make_system, ns: str) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    await barrier(system)
    other = await make_system(namespace=ns + "-other")
    await other.publish("news.x", TpNews(seq=1))
    await barrier(other)
    await system.publish("news.x", TpNews(seq=2))
    # the other namespace's message reached the server first and still did not arrive
    (got,) = await take(inbox, 1)
    assert got.seq == 2


async def test_subscribe_outside_actors(system) -> None:
    seen: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_news(env: Envelope) -> None:
        seen.put_nowait(env)

    unsubscribe = await system.subscribe("news.*", on_news)
    await system.publish("news.a", TpNews(seq=1))
    env = await asyncio.wait_for(seen.get(), WAIT)
    assert env.intent == "TpNews"
    assert env.content == {"seq": 1}
    assert env.dst == "topic:news.a"
    assert env.src == system.client_address
    await unsubscribe()
    await system.publish("news.a", TpNews(seq=2))
    await barrier(system)
    assert seen.empty()


async def test_every_plain_subscriber_gets_every_message(system) -> None:
    a: asyncio.Queue[Any] = asyncio.Queue()
    b: asyncio.Queue[Any] = asyncio.Queue()

    async def to_a(env: Envelope) -> None:
        a.put_nowait(env.content)

    async def to_b(env: Envelope) -> None:
        b.put_nowait(env.content)

    await system.subscribe("feed.>", to_a)
    await system.subscribe("feed.>", to_b)
    for i in range(10):
        await system.publish("feed.x.y", {"i": i})
    for q in (a, b):
        assert [await asyncio.wait_for(q.get(), WAIT) for _ in range(10)] == [
            {"i": i} for i in range(10)
        ]


async def test_failing_subscriber_callback_keeps_subscription(system) -> None:
    seen: asyncio.Queue[int] = asyncio.Queue()

    async def flaky(env: Envelope) -> None:
        if env.content["i"] == 0:
            raise RuntimeError("boom")
        seen.put_nowait(env.content["i"])

    await system.subscribe("flaky", flaky)
    await system.publish("flaky", {"i": 0})
    await system.publish("flaky", {"i": 1})
    assert await asyncio.wait_for(seen.get(), WAIT) == 1


@pytest.mark.parametrize("topic", ["news.*", "news.>", "news..x", "", "bad topic"])
async def test_publish_rejects_wildcards_and_bad_topics(system, topic: str) -> None:
    with pytest.raises(InvalidAddressError):
        await system.publish(topic, {"x": 1})


async def test_topic_and_direct_messages_share_the_handler(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.spawn(Reader, "a", inbox=inbox)
    await system.tell("reader/a", TpNews(seq=1))
    await system.publish("news.z", TpNews(seq=2))
    got = await take(inbox, 2)
    assert {(g.seq, g.dst) for g in got} == {(1, "reader/a"), (2, "topic:news.z")}


async def test_lazy_actor_gets_topics_once_active(system) -> None:
    inbox: asyncio.Queue[Got] = asyncio.Queue()
    await system.register(Reader, inbox=inbox)
    await system.tell("reader/lazy", TpNews(seq=1))  # activates reader/lazy
    (first,) = await take(inbox, 1)
    assert first.key == "lazy"
    await system.publish("news.after", TpNews(seq=2))
    (second,) = await take(inbox, 1)
    assert (second.key, second.seq) == ("lazy", 2)


@pytest.mark.parametrize("encoding", [Encoding.MSGPACK, Encoding.JSON])
async def test_subscribe_hears_what_a_system_of_either_encoding_publishes(
    make_system: Any, encoding: Encoding
) -> None:
    """subscribe() decodes through the pipeline, honouring Ab-Enc: a JSON system
    hears its own publishes (it used to hear none) and a msgpack one's."""
    sender = await make_system(encoding=encoding)
    listener = await make_system()
    heard: dict[str, list[Any]] = {"sender": [], "listener": []}
    both = asyncio.Event()

    def on(who: str) -> Any:
        async def callback(env: Any) -> None:
            heard[who].append(env.content)
            if all(heard.values()):
                both.set()

        return callback

    await sender.subscribe("enc.*", on("sender"))
    await listener.subscribe("enc.*", on("listener"))
    await barrier(sender)
    await barrier(listener)
    await sender.publish("enc.one", {"n": 1}, intent="dict")
    await asyncio.wait_for(both.wait(), WAIT)
    assert heard == {"sender": [{"n": 1}], "listener": [{"n": 1}]}
