"""The message parser must read the NATS wire exactly as nats-py's parser does,
however the bytes are split across reads, and a message it takes straight to its
subscription must arrive as it would through nats-py's path."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import nats
import pytest
from nats.errors import ProtocolError, SlowConsumerError
from nats.protocol.parser import Parser

from actorbus.bus.client import Client, LazyHeaders, encode_headers
from actorbus.bus.wire_parser import MessageParser
from actorbus.testing import eventually

AB_BLOCK = bytes(encode_headers({"Ab-Id": "1", "Ab-Dst": "echo/1"}))
OTHER_BLOCK = b"NATS/1.0\r\nX: y\r\n\r\n"
STATUS_BLOCK = b"NATS/1.0 503\r\n\r\n"


def msg(subject: str, sid: int, payload: bytes, reply: str = "") -> bytes:
    line = f"MSG {subject} {sid} {reply + ' ' if reply else ''}{len(payload)}\r\n"
    return line.encode() + payload + b"\r\n"


def hmsg(subject: str, sid: int, headers: bytes, payload: bytes, reply: str = "") -> bytes:
    total = len(headers) + len(payload)
    line = f"HMSG {subject} {sid} {reply + ' ' if reply else ''}{len(headers)} {total}\r\n"
    return line.encode() + headers + payload + b"\r\n"


WIRE = b"".join(
    [
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
        msg("a.b", 1, b"hello"),
        b"+OK\r\n",
        msg("a.b", 2, b"with reply", reply="_INBOX.r.1"),
        hmsg("c.d", 3, AB_BLOCK, b"ab headers"),
        hmsg("c.d", 3, AB_BLOCK, b"ab headers, reply", reply="_INBOX.r.2"),
        b"PING\r\n",
        hmsg("e", 4, OTHER_BLOCK, b""),
        msg("f", 5, b""),
        hmsg("g", 6, STATUS_BLOCK, b"", reply=""),
        msg("h", 7, b"a payload\r\nMSG h 7 3\r\nnot a line"),
        b"PONG\r\n",
        msg("i.j.k", 8, bytes(range(256)) * 4),
        b"-ERR 'Permissions Violation for Subscription to \"x\"'\r\n",
        msg("l", 9, b"last", reply="r"),
    ]
)


class Recorder:
    """Stands where the client stands for a parser: records what it is handed."""

    def __init__(self, take_now: bool) -> None:
        self.take_now = take_now
        self.seen: list[tuple[Any, ...]] = []

    def deliver_now(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> bool:
        if self.take_now:
            self.seen.append(("msg", sid, subject, reply, data, headers))
        return self.take_now

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.seen.append(("msg", sid, bytes(subject), bytes(reply), data, headers))

    async def _process_ping(self) -> None:
        self.seen.append(("ping",))

    async def _process_pong(self) -> None:
        self.seen.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.seen.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.seen.append(("err", err))


async def read(parser_type: type[Parser], chunks: list[bytes], take_now: bool = True) -> list[Any]:
    sink = Recorder(take_now)
    parser = parser_type(sink)
    for chunk in chunks:
        await parser.parse(chunk)
    return sink.seen


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


async def test_the_wire_in_one_read_reads_as_nats_py_reads_it() -> None:
    reference = await read(Parser, [WIRE])
    assert len([e for e in reference if e[0] == "msg"]) == 10
    assert await read(MessageParser, [WIRE]) == reference
    assert await read(MessageParser, [WIRE], take_now=False) == reference


async def test_the_wire_split_anywhere_reads_as_nats_py_reads_it() -> None:
    """Every cut point once, then random cuts: a line or a payload split across
    reads, and a read that ends just before a line's CRLF."""
    reference = await read(Parser, [WIRE])
    for cut in range(1, len(WIRE)):
        assert await read(MessageParser, split(WIRE, [cut])) == reference, cut
    rng = random.Random(7)
    for _ in range(300):
        cuts = rng.sample(range(1, len(WIRE)), rng.randint(2, 40))
        assert await read(MessageParser, split(WIRE, cuts)) == reference, cuts
    assert await read(MessageParser, [bytes([b]) for b in WIRE]) == reference


@pytest.mark.parametrize(
    "line",
    [b"MSG a x 3\r\nabc\r\n", b"MSG a 1 -3\r\n", b"HMSG a 1 9 3\r\nabc\r\n", b"HMSG a 1 z 3\r\n"],
    ids=["sid", "negative size", "headers past the end", "header size"],
)
async def test_a_malformed_message_line_is_a_protocol_error(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        await read(MessageParser, [line])


async def test_an_unknown_line_is_the_protocol_error_nats_py_raises() -> None:
    for parser_type in (Parser, MessageParser):
        with pytest.raises(ProtocolError):
            await read(parser_type, [msg("a", 1, b"x") + b"WHAT is this\r\n"])


async def test_messages_taken_at_once_arrive_as_through_nats_py(nats_server: Any) -> None:
    """A plain subscription's messages come through ``deliver_now``, with actorbus
    blocks as lazy headers and other blocks parsed by nats-py's path."""
    nc = Client()
    await nc.connect(nats_server.url, allow_reconnect=False)
    stock = await nats.connect(nats_server.url, allow_reconnect=False)
    got: asyncio.Queue[Any] = asyncio.Queue()
    try:
        await nc.subscribe("wp.>", cb=got.put)
        await nc.flush()
        await stock.publish("wp.plain", b"plain", reply="back.1")
        await stock.publish("wp.other", b"other", headers={"X": "y"})
        await nc.publish("wp.ours", b"ours", headers=encode_headers({"Ab-Id": "7"}))  # type: ignore[arg-type]
        await stock.publish("wp.big", b"z" * 300_000)
        await stock.flush()
        arrived = [await asyncio.wait_for(got.get(), 5) for _ in range(4)]
        big, other, ours, plain = sorted(arrived, key=lambda m: m.subject)  # two connections
        assert (plain.subject, plain.reply, plain.data, plain.headers) == (
            "wp.plain",
            "back.1",
            b"plain",
            None,
        )
        assert type(other.headers) is dict
        assert other.headers == {"X": "y"}
        assert isinstance(ours.headers, LazyHeaders)
        assert dict(ours.headers) == {"Ab-Id": "7"}
        assert big.data == b"z" * 300_000  # over many reads
        assert nc.stats["in_msgs"] == 4
        assert nc.stats["in_bytes"] == 5 + 5 + 4 + 300_000
    finally:
        await nc.close()
        await stock.close()


async def test_a_subscription_over_its_limit_gets_nats_pys_slow_consumer_error(
    nats_server: Any,
) -> None:
    """Past its pending limit a message is declined by the fast path; nats-py's
    path drops it and reports the slow consumer, and the others still arrive."""
    errors: asyncio.Queue[Exception] = asyncio.Queue()

    async def on_error(err: Exception) -> None:
        await errors.put(err)

    nc = Client()
    await nc.connect(nats_server.url, allow_reconnect=False, error_cb=on_error)
    release = asyncio.Event()
    handled: list[bytes] = []

    async def slow(m: Any) -> None:
        await release.wait()
        handled.append(m.data)

    try:
        await nc.subscribe("slow.one", cb=slow, pending_msgs_limit=5)
        await nc.flush()
        for n in range(20):
            await nc.publish("slow.one", str(n).encode())
        await nc.flush()
        err = await asyncio.wait_for(errors.get(), 5)
        assert isinstance(err, SlowConsumerError)
        assert err.subject == "slow.one"
        release.set()
        await nc.flush()
        # the first five, queued before the limit, and at most one more: the one
        # that found the slot freed when the callback took its first message
        # (which message that is depends on when the callback task started)
        await eventually(lambda: len(handled) >= 5, 5, "the queued messages handled")
        await nc.flush()
        numbers = [int(d) for d in handled]
        assert numbers[:5] == [0, 1, 2, 3, 4]
        assert numbers == sorted(set(numbers))
        assert len(numbers) <= 6
    finally:
        await nc.close()
