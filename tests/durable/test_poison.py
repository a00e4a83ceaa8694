"""One bad message never stops a queue or deafens a host.

Each case sends the real bytes: hand-written header blocks over a raw socket,
bodies nested past any sane depth, messages whose dead-letter record cannot fit
in one NATS message. Afterwards every message behind the bad one is handled or
dead-lettered with its reason, and the host still answers at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import nats
import pytest
from _util import WAIT, RawNats, subject_of
from pydantic import BaseModel

from actorbus import Actor, DecodeError, handler
from actorbus.bus.jetstream import DurableSettings, stream_name
from actorbus.bus.subjects import Address
from actorbus.codecs.envelope import new_id, now_ms
from actorbus.testing import eventually

FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=1.0)
ADDRESS = "pz-sink/a"
# Blocks with no NATS/1.0 version line or an unreadable one are refused; header
# lines that are not tokens are skipped, as nats-py does (the message is handled).
BAD_BLOCKS = [
    pytest.param(b"NATS\r\n\r\n", True, id="no-version"),
    pytest.param(b"\r\n\r\n", True, id="empty-lines"),
    pytest.param(b"NATS/1.0 \xff\xfe\r\n\r\n", True, id="binary-status"),
    pytest.param(b"NATS/1.0X\r\nA: b\r\n\r\n", True, id="bad-version-line"),
    pytest.param(b"NATS/1.0\r\n\xff\xfe: \xc3\r\n\r\n", False, id="binary-header-line"),
    pytest.param(b"NATS/1.0\r\nAb-\xff\r\n\r\n", False, id="forged-actorbus-line"),
]


class Item(BaseModel):
    n: int


class Sink(Actor):
    """Keeps the numbers it was sent, in order."""

    type_name = "pz-sink"

    def __init__(self, seen: list[int], changed: asyncio.Event) -> None:
        self.seen = seen
        self.changed = changed

    @handler
    async def add(self, item: Item) -> int:
        self.seen.append(item.n)
        self.changed.set()
        return item.n

    @handler(intent="dict")
    async def raw(self, data: dict[str, Any]) -> int:
        return len(data)


class DurableSink(Sink):
    type_name = "pz-dsink"
    durable = True


async def wait_until(seen: list[int], changed: asyncio.Event, count: int) -> None:
    async def reached() -> None:
        while len(seen) < count:
            changed.clear()
            await changed.wait()

    await asyncio.wait_for(reached(), WAIT)


def envelope(dst: str, content: Any, intent: str = "Item", **extra: Any) -> bytes:
    return msgpack.packb(
        {
            "id": new_id(),
            "ts": now_ms(),
            "src": "test",
            "dst": dst,
            "intent": intent,
            "content": content,
            **extra,
        }
    )


def nested(depth: int, dst: str) -> bytes:
    """An envelope whose content is a list nested ``depth`` deep (msgpack cannot
    pack that itself: the bytes are written out)."""
    head = envelope(dst, None, intent="dict")
    body = msgpack.unpackb(head)
    body.pop("content")
    start = msgpack.packb(body)
    start = bytes([start[0] + 1]) + start[1:]  # one more entry in the fixmap
    return start + msgpack.packb("content") + b"\x91" * depth + b"\xc0"


async def answer(raw_nc: nats.NATS, send: Any) -> dict[str, Any]:
    """The reply envelope to what ``send(inbox)`` sends."""
    inbox = raw_nc.new_inbox()
    sub = await raw_nc.subscribe(inbox)
    await raw_nc.flush()
    await send(inbox)
    msg = await sub.next_msg(WAIT)
    await sub.unsubscribe()
    body: dict[str, Any] = msgpack.unpackb(msg.data)
    return body


async def error_reply(raw_nc: nats.NATS, send: Any) -> dict[str, Any]:
    body = await answer(raw_nc, send)
    assert body["intent"] == "$error", body
    content: dict[str, Any] = body["content"]
    return content


@pytest.fixture
async def sink(system: Any) -> tuple[list[int], asyncio.Event]:
    seen: list[int] = []
    changed = asyncio.Event()
    await system.spawn(Sink, "a", seen=seen, changed=changed)
    return seen, changed


# -- core path ---------------------------------------------------------------


@pytest.mark.parametrize(("block", "refused"), BAD_BLOCKS)
async def test_a_malformed_header_block_gets_a_decode_error_and_the_host_hears_on(
    system: Any,
    sink: Any,
    raw_nc: nats.NATS,
    nats_server: Any,
    ns: str,
    block: bytes,
    refused: bool,
) -> None:
    raw = await RawNats.open(nats_server.url)
    try:
        subject = subject_of(ns, ADDRESS)
        # Broadcast to every system's control subject, then straight to the actor.
        await raw.hpub(f"{ns}.ctl.cancel", block, b"\x81\xa6cancel\xa1x")
        reply = await answer(
            raw_nc, lambda inbox: raw.hpub(subject, block, envelope(ADDRESS, {"n": 1}), inbox)
        )
        if refused:
            assert reply["intent"] == "$error"
            assert reply["content"]["code"] == DecodeError.code
            assert "header block" in reply["content"]["message"]
        else:
            assert reply["content"] == 1
        assert await system.ask(ADDRESS, Item(n=2), timeout=2) == 2
        assert system.nc.is_connected
        assert sink[0] == ([2] if refused else [1, 2])
    finally:
        await raw.close()


async def test_a_read_loop_that_dies_anyway_is_replaced_at_once(
    system: Any, sink: Any, raw_nc: nats.NATS
) -> None:
    """nats-py's ordered consumer parses the reply subject of whatever arrives on its
    deliver subject inside the read loop; a forged one raises there. The reader
    stops, the client notices and reconnects, and asks are answered again."""
    await system.runtime.durable.queue("pz-sink")
    stream = stream_name(system.namespace, "pz-sink")
    ordered = await system.runtime.js.subscribe(
        f"{system.namespace}.d.pz-sink.*", stream=stream, ordered_consumer=True
    )
    await raw_nc.publish(ordered.subject, b"forged", reply="not.an.ack.subject")
    await raw_nc.flush()
    loop = asyncio.get_running_loop()
    started = loop.time()
    answered = None
    while answered is None and loop.time() - started < WAIT:
        try:
            answered = await system.ask(ADDRESS, Item(n=7), timeout=0.5)
        except Exception:
            await asyncio.sleep(0.05)
    assert answered == 7
    assert loop.time() - started < 3.0  # not a stale-ping reconnect minutes later


async def test_deep_nesting_is_a_decode_error_not_silence(
    system: Any, sink: Any, raw_nc: nats.NATS, ns: str
) -> None:
    subject = subject_of(ns, ADDRESS)
    for depth in (200, 1_000, 50_000):
        err = await error_reply(
            raw_nc, lambda inbox, d=depth: raw_nc.publish(subject, nested(d, ADDRESS), reply=inbox)
        )
        assert err["code"] == DecodeError.code
        assert "deeper than 128" in err["message"]
    assert await system.ask(ADDRESS, {"a": [[[1]]]}, intent="dict", timeout=2) == 1


@pytest.mark.parametrize(
    "context",
    [{"stream": "yes"}, {"ttl_ms": "5"}, {"priority": "high"}, {"tags": {"a": 1}}],
    ids=["stream-yes", "ttl-string", "priority-string", "tag-int"],
)
async def test_envelope_fields_are_validated_strictly(
    system: Any, sink: Any, raw_nc: nats.NATS, ns: str, context: dict[str, Any]
) -> None:
    body = envelope(ADDRESS, {"n": 1}, context=context)
    err = await error_reply(
        raw_nc, lambda inbox: raw_nc.publish(subject_of(ns, ADDRESS), body, reply=inbox)
    )
    assert err["code"] == DecodeError.code, err
    assert next(iter(context)) in err["message"]


async def test_a_container_claiming_more_items_than_sent_is_a_decode_error(
    system: Any, sink: Any, raw_nc: nats.NATS, ns: str
) -> None:
    body = envelope(ADDRESS, None)[:-1] + b"\xdd\xff\xff\xff\xff"  # array32 of 4G items
    err = await error_reply(
        raw_nc, lambda inbox: raw_nc.publish(subject_of(ns, ADDRESS), body, reply=inbox)
    )
    assert err["code"] == DecodeError.code


# -- durable path --------------------------------------------------------------


@pytest.fixture
async def durable_sink(make_system: Any) -> tuple[Any, list[int], asyncio.Event]:
    system = await make_system(durable=FAST)
    seen: list[int] = []
    changed = asyncio.Event()
    await system.spawn(DurableSink, "q", seen=seen, changed=changed)
    return system, seen, changed


DQ = "pz-dsink/q"


async def test_poison_in_a_durable_queue_is_dead_lettered_and_the_queue_goes_on(
    durable_sink: Any, nats_server: Any, raw_nc: nats.NATS, ns: str
) -> None:
    """Deep nesting, a body too large to copy into its dead letter, and a malformed
    header block, each between good messages: all good ones handled in order,
    every bad one dead-lettered with its reason."""
    system, seen, changed = durable_sink
    subject = system.runtime.subjects.durable(Address.parse(DQ))
    js = raw_nc.jetstream()
    raw = await RawNats.open(nats_server.url)
    huge = envelope(DQ, {"n": 3, "pad": "x" * (system.nc.max_payload - 300)})
    try:
        await system.tell(DQ, Item(n=1), durable=True)
        await js.publish(subject, nested(5_000, DQ))
        await system.tell(DQ, Item(n=2), durable=True)
        await js.publish(subject, huge)
        await system.tell(DQ, Item(n=3), durable=True)
        await raw.hpub(subject, b"NATS\r\n\r\n", envelope(DQ, {"n": 99}))
        await system.tell(DQ, Item(n=4), durable=True)
        await wait_until(seen, changed, 4)
        assert seen == [1, 2, 3, 4]
        letters = await wait_for_dead_letters(system, DQ, 3)
    finally:
        await raw.close()
    reasons = [letter.reason for letter in letters]
    assert "deeper than 128" in reasons[0]
    assert letters[1].code in ("E_TOO_LARGE", "E_DECODE")
    assert not letters[1].original_kept
    assert "header block" in reasons[2]
    # The record of the large one references the original; reading it fetches it.
    full = await system.get_dead_letter(letters[1].seq)
    assert full.original == huge


async def wait_for_dead_letters(system: Any, address: str, count: int) -> list[Any]:
    async def enough() -> list[Any] | None:
        letters: list[Any] = await system.dead_letters(address)
        return letters if len(letters) >= count else None

    letters: list[Any] = await eventually(enough, what=f"{count} dead letters of {address}")
    assert len(letters) == count, letters
    return letters


async def test_a_message_that_kills_its_host_each_time_is_dead_lettered_before_handling(
    make_system: Any, nats_server: Any, ns: str
) -> None:
    """A message whose handler kills its process (SIGKILL) every time must neither
    loop forever nor vanish: each start is recorded before the handler runs, and the
    host that finds it started as often as the retry policy allows dead-letters it
    with the reason before handling it; the message behind it is handled."""
    from _actors import Tick
    from _util import run_host

    system = await make_system(durable=FAST)
    handled: list[int] = []
    got = asyncio.Event()

    async def on_handled(msg: Any) -> None:
        handled.append(int(msg.data))
        got.set()

    await system.nc.subscribe(f"{ns}.test.handled", cb=on_handled)
    await system.tell("doomed/q", Tick(n=1), durable=True)
    await system.tell("doomed/q", Tick(n=2), durable=True)
    attempts = 4  # the host's backoff has three steps: 1 + 3 attempts
    for _ in range(attempts):
        async with run_host("_actors:Doomed", nats_server.url, ns, "q", ack_wait=1.0) as host:
            assert await asyncio.wait_for(host.proc.wait(), 3 * WAIT) == -9
    assert handled == []
    async with run_host("_actors:Doomed", nats_server.url, ns, "q", ack_wait=1.0) as host:
        await asyncio.wait_for(got.wait(), 3 * WAIT)
        assert host.proc.returncode is None
    (letter,) = await wait_for_dead_letters(system, "doomed/q", 1)
    assert "started 4 times without the message being settled" in letter.reason
    assert msgpack.unpackb(letter.original)["content"] == {"n": 1}
    assert handled == [2]
