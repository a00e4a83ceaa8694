"""actorbus's header fast path must put the same bytes on the wire as nats-py,
and its header parser must read what nats-py reads."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from _wire import BlockingSubscriber
from nats.aio.client import Client as StockClient

from actorbus.bus.client import Client, EncodedHeaders, encode_headers

HEADER_SETS: list[dict[str, str]] = [
    {"Ab-Id": "abc123", "Ab-Src": "client/x", "Ab-Dst": "echo/1", "Ab-Intent": "Question"},
    {"Ab-Trace": "0" * 32, "Ab-Parent": "p", "Ab-Enc": "json"},
    {"Unicode": "héllo wörld ✓", "Colon": "a: b: c", "Empty": ""},
    {"Spaces": "  padded  ", "Tabs": "\tx\t"},
    {"Newlines": "line1\r\nline2\nline3\r", "Lead": "\nx"},
    {"Token!#$%&'*+-.^_`|~09": "all token characters"},
]


@pytest.mark.parametrize("headers", HEADER_SETS, ids=range(len(HEADER_SETS)))
def test_parser_matches_nats_py(headers: dict[str, str]) -> None:
    block = bytes(encode_headers(headers))
    raw = block[len(b"NATS/1.0\r\n") :]
    assert Client._parse_header_lines(raw) == StockClient._parse_header_lines(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"A: 1\r\nB:2\r\nC:\t3 \r\n\r\n",
        b"Dup: first\r\nDup: second\r\n\r\n",
        b"X: v\xc3\xa9\r\n\r\n",
        b"Bad\xff: skipped\r\nOk: kept\r\n\r\n",
        b"NoColonLine\r\nOk: kept\r\n\r\n",
    ],
    ids=["spacing", "duplicate", "utf8", "non-ascii-name", "no-colon"],
)
def test_parser_matches_nats_py_on_foreign_blocks(raw: bytes) -> None:
    assert Client._parse_header_lines(raw) == StockClient._parse_header_lines(raw)


def test_encode_headers_refuses_bad_names() -> None:
    for name in ("", "has space", "colon:", "new\nline", "é"):
        with pytest.raises(ValueError, match="header name"):
            encode_headers({name: "v"})


def test_encoded_headers_shape() -> None:
    block = encode_headers({"A": "1"})
    assert isinstance(block, EncodedHeaders)
    assert block == b"NATS/1.0\r\nA: 1\r\n\r\n"
    assert encode_headers({}) == b"NATS/1.0\r\n\r\n"


class RawSubscriber:
    """A hand-written NATS protocol client that keeps the raw header bytes of HMSGs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, url: str, subject: str) -> RawSubscriber:
        host, port = url.removeprefix("nats://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        info = await reader.readline()
        assert info.startswith(b"INFO")
        connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1}
        writer.write(f"CONNECT {json.dumps(connect)}\r\nSUB {subject} 1\r\nPING\r\n".encode())
        await writer.drain()
        while (line := await reader.readline()) != b"PONG\r\n":
            assert not line.startswith(b"-ERR"), line
        return cls(reader, writer)

    async def next_headers(self) -> bytes:
        while True:
            line = await self.reader.readline()
            if line == b"PING\r\n":
                self.writer.write(b"PONG\r\n")
                continue
            if line.startswith((b"INFO", b"+OK", b"PONG")):
                continue
            assert line.startswith(b"HMSG"), line
            parts = line.split()
            hdr_len, total = int(parts[-2]), int(parts[-1])
            data = await self.reader.readexactly(total + 2)
            return data[:hdr_len]

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def test_fast_path_bytes_equal_nats_py_bytes(nats_server: Any, ns: str) -> None:
    subject = f"{ns}.hdr"
    sub = await RawSubscriber.open(nats_server.url, subject)
    ours = Client()
    await ours.connect(nats_server.url, allow_reconnect=False)
    stock = await nats.connect(nats_server.url, allow_reconnect=False)
    try:
        for headers in HEADER_SETS:
            await ours.publish(subject, b"x", headers=encode_headers(headers))  # type: ignore[arg-type]
            await ours.flush()
            fast = await asyncio.wait_for(sub.next_headers(), 5)
            await stock.publish(subject, b"x", headers=headers)
            await stock.flush()
            reference = await asyncio.wait_for(sub.next_headers(), 5)
            assert fast == reference, headers
        # a plain dict still takes nats-py's own path
        await ours.publish(subject, b"x", headers={"Plain": "dict"})
        await ours.flush()
        assert await asyncio.wait_for(sub.next_headers(), 5) == b"NATS/1.0\r\nPlain: dict\r\n\r\n"
    finally:
        await ours.close()
        await stock.close()
        await sub.close()


async def test_publishes_keep_their_order_and_their_errors_on_either_path(
    nats_server: Any, ns: str
) -> None:
    """Plain bodies and encoded headers go straight to the write buffer, dict
    headers through nats-py: interleaved, they arrive in the order sent, and what
    nats-py refuses is refused the same way on both."""
    subject = f"{ns}.order"
    stock = await nats.connect(nats_server.url, allow_reconnect=False)
    ours = Client()
    await ours.connect(nats_server.url, allow_reconnect=False)
    got: list[bytes] = []
    all_in = asyncio.Event()

    async def keep(msg: Any) -> None:
        got.append(msg.data)
        if len(got) == 300:
            all_in.set()

    try:
        await stock.subscribe(subject, cb=keep)
        await stock.flush()
        for i in range(300):
            body = str(i).encode()
            if i % 3 == 0:
                await ours.publish(subject, body, headers={"N": str(i)})
            elif i % 3 == 1:
                await ours.publish(subject, body)
            else:
                await ours.publish(subject, body, headers=encode_headers({"N": str(i)}))  # type: ignore[arg-type]
        await asyncio.wait_for(all_in.wait(), 5)
        assert got == [str(i).encode() for i in range(300)]
        with pytest.raises(nats.errors.BadSubjectError):
            await ours.publish("bad subject", b"x")
        with pytest.raises(nats.errors.BadSubjectError):
            await ours.publish(subject, b"x", reply="bad\r\nPUB x 1")
        with pytest.raises(nats.errors.MaxPayloadError):
            await ours.publish(subject, b"x" * (ours.max_payload + 1))
    finally:
        await ours.close()
        await stock.close()


async def test_a_message_sent_at_once_is_on_the_wire_before_the_loop_runs_again(
    nats_server: Any, ns: str
) -> None:
    """A stream's first frame does not wait for the flusher's turn; a message
    queued ahead of it is never overtaken (it then waits with it)."""
    subject = f"{ns}.now"
    sub = BlockingSubscriber(nats_server.url, subject)
    ours = Client()
    await ours.connect(nats_server.url, allow_reconnect=False)
    try:
        assert ours.publish_now(subject, b"first", at_once=True)
        assert sub.next_body() == b"first"  # the loop is held: no flusher ran
        assert ours.publish_now(subject, b"queued")
        assert ours.publish_now(subject, b"behind it", at_once=True)
        await ours.flush()
        assert [sub.next_body(), sub.next_body()] == [b"queued", b"behind it"]
        # without at_once a message waits for the loop's next pass
        assert ours.publish_now(subject, b"later")
        assert sub.next_body(0.2) is None
        await ours.flush()
        assert sub.next_body() == b"later"
    finally:
        await ours.close()
        sub.close()


async def test_headers_round_trip_between_clients(nats_server: Any, ns: str) -> None:
    subject = f"{ns}.rt"
    ours = Client()
    await ours.connect(nats_server.url, allow_reconnect=False)
    stock = await nats.connect(nats_server.url, allow_reconnect=False)
    try:
        got_ours = await ours.subscribe(subject)
        got_stock = await stock.subscribe(subject)
        await ours.flush()
        await stock.flush()
        for headers in HEADER_SETS:
            await ours.publish(subject, b"x", headers=encode_headers(headers))  # type: ignore[arg-type]
            await ours.flush()
            a = await got_ours.next_msg(5)
            b = await got_stock.next_msg(5)
            assert a.headers == b.headers
            expected = {
                k: v.replace("\r", " ").replace("\n", " ").strip() for k, v in headers.items()
            }
            assert a.headers == expected
    finally:
        await ours.close()
        await stock.close()


@pytest.mark.parametrize("headers", HEADER_SETS, ids=range(len(HEADER_SETS)))
def test_lazy_headers_read_like_the_parsed_dict(headers: dict[str, str]) -> None:
    from actorbus.bus.client import LazyHeaders

    raw = bytes(encode_headers(headers))[len(b"NATS/1.0\r\n") :]
    parsed = Client._parse_header_lines(raw)
    lazy = LazyHeaders(raw)
    for key in [*parsed, "Missing", "Ab-Enc", "ab-id"]:
        assert (key in lazy) == (key in parsed)
        assert lazy.get(key) == parsed.get(key)
        assert lazy.get(key, "d") == parsed.get(key, "d")
    assert bool(lazy) == bool(parsed)
    assert dict(lazy) == parsed
    assert len(lazy) == len(parsed)
    assert lazy == parsed


def test_lazy_headers_answer_absent_names_without_parsing() -> None:
    from actorbus.bus.client import LazyHeaders

    lazy = LazyHeaders(b"Ab-Id: x\r\nAb-Src: client/y\r\n\r\n")
    assert lazy
    assert lazy.get("Ab-Enc") is None
    assert "Ab-Enc" not in lazy
    with pytest.raises(KeyError):
        lazy["Ab-Enc"]
    assert lazy._parsed is None  # nothing was parsed for those
    assert lazy["Ab-Src"] == "client/y"


class Echoes:
    """An actorbus client that reads back the headers of what it publishes."""

    def __init__(self, nc: Client, subject: str) -> None:
        self.nc = nc
        self.subject = subject
        self.got: asyncio.Queue[Any] = asyncio.Queue()

    async def round_trip(self, headers: Any) -> Any:
        """The headers a message sent with ``headers`` arrives with."""
        await self.nc.publish(self.subject, b"x", headers=headers)
        return await asyncio.wait_for(self.got.get(), 5)


@contextlib.asynccontextmanager
async def echoes(url: str, subject: str) -> AsyncIterator[Echoes]:
    nc = Client()
    await nc.connect(url)
    try:
        back = Echoes(nc, subject)

        async def keep(msg: Any) -> None:
            await back.got.put(msg.headers)

        await nc.subscribe(subject, cb=keep)
        yield back
    finally:
        await nc.close()


async def test_actorbus_blocks_arrive_as_lazy_headers_others_as_dicts(nats_server: Any) -> None:
    from actorbus.bus.client import LazyHeaders

    async with echoes(nats_server.url, "lazy.check") as back:
        first = await back.round_trip(encode_headers({"Ab-Id": "1", "X": "y"}))
        second = await back.round_trip({"Other": "z"})
    assert isinstance(first, LazyHeaders)
    assert dict(first) == {"Ab-Id": "1", "X": "y"}
    assert type(second) is dict
    assert second == {"Other": "z"}


async def test_headers_passed_on_are_the_bytes_that_came(nats_server: Any) -> None:
    """A message sent on (a keyed actor's message forwarded to its holder) keeps
    an actorbus block byte for byte, never parsed; other headers are encoded."""
    from actorbus.bus.client import header_block, with_header

    ours = encode_headers({"Ab-Id": "1", "Ab-Trace": "t"})
    async with echoes(nats_server.url, "pass.on") as back:
        first = await back.round_trip(ours)
        second = await back.round_trip({"Other": "z"})
        assert header_block(first) == ours
        assert first._parsed is None  # passed on without being read
        assert header_block(second) == encode_headers({"Other": "z"})
        assert header_block(None) is None
        third = await back.round_trip(with_header(header_block(first), "Ab-Fwd", "ask"))
    assert dict(third) == {"Ab-Id": "1", "Ab-Trace": "t", "Ab-Fwd": "ask"}


def test_a_single_header_read_matches_the_full_parse() -> None:
    """``get`` reads one line when it can; whenever that could differ from the
    parsed block (a repeat, a name inside another value) it parses instead."""
    from actorbus.bus.client import Client, LazyHeaders

    blocks = [
        b"Ab-Id: 1\r\nAb-Session: s.t.u\r\n\r\n",
        b"Ab-Session: first\r\nAb-Session: second\r\n\r\n",
        b"X: has Ab-Session: inside\r\nAb-Session: real\r\n\r\n",
        b"X: has Ab-Session: inside\r\n\r\n",
        b"Ab-Session:   spaced   \r\n\r\n",
    ]
    for raw in blocks:
        parsed = Client._parse_header_lines(raw)
        assert LazyHeaders(raw).get("Ab-Session") == parsed.get("Ab-Session"), raw
        assert LazyHeaders(raw).get("Nope", "d") == "d"
