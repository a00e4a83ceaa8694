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

pytestmark = pytest.mark.transports("nats", "local")


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


class TopicTalker(Actor):
    """Returns a value from a topic handler: a topic is never answered."""

    type_name = "topic-talker"

    def __init__(self) -> None:
        self.heard = 0

    @handler(topic="kept.*")
    async def heard_it(self, item: TpNews) -> str:
        self.heard += 1
        return "ANSWERED-A-TOPIC"

    @handler
    async def count(self, _: dict[str, Any]) -> int:
        return self.heard


async def test_a_kept_topic_is_never_answered(make_system: Any, raw_nc: Any) -> None:
    """A kept topic is stored through JetStream, so its message carries the store's
    ack inbox as its reply subject; an answer sent there would be taken for the
    ack (and fail the publish). Nothing but acks reaches the publisher's inbox."""
    from actorbus import DurableSettings
    from actorbus.testing import eventually

    system = await make_system(durable=DurableSettings(keep_topics=True))
    await system.spawn(TopicTalker, "1")
    seen: list[bytes] = []

    async def record(msg: Any) -> None:
        seen.append(msg.data)

    await raw_nc.subscribe(system.runtime.mux.prefix + "*", cb=record)
    await barrier(raw_nc)
    for seq in range(20):
        await system.publish("kept.news", TpNews(seq=seq))

    async def all_heard() -> bool:
        return bool(await system.ask("topic-talker/1", {}, intent="dict") == 20)

    await eventually(all_heard, what="every kept topic message handled")
    await barrier(raw_nc)  # what the handler sent before its last count has arrived
    assert not [data for data in seen if b"ANSWERED-A-TOPIC" in data]
