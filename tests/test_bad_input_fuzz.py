"""Bad bytes from anywhere, by the hundred: generated (seeded, so a failure
replays) header blocks, bodies and sizes sent over a raw socket to the core
path, the durable path, the control subjects and the gateway. For each: a typed
answer or a dead letter, the actor still serves, and no good message is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import nats
import pytest
from _gateway import host_agents, message, running_gateway
from _util import WAIT, RawNats, barrier, subject_of
from hypothesis import given, settings, strategies as st
from pydantic import BaseModel

from actorbus import Actor, DecodeError, MessageTooLargeError, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.subjects import Address
from actorbus.codecs.common import read_json
from actorbus.codecs.envelope import new_id, now_ms
from actorbus.codecs.inbound import decode_inbound
from actorbus.codecs.wire import Encoding

SEED = 20261124
FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=2.0)
CODES = {"E_DECODE", "E_VALIDATION", "E_UNSUPPORTED", "E_TOO_LARGE", "E_EXPIRED"}


class Good(BaseModel):
    n: int


class Keeper(Actor):
    """Keeps what it handled: good messages by number, anything else as it came."""

    type_name = "fz-keeper"

    def __init__(self, good: list[int], other: list[Any]) -> None:
        self.good = good
        self.other = other

    @handler
    async def take(self, item: Good) -> int:
        self.good.append(item.n)
        return item.n

    @handler(intent="dict")
    async def anything(self, data: dict[str, Any]) -> int:
        self.other.append(data)
        return len(data)


class DurableKeeper(Keeper):
    type_name = "fz-dkeeper"
    durable = True


# -- what gets sent ------------------------------------------------------------


def envelope(dst: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": new_id(),
        "ts": now_ms(),
        "src": "fuzz",
        "dst": dst,
        "intent": "Good",
        "content": {"n": -1},
    }
    base.update(fields)
    return base


WRONG = [None, True, -1, 2**63, 1.5, "", "x" * 300, b"\xff", [], {}, [1, [2]], {"a": {"b": 1}}]
FIELDS = ["id", "ts", "src", "dst", "intent", "content", "context", "meta"]
CONTEXT = ["stream", "ttl_ms", "priority", "tags", "trace_id", "session_id", "artifact_refs"]


def bodies(dst: str, rng: random.Random) -> Iterator[bytes]:
    """Bodies that are not a valid envelope for the Good handler, in many ways."""
    valid = msgpack.packb(envelope(dst))
    for _ in range(40):  # a field of the wrong type, or missing
        env = envelope(dst)
        name = rng.choice(FIELDS)
        if rng.random() < 0.2:
            env.pop(name, None)
        else:
            env[name] = rng.choice(WRONG)
        if name == "content" and isinstance(env.get("content"), dict):
            env["content"] = {"n": "not a number"}
        yield msgpack.packb(env)
    for _ in range(20):  # context fields of the wrong type
        yield msgpack.packb(envelope(dst, context={rng.choice(CONTEXT): rng.choice(WRONG[:6])}))
    for _ in range(20):  # truncated and bit-flipped valid bodies
        cut = rng.randrange(1, len(valid))
        yield valid[:cut]
        flipped = bytearray(valid)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        yield bytes(flipped)
    for size in (0, 1, 7, 100, 5_000):  # noise
        yield rng.randbytes(size)
    head = msgpack.packb(envelope(dst, content=None))[:-1]  # content=nil, cut off
    for depth in (129, 1_000, 100_000):
        yield head + b"\x91" * depth + b"\xc0"
    yield head + b"\xdd\xff\xff\xff\xff"  # an array claiming 4G items
    yield head + b"\xdf\xff\xff\xff\xff"  # a map claiming 4G pairs
    yield b'{"id": "j", "ts": 1, "dst": "x", "intent": "Good"}'  # JSON, no header saying so


HEADER_BLOCKS = [
    b"NATS\r\n\r\n",
    b"\r\n\r\n",
    b"NATS/1.0 \xff\xfe\r\n\r\n",
    b"NATS/1.0X\r\n\r\n",
    b"NATS/1.0\r\nAb-Enc: cbor\r\n\r\n",
    b"NATS/1.0\r\nAb-Enc: json\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
    b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
    b"NATS/1.0\r\n" + b"X-Long: " + b"y" * 20_000 + b"\r\n\r\n",
]


def cases(dst: str) -> list[tuple[bytes, bytes]]:
    """(header block, body) pairs; an empty block means a plain PUB."""
    rng = random.Random(SEED)
    out = [(b"", body) for body in bodies(dst, rng)]
    valid = msgpack.packb(envelope(dst))
    out += [(block, valid) for block in HEADER_BLOCKS]
    return out


async def send(raw: RawNats, subject: str, block: bytes, body: bytes, reply: str = "") -> None:
    if block:
        await raw.hpub(subject, block, body, reply)
    else:
        await raw.hpub(subject, b"NATS/1.0\r\n\r\n", body, reply)


# -- the core path -------------------------------------------------------------


async def test_every_bad_message_on_the_core_path_gets_a_typed_answer(
    system: Any, raw_nc: nats.NATS, nats_server: Any, ns: str
) -> None:
    good: list[int] = []
    other: list[Any] = []
    await system.spawn(Keeper, "k", good=good, other=other)
    address = "fz-keeper/k"
    subject = subject_of(ns, address)
    inbox = raw_nc.new_inbox()
    answers: list[Any] = []
    sub = await raw_nc.subscribe(inbox + ".*")
    raw = await RawNats.open(nats_server.url)
    sent = cases(address)
    try:
        for i, (block, body) in enumerate(sent):
            await send(raw, subject, block, body, f"{inbox}.{i}")
            await system.tell(address, Good(n=i))
        for _ in sent:
            msg = await sub.next_msg(WAIT)
            if (msg.headers or {}).get("Ab-Enc") == "json":
                answers.append(json.loads(msg.data))
            else:
                answers.append(msgpack.unpackb(msg.data))
    finally:
        await raw.close()
    # Every one of them answered (none silently dropped), with a typed error unless it
    # happened to be a valid message after all.
    assert len(answers) == len(sent)
    for answer in answers:
        if answer["intent"] == "$error":
            assert answer["content"]["code"] in CODES, answer
    assert await system.ask(address, Good(n=10_000), timeout=2) == 10_000
    numbered = [n for n in good if n >= 0]  # a "bad" one that was valid after all says -1
    assert numbered[: len(sent)] == list(range(len(sent)))  # no good one lost or reordered


# -- the durable path ------------------------------------------------------------


async def test_every_bad_message_in_a_durable_queue_is_dead_lettered_and_none_is_lost(
    make_system: Any, raw_nc: nats.NATS, nats_server: Any
) -> None:
    system = await make_system(durable=FAST)
    good: list[int] = []
    other: list[Any] = []
    await system.spawn(DurableKeeper, "k", good=good, other=other)
    address = "fz-dkeeper/k"
    subject = system.runtime.subjects.durable(Address.parse(address))
    sent = cases(address)
    raw = await RawNats.open(nats_server.url)
    try:
        for i, (block, body) in enumerate(sent):
            await send(raw, subject, block, body)
            await system.tell(address, Good(n=i), durable=True)
    finally:
        await raw.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 50
    while True:
        letters = await system.dead_letters(address, limit=1_000)
        stats = await system.queue_stats(address)
        numbered = [n for n in good if n >= 0]
        bad_handled = len(good) - len(numbered) + len(other)
        accounted = len(letters) + bad_handled + stats.expired
        if len(numbered) >= len(sent) and accounted >= len(sent):
            break
        assert loop.time() < deadline, (len(good), len(letters), len(other), stats)
        await asyncio.sleep(0.1)
    assert numbered == list(range(len(sent)))
    # Each bad one is a dead letter with a reason, or was (by chance) a valid message,
    # or (a bit flipped in its timestamp made it older than the default ttl; which bit
    # does that depends on the day) dropped as expired and counted.
    assert accounted == len(sent)
    assert all(letter.reason for letter in letters)
    assert stats.pending == 0
    assert stats.in_flight == 0


# -- control subjects --------------------------------------------------------------


async def test_bad_messages_on_control_subjects_leave_the_system_serving(
    system: Any, nats_server: Any, ns: str
) -> None:
    good: list[int] = []
    await system.spawn(Keeper, "c", good=good, other=[])
    targets = [
        system.streams.control_subject,  # stream cancels: every system listens
        f"{ns}.h.{system.system_id}.fz-keeper.c",  # forwarding to this host
        system.runtime.mux.prefix + "1",  # the reply inbox of asks in flight
        f"{ns}.sys.actor.failed",  # system events
    ]
    seen_events: list[Any] = []

    async def on_event(env: Any) -> None:
        seen_events.append(env)

    await system.subscribe("actor.failed", on_event, system=True)
    raw = await RawNats.open(nats_server.url)
    try:
        for target in targets:
            for block, body in cases("fz-keeper/c")[::3]:
                await send(raw, target, block, body)
            assert await system.ask("fz-keeper/c", Good(n=len(good)), timeout=2) == len(good) - 1
    finally:
        await raw.close()
    await barrier(system)
    assert system.nc.is_connected
    assert len(good) == len(targets)


# -- the gateway ------------------------------------------------------------------------

ENDPOINTS = [
    ("a2a", "/a2a/gw-echo", {"A2A-Version": "1.0"}),
    ("a2a-0.3", "/a2a/gw-echo", {}),
    ("a2a-rest", "/a2a/gw-echo/message:send", {}),
    ("acp", "/acp/runs", {}),
    ("mcp", "/mcp", {"MCP-Protocol-Version": "2026-07-28"}),
    ("anp", "/anp/gw-echo/rpc", {}),
    ("agora", "/agora/gw-echo", {}),
]
GATEWAY_BODIES = [
    b"\xff\xfe\xfd",
    b'{"a": "\xff"}',
    b"[" * 10_000 + b"]" * 10_000,
    b'{"x":' * 10_000 + b"1" + b"}" * 10_000,
    b"",
    b"null",
    b"[]",
    b'"text"',
    b'{"jsonrpc": "2.0"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": 7}',
    b'{"jsonrpc": "2.0", "id": {}, "method": "SendMessage", "params": []}',
    b"{" + b'"k": 1,' * 5_000 + b'"k": 2}',
]


async def test_the_gateway_answers_every_malformed_body_with_a_protocol_error(
    make_system: Any, nats_server: Any, ns: str, tmp_path: Path
) -> None:
    """Never a 500, never a dead gateway: each edge answers in its own protocol's
    error shape (a JSON body, a 4xx or a 200 carrying the error), and the agent
    answers a valid request afterwards."""
    host = await make_system()
    await host_agents(host)
    async with (
        running_gateway(nats_server.url, ns, tmp_path / "gw.db", "gw-echo") as gw,
        aiohttp.ClientSession() as http,
    ):
        for name, path, headers in ENDPOINTS:
            for body in GATEWAY_BODIES:
                async with http.post(gw.http_url + path, data=body, headers=headers) as resp:
                    text = await resp.text()
                    assert resp.status < 500, (name, body[:40], resp.status, text[:200])
        valid = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": message("still here")},
        }
        async with http.post(
            gw.http_url + "/a2a/gw-echo", json=valid, headers={"A2A-Version": "1.0"}
        ) as resp:
            answer = await resp.json()
    assert "STILL HERE" in str(answer)


# -- the decoders themselves, property-based -------------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
    | st.binary(max_size=20)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=3_000))
def test_any_bytes_decode_to_an_envelope_or_a_typed_error(body: bytes) -> None:
    for encoding in (Encoding.MSGPACK, Encoding.JSON):
        with contextlib.suppress(DecodeError, MessageTooLargeError):
            decode_inbound(body, encoding)


@settings(max_examples=400, deadline=None)
@given(fields=st.dictionaries(st.sampled_from([*FIELDS, "extra"]), _VALUES, max_size=9))
def test_any_envelope_shaped_map_decodes_or_is_a_typed_error(fields: dict[str, Any]) -> None:
    body = msgpack.packb(fields, use_bin_type=True)
    try:
        inbound = decode_inbound(body)
    except (DecodeError, MessageTooLargeError):
        return
    # What is accepted has the envelope's types, strictly.
    assert isinstance(inbound.id, str)
    assert inbound.id
    assert isinstance(inbound.intent, str)
    assert inbound.intent
    assert type(inbound.ts) is int
    assert isinstance(inbound.context.stream, bool)


@settings(max_examples=300, deadline=None)
@given(value=_VALUES, depth=st.integers(min_value=0, max_value=400))
def test_json_from_an_edge_is_read_or_refused_with_a_decode_error(value: Any, depth: int) -> None:
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):  # bytes, NaN: not JSON at all
        return
    body = ("[" * depth + text + "]" * depth).encode()
    if depth + _nesting(value) > 128:
        with pytest.raises(DecodeError, match="deeper than 128"):
            read_json(body)
    else:
        assert read_json(body) == json.loads(body)
    with contextlib.suppress(DecodeError):  # anything but DecodeError fails the test
        read_json(body[: max(1, len(body) // 2)] + b"\xff")


def _nesting(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_nesting(v) for v in value), default=0)
    return 0
