"""Pub/sub topics sealed to their listeners with sender keys, every message signed:
on a real nats-server, watched and attacked from a plain nats-py connection."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import nats
import pytest
from _util import WAIT, guard_of, kv_keys
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.subjects import subject_matches
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import AuthError
from actorbus.codecs.wire import pack, unpack
from actorbus.security.settings import SecuritySettings
from actorbus.security.topic_guard import topic_keys_bucket
from actorbus.security.topic_keys import SIGNATURE_HEADER, TOPIC_HEADER
from actorbus.testing import eventually

SECRET = "PII-4111-1111-1111-1111"


class News(BaseModel):
    text: str


class Desk(Actor):
    """Listens to one region's news."""

    type_name = "desk"
    got: asyncio.Queue[tuple[str, str]]

    @handler(topic="news.*")
    async def on_news(self, news: News) -> None:
        await Desk.got.put((self.envelope.src, news.text))


class Archive(Actor):
    type_name = "archive"
    got: asyncio.Queue[str]

    @handler(topic="news.>")
    async def on_news(self, news: News) -> None:
        await Archive.got.put(news.text)


class Sports(Actor):
    type_name = "sports"

    @handler(topic="sports.*")
    async def on_score(self, news: News) -> None:
        raise AssertionError("sports listens to no news")


@pytest.fixture(autouse=True)
def queues() -> None:
    Desk.got = asyncio.Queue()
    Archive.got = asyncio.Queue()


@pytest.fixture
def settings(tmp_path: Path) -> SecuritySettings:
    return SecuritySettings(home=tmp_path / "home")


async def records(system: ActorSystem, ns: str) -> dict[str, dict[str, Any]]:
    """The sender-key records in the namespace's bucket, by skid."""
    kv = await system.runtime.js.key_value(topic_keys_bucket(ns))
    out = {}
    for key in await kv_keys(kv):
        entry = await kv.get(key)
        out[key.removeprefix("k.")] = msgpack.unpackb(entry.value or b"")
    return out


def test_topic_patterns_match_as_nats_subjects_do() -> None:
    assert subject_matches("news.*", "news.eu")
    assert not subject_matches("news.*", "news.eu.fr")
    assert subject_matches("news.>", "news.eu.fr")
    assert not subject_matches("news.>", "news")
    assert subject_matches("news.eu", "news.eu")
    assert not subject_matches("news.eu", "news.us")


async def test_a_topic_goes_sealed_to_its_listeners_and_signed(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    host = await make_system(security=settings)
    await host.spawn(Desk, "1")
    await host.spawn(Archive, "1")
    await host.spawn(Sports, "1")
    publisher = await make_system(security=settings)
    wire: list[nats.aio.msg.Msg] = []

    async def spy(msg: nats.aio.msg.Msg) -> None:
        wire.append(msg)

    sub = await raw_nc.subscribe(f"{ns}.t.>", cb=spy)
    await raw_nc.flush()
    await publisher.publish("news.eu", News(text=SECRET))
    assert await asyncio.wait_for(Desk.got.get(), WAIT) == (publisher.client_address, SECRET)
    assert await asyncio.wait_for(Archive.got.get(), WAIT) == SECRET
    await eventually(lambda: wire, what="the spy saw the topic message")
    await sub.unsubscribe()
    [seen] = wire
    assert SECRET.encode() not in seen.data
    assert unpack(seen.data)["meta"]["cipher"] == "A256GCM"
    assert seen.headers is not None
    assert {TOPIC_HEADER, SIGNATURE_HEADER} <= set(seen.headers)
    # the key is wrapped to the two types that listen to news.eu, not to sports
    skid = seen.headers[TOPIC_HEADER].rpartition(".")[2]
    record = (await records(publisher, ns))[skid]
    assert set(record["wraps"]) == {"desk", "archive"}
    assert record["topic"] == "news.eu"
    assert SECRET.encode() not in msgpack.packb(record)
    # the key is used again for the next message: one record, a message each
    await publisher.publish("news.eu", News(text="second"))
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == "second"
    assert len(await records(publisher, ns)) == 1
    assert guard_of(host).refused == 0


async def test_forged_tampered_replayed_and_unsigned_topic_messages_are_refused(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    host = await make_system(security=settings)
    await host.spawn(Desk, "1")
    publisher = await make_system(security=settings)
    captured: list[nats.aio.msg.Msg] = []

    async def keep(msg: nats.aio.msg.Msg) -> None:
        captured.append(msg)

    sub = await raw_nc.subscribe(f"{ns}.t.news.eu", cb=keep)
    await raw_nc.flush()
    await publisher.publish("news.eu", News(text="once"))
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == "once"
    await eventually(lambda: captured, what="the spy captured it")
    await sub.unsubscribe()
    original = captured[0]
    assert original.headers is not None
    headers = dict(original.headers)
    guard = guard_of(host)
    subject = f"{ns}.t.news.eu"

    async def refused(data: bytes, hdrs: dict[str, str] | None, why: str) -> None:
        before = guard.refused
        await raw_nc.publish(subject, data, headers=hdrs)
        await eventually(lambda: guard.refused > before, what=why)

    await refused(original.data, headers, "the replay")  # as captured: a replay
    tampered = bytearray(original.data)
    tampered[original.data.index(b"context") - 10] ^= 1
    await refused(bytes(tampered), headers, "the tampered body")
    # a body of the attacker's making under a genuine Ab-Topic, with a made-up signature
    fake = pack(
        {
            "id": "forged-topic",
            "ts": unpack(original.data)["ts"],
            "src": publisher.client_address,
            "dst": "topic:news.eu",
            "intent": "News",
            "content": {"text": "evil"},
        }
    )
    await refused(fake, {**headers, SIGNATURE_HEADER: "A" * 86}, "the forged signature")
    await refused(fake, None, "the unauthenticated message")
    # the listener went on: a genuine message is still taken, and nothing else was
    await publisher.publish("news.eu", News(text="after"))
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == "after"
    assert Desk.got.empty()
    assert guard.refused == 4


async def test_a_new_listener_reads_from_the_next_key_and_a_revoked_one_no_more(
    make_system: Any, settings: SecuritySettings, ns: str
) -> None:
    host = await make_system(security=settings)
    await host.spawn(Desk, "1")
    publisher = await make_system(security=settings)
    await publisher.publish("news.eu", News(text="desk only"))
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == "desk only"
    archive_host = await make_system(security=settings)
    await archive_host.spawn(Archive, "1")
    await eventually(
        lambda: "archive" in guard_of(publisher).trust.listeners("news.eu"),
        what="the publisher sees the new listener",
    )
    await publisher.publish("news.eu", News(text="both"))
    assert await asyncio.wait_for(Archive.got.get(), WAIT) == "both"
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == "both"
    keys = await records(publisher, ns)
    assert sorted(sorted(r["wraps"]) for r in keys.values()) == [
        ["archive", "desk"],
        ["desk"],
    ]
    # the archive type's credential revoked: the next key leaves it out
    archive_guard = guard_of(archive_host)
    cred = archive_guard.trust.recipient("archive")
    assert cred is not None
    await archive_guard.revoke(cred.jti)
    await eventually(
        lambda: "archive" not in guard_of(publisher).trust.listeners("news.eu"),
        what="the publisher drops the revoked listener",
    )
    await publisher.publish("news.eu", News(text="desk again"))
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == "desk again"
    newest = [r for r in (await records(publisher, ns)).values() if set(r["wraps"]) == {"desk"}]
    assert len(newest) == 2


async def test_a_system_subscription_is_a_listener_too(
    make_system: Any, settings: SecuritySettings, ns: str
) -> None:
    watcher = await make_system(security=settings)
    got: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_news(env: Envelope) -> None:
        await got.put(env)

    unsubscribe = await watcher.subscribe("news.*", on_news)
    publisher = await make_system(security=settings)
    await eventually(
        lambda: guard_of(publisher).trust.listeners("news.eu"), what="the watcher listens"
    )
    await publisher.publish("news.eu", News(text=SECRET))
    env = await asyncio.wait_for(got.get(), WAIT)
    assert env.content == {"text": SECRET}
    assert env.src == publisher.client_address
    await unsubscribe()
    await eventually(
        lambda: not guard_of(publisher).trust.listeners("news.eu"),
        what="the watcher stopped listening",
    )


async def test_a_kept_topic_opens_in_history_for_a_listener_only(
    make_system: Any, settings: SecuritySettings
) -> None:
    kept = DurableSettings(keep_topics=True)
    host = await make_system(security=settings, durable=kept)
    await host.spawn(Desk, "1")
    publisher = await make_system(security=settings, durable=kept)
    await publisher.publish("news.eu", News(text=SECRET))
    assert (await asyncio.wait_for(Desk.got.get(), WAIT))[1] == SECRET
    [seen_by_listener] = [e async for e in host.history(topic="news.*")]
    assert seen_by_listener.content == {"text": SECRET}
    [seen_by_publisher] = [e async for e in publisher.history(topic="news.*")]
    assert seen_by_publisher.meta.cipher == "A256GCM"
    assert SECRET.encode() not in seen_by_publisher.content


async def test_a_listener_not_in_a_key_is_refused_with_the_reason(
    make_system: Any, settings: SecuritySettings
) -> None:
    host = await make_system(security=settings)
    await host.spawn(Desk, "1")
    publisher = await make_system(security=settings)
    key = await guard_of(publisher).topic_sender(publisher.client_address, "news.eu")
    other = await make_system(security=settings)
    await other.spawn(Sports, "1")
    with pytest.raises(AuthError, match="not sealed to 'sports'"):
        await guard_of(other).topics.key(key.header, "sports", key.expires_ms - 1)
