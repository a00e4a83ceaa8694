"""Bad input never breaks an actor: a typed error reply where a reply is possible,
a log line otherwise, the next good message is answered and no good message is lost."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import nats
import pytest
from _util import WAIT, barrier, subject_of
from pydantic import BaseModel

from actorbus import (
    Actor,
    Envelope,
    ExpiredError,
    MessageTooLargeError,
    SizeLimits,
    UnknownIntentError,
    ValidationFailedError,
    handler,
)
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.envelope import now_ms

ADDRESS = "bi-counter/c"


class BiItem(BaseModel):
    n: int


class Tally(Actor):
    type_name = "bi-counter"

    def __init__(self) -> None:
        self.seen: list[int] = []

    @handler(topic="bi.items")
    async def add(self, item: BiItem) -> int:
        self.seen.append(item.n)
        return len(self.seen)

    @handler(intent="seen")
    async def report(self, _: Any) -> list[int]:
        return self.seen

    @handler
    async def blob(self, data: bytes) -> int:
        return len(data)

    @handler
    async def mapping(self, data: dict[str, Any]) -> list[str]:
        return sorted(data)


def envelope_bytes(**fields: Any) -> bytes:
    data = {"id": "x1", "ts": now_ms(), "src": "test", "dst": ADDRESS}
    data.update(fields)
    return msgpack.packb(data)


async def raw_request(
    nc: nats.NATS, subject: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Request with plain nats-py; returns the decoded reply body and its headers."""
    msg = await nc.request(subject, data, timeout=2, headers=headers)
    hdrs = msg.headers or {}
    body = json.loads(msg.data) if hdrs.get("Ab-Enc") == "json" else msgpack.unpackb(msg.data)
    return body, hdrs


def assert_error(body: dict[str, Any], code: str, *needles: str) -> None:
    assert body["intent"] == "$error", body
    assert body["content"]["code"] == code, body
    assert body["src"] == ADDRESS
    for needle in needles:
        assert needle in body["content"]["message"], body


async def survives(system: Any, bad: Callable[[], Awaitable[None]]) -> None:
    """good, bad, good: the bad one does not take a good one down with it."""
    before = await system.ask(ADDRESS, None, intent="seen", timeout=2)
    await system.tell(ADDRESS, BiItem(n=1))
    await barrier(system)  # the server routed it before the bad message arrives
    await bad()
    await system.tell(ADDRESS, BiItem(n=2))
    after = await system.ask(ADDRESS, None, intent="seen", timeout=2)
    assert after == [*before, 1, 2]


@pytest.fixture
async def tally(system) -> None:
    await system.spawn(Tally, "c")
    await barrier(system)


@pytest.mark.usefixtures("tally")
async def test_garbage_bytes_get_decode_error(system, raw_nc, ns: str) -> None:
    async def bad() -> None:
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), b"\xc1\xc1 garbage \x00")
        assert_error(body, "E_DECODE", "not valid msgpack")

    await survives(system, bad)


@pytest.mark.usefixtures("tally")
async def test_empty_body_gets_decode_error(system, raw_nc, ns: str) -> None:
    async def bad() -> None:
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), b"")
        assert_error(body, "E_DECODE")

    await survives(system, bad)


@pytest.mark.usefixtures("tally")
async def test_msgpack_that_is_not_an_envelope(system, raw_nc, ns: str) -> None:
    async def missing_fields() -> None:
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), msgpack.packb({"foo": 1}))
        assert_error(body, "E_DECODE", "invalid envelope", "dst", "intent")

    async def not_a_map() -> None:
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), msgpack.packb([1, 2, 3]))
        assert_error(body, "E_DECODE", "must be a map")

    async def wrong_types() -> None:
        data = envelope_bytes(intent="BiItem", content={"n": 1}, context={"ttl_ms": "soon"})
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), data)
        assert_error(body, "E_DECODE", "ttl_ms")

    await survives(system, missing_fields)
    await survives(system, not_a_map)
    await survives(system, wrong_types)


@pytest.mark.usefixtures("tally")
async def test_sealed_content_on_an_open_bus_is_refused_not_handed_over(
    system, raw_nc, ns: str
) -> None:
    """Nothing on an open bus can open sealed content: the handler is never given
    ciphertext as its message, the sender is told why, and the actor goes on."""

    async def sealed() -> None:
        data = envelope_bytes(intent="add", content=b"\x00" * 40, meta={"cipher": "A256GCM"})
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), data)
        assert_error(body, "E_AUTH", "sealed but came without a session")

    await survives(system, sealed)


@pytest.mark.usefixtures("tally")
async def test_unknown_encoding_header(system, raw_nc, ns: str) -> None:
    async def bad() -> None:
        data = envelope_bytes(intent="BiItem", content={"n": 9})
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), data, {"Ab-Enc": "xml"})
        assert_error(body, "E_DECODE", "xml")

    await survives(system, bad)


@pytest.mark.usefixtures("tally")
async def test_bad_json_gets_json_error_reply(system, raw_nc, ns: str) -> None:
    async def bad() -> None:
        body, hdrs = await raw_request(
            raw_nc, subject_of(ns, ADDRESS), b"{not json", {"Ab-Enc": "json"}
        )
        assert hdrs.get("Ab-Enc") == "json"
        assert_error(body, "E_DECODE", "not valid json")

    await survives(system, bad)


@pytest.mark.usefixtures("tally")
async def test_msgpack_body_labelled_json(system, raw_nc, ns: str) -> None:
    async def bad() -> None:
        data = envelope_bytes(intent="BiItem", content={"n": 9})
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), data, {"Ab-Enc": "json"})
        assert_error(body, "E_DECODE")

    await survives(system, bad)


@pytest.mark.usefixtures("tally")
async def test_unknown_intent(system, raw_nc, ns: str) -> None:
    async def typed() -> None:
        with pytest.raises(UnknownIntentError) as info:
            await system.ask(ADDRESS, {"x": 1}, intent="no.such.intent", timeout=2)
        assert "no.such.intent" in str(info.value)
        assert ADDRESS in str(info.value)
        assert "BiItem" in str(info.value)  # it says what it does handle
        assert info.value.code == "E_UNSUPPORTED"

    async def raw() -> None:
        data = envelope_bytes(intent="$error", content={})
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), data)
        assert_error(body, "E_UNSUPPORTED", "$error")

    await survives(system, typed)
    await survives(system, raw)


@pytest.mark.usefixtures("tally")
async def test_payload_failing_validation(system) -> None:
    async def wrong_field() -> None:
        with pytest.raises(ValidationFailedError) as info:
            await system.ask(ADDRESS, {"n": "not a number"}, intent="BiItem", timeout=2)
        assert "BiItem" in str(info.value)
        assert "n:" in str(info.value)
        assert info.value.code == "E_VALIDATION"

    async def missing_field() -> None:
        with pytest.raises(ValidationFailedError, match="n: Field required"):
            await system.ask(ADDRESS, {}, intent="BiItem", timeout=2)

    async def wrong_kind() -> None:
        with pytest.raises(ValidationFailedError, match="expects bytes"):
            await system.ask(ADDRESS, "text, not bytes", intent="bytes", timeout=2)
        with pytest.raises(ValidationFailedError, match="expects dict"):
            await system.ask(ADDRESS, [1, 2], intent="dict", timeout=2)

    await survives(system, wrong_field)
    await survives(system, missing_field)
    await survives(system, wrong_kind)


@pytest.mark.usefixtures("tally")
async def test_expired_message_is_not_delivered_late(system, raw_nc, ns: str) -> None:
    async def bad() -> None:
        data = envelope_bytes(
            intent="BiItem", content={"n": 99}, ts=now_ms() - 10_000, context={"ttl_ms": 500}
        )
        body, _ = await raw_request(raw_nc, subject_of(ns, ADDRESS), data)
        assert_error(body, "E_EXPIRED", "expired")

    await survives(system, bad)
    assert 99 not in await system.ask(ADDRESS, None, intent="seen", timeout=2)


async def test_expired_error_is_typed_for_the_caller(system) -> None:
    """A message that waited in line past its ttl is refused, not handled late."""
    release = asyncio.Event()
    entered = asyncio.Event()
    handled: list[int] = []

    class Busy(Actor):
        type_name = "bi-busy"

        @handler
        async def work(self, item: BiItem) -> int:
            if item.n == 0:
                entered.set()
                await release.wait()
            handled.append(item.n)
            return item.n

    await system.spawn(Busy, "b")
    first = asyncio.ensure_future(system.ask("bi-busy/b", BiItem(n=0), timeout=3))
    try:
        await asyncio.wait_for(entered.wait(), WAIT)
        late = asyncio.ensure_future(system.ask("bi-busy/b", BiItem(n=1), ttl_ms=20, timeout=3))
        await barrier(system)
        await asyncio.sleep(0.05)  # let the ttl pass while the message waits in line
    finally:
        release.set()
    assert await first == 0
    with pytest.raises(ExpiredError, match="expired"):
        await late
    assert await system.ask("bi-busy/b", BiItem(n=2), ttl_ms=2_000, timeout=2) == 2
    assert handled == [0, 2]


@pytest.mark.usefixtures("tally")
async def test_oversized_message_refused_before_sending(system) -> None:
    async def bad() -> None:
        with pytest.raises(MessageTooLargeError) as info:
            await system.ask(ADDRESS, b"x" * 950_000, timeout=2)
        assert info.value.what == "payload"

    await survives(system, bad)


async def test_receiver_with_smaller_limits_replies_too_large(system, make_system) -> None:
    host = await make_system(limits=SizeLimits(max_message=4_000, max_payload=2_000))
    await host.spawn(Tally, "c")
    await barrier(host)

    async def bad() -> None:
        with pytest.raises(MessageTooLargeError) as info:
            await system.ask(ADDRESS, b"x" * 10_000, timeout=2)
        assert info.value.code == "E_TOO_LARGE"
        assert "10" in str(info.value)  # the size is named

    await survives(system, bad)
    assert await system.ask(ADDRESS, b"x" * 1_000, timeout=2) == 1_000


async def test_raw_message_over_1mb_gets_too_large_reply(ns: str) -> None:
    """A server that accepts 4 MB messages; the actor's system keeps its 1 MB limit."""
    from actorbus import ActorSystem

    server = EmbeddedServer(ServerConfig(max_payload=4 * 1024 * 1024))
    await server.start()
    try:
        async with ActorSystem.connect(server.url, namespace=ns) as system:
            await system.spawn(Tally, "c")
            nc = await nats.connect(server.url, allow_reconnect=False)
            try:

                async def bad() -> None:
                    data = envelope_bytes(intent="bytes", content=b"x" * 1_500_000)
                    body, _ = await raw_request(nc, subject_of(ns, ADDRESS), data)
                    assert_error(body, "E_TOO_LARGE", "message")

                await survives(system, bad)
            finally:
                await nc.close()
    finally:
        await server.stop()


@pytest.mark.usefixtures("tally")
@pytest.mark.parametrize(
    "bad_kind", ["garbage", "not-envelope", "unknown-intent", "invalid-payload", "expired"]
)
async def test_bad_message_in_a_burst_loses_nothing(system, ns: str, bad_kind: str, caplog) -> None:
    bad = {
        "garbage": b"\xc1 garbage",
        "not-envelope": msgpack.packb({"foo": "bar"}),
        "unknown-intent": envelope_bytes(intent="nope", content=None),
        "invalid-payload": envelope_bytes(intent="BiItem", content={"n": "x"}),
        "expired": envelope_bytes(
            intent="BiItem", content={"n": -1}, ts=now_ms() - 60_000, context={"ttl_ms": 1}
        ),
    }[bad_kind]
    subject = subject_of(ns, ADDRESS)
    with caplog.at_level(logging.WARNING):
        for i in range(100):
            if i in (0, 50, 99):
                await system.nc.publish(subject, bad)  # no reply inbox: log and go on
            await system.tell(ADDRESS, BiItem(n=i))
        seen = await system.ask(ADDRESS, None, intent="seen", timeout=5)
    assert seen == list(range(100))
    assert any(ADDRESS in r.getMessage() for r in caplog.records), "nothing was logged"


@pytest.mark.usefixtures("tally")
async def test_garbage_on_a_topic_is_dropped(system, ns: str) -> None:
    await system.nc.publish(f"{ns}.t.bi.items", b"\xc1 garbage")
    await system.publish("bi.items", BiItem(n=7))
    await system.publish("bi.items", {"n": 8}, intent="BiItem")
    # The topic and the ask come through different subscriptions: their relative
    # order is not promised (a handler that runs long lets the other one in).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while (seen := await system.ask(ADDRESS, None, intent="seen", timeout=2)) != [7, 8]:
        assert seen in ([], [7]), seen
        assert loop.time() < deadline, seen
        await asyncio.sleep(0.01)


async def test_garbage_to_a_plain_subscriber_is_dropped(system, ns: str) -> None:
    got: asyncio.Queue[Envelope] = asyncio.Queue()

    async def cb(env: Envelope) -> None:
        got.put_nowait(env)

    await system.subscribe("feed", cb)
    await system.nc.publish(f"{ns}.t.feed", b"\xc1 garbage")
    await system.publish("feed", {"ok": True})
    env = await asyncio.wait_for(got.get(), WAIT)
    assert env.content == {"ok": True}


async def test_garbage_to_lazy_type_activates_nothing(system, raw_nc, ns: str) -> None:
    await system.register(Tally)
    await barrier(system)
    body, _ = await raw_request(raw_nc, subject_of(ns, "bi-counter/lazy"), b"\xc1 junk")
    assert body["intent"] == "$error"
    assert body["content"]["code"] == "E_DECODE"
    assert system.local_actors() == {}
    assert await system.ask("bi-counter/lazy", BiItem(n=1), timeout=2) == 1


async def test_garbage_on_control_subject_is_ignored(system) -> None:
    class Counter(Actor):
        type_name = "bi-stream"

        @handler
        async def count(self, n: dict[str, int]) -> Any:
            for i in range(n["n"]):
                yield i

    await system.spawn(Counter, "s")
    await system.nc.publish(system.streams.control_subject, b"\xc1 junk")
    await system.nc.publish(system.streams.control_subject, msgpack.packb({"cancel": "unknown"}))
    assert [x async for x in system.stream("bi-stream/s", {"n": 3}, timeout=2)] == [0, 1, 2]


# -- bad replies: the caller side --------------------------------------------------


async def reply_with(raw_nc: nats.NATS, subject: str, data: bytes) -> None:
    async def answer(msg: Any) -> None:
        await raw_nc.publish(msg.reply, data)

    await raw_nc.subscribe(subject, cb=answer)
    await barrier(raw_nc)


async def test_garbage_reply_is_decode_error(system, raw_nc, ns: str) -> None:
    from actorbus import DecodeError

    await reply_with(raw_nc, subject_of(ns, "liar/a"), b"\xc1 garbage")
    with pytest.raises(DecodeError, match="malformed reply from liar/a"):
        await system.ask("liar/a", {}, timeout=2)


async def test_reply_without_intent_is_decode_error(system, raw_nc, ns: str) -> None:
    from actorbus import DecodeError

    await reply_with(raw_nc, subject_of(ns, "liar/b"), msgpack.packb({"content": 1}))
    with pytest.raises(DecodeError, match="liar/b"):
        await system.ask("liar/b", {}, timeout=2)


async def test_malformed_error_reply_is_protocol_error(system, raw_nc, ns: str) -> None:
    from actorbus import ProtocolError

    data = msgpack.packb({"intent": "$error", "content": "not a map"})
    await reply_with(raw_nc, subject_of(ns, "liar/c"), data)
    with pytest.raises(ProtocolError, match="malformed error reply"):
        await system.ask("liar/c", {}, timeout=2)


async def test_error_reply_with_unknown_code_is_remote_error(system, raw_nc, ns: str) -> None:
    from actorbus import RemoteError

    content = {"code": "E_FROM_THE_FUTURE", "type": "Weird", "message": "hm"}
    await reply_with(
        raw_nc, subject_of(ns, "liar/d"), msgpack.packb({"intent": "$error", "content": content})
    )
    with pytest.raises(RemoteError) as info:
        await system.ask("liar/d", {}, timeout=2)
    assert info.value.remote_type == "Weird"
    assert info.value.remote_message == "hm"
