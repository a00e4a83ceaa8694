"""The nats-py client, with cheaper headers.

Every actorbus message carries its routing facts in NATS headers, so header
work runs on every hop, twice. nats-py validates and encodes header names one
by one with regular expressions when publishing, and checks names character by
character in a generator when receiving. Here:

- a publish may pass :class:`EncodedHeaders` (built once by
  :func:`encode_headers`, whose values actorbus has already validated) and the
  block goes on the wire as is; plain dicts still take nats-py's own path;
- the receive-side parser gives the same result as nats-py's for well-formed
  headers (ASCII token names, trimmed UTF-8 values) at a fraction of the cost.

It is also where the connection is made robust against what others send. A
header block anyone can publish (``NATS\r\n\r\n``, invalid UTF-8 in a status
line ...) used to raise inside nats-py's read loop, which then stopped while
the client still said "connected": one message deafened the whole process.
Here a block that cannot be parsed becomes :class:`BadHeaders`, and the message
travels on to be refused as a bad message by whoever reads it; and if the read
loop ever ends while the connection is up, the client reconnects at once.

``bench/ask.py`` measures the effect; ``tests/bus/test_bus_client.py`` checks the
bytes against nats-py's encoder.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

from nats.aio.client import PING_PROTO, Client as _NatsClient
from nats.aio.transport import TcpTransport
from nats.errors import ProtocolError
from nats.protocol.command import hpub_cmd, pub_cmd

from actorbus.bus.wire_parser import MessageParser

log = logging.getLogger("actorbus.bus")

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HDR_LINE_SIZE = len(b"NATS/1.0")
_ACTORBUS_BLOCK = b"NATS/1.0\r\nAb-"  # blocks actorbus wrote: their routing headers lead
_SPACE = ord(" ")
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_VALID_NAMES: set[str] = set()  # names already checked: the same few recur on every message


def _publishable(subject: str) -> bool:
    """What nats-py's publish checks of a subject (no space, tab, CR or LF), with
    four scans instead of its regular expression: twice in every ask."""
    return not (" " in subject or "\t" in subject or "\r" in subject or "\n" in subject)


class EncodedHeaders(bytes):
    """A complete NATS header block (``NATS/1.0\\r\\n ... \\r\\n\\r\\n``)."""


def encode_headers(headers: dict[str, str]) -> EncodedHeaders:
    """Encode headers the way nats-py does, in one pass.

    Names must be HTTP tokens (checked); CR and LF in values become spaces, as in
    nats-py, so a value can never inject a header line.
    """
    parts = ["NATS/1.0\r\n"]
    for name, value in headers.items():
        if name not in _VALID_NAMES:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"invalid NATS header name {name!r}")
            if len(_VALID_NAMES) < 1024:
                _VALID_NAMES.add(name)
        if "\r" in value or "\n" in value:
            value = value.translate(_NEWLINES)
        parts.append(f"{name}: {value.strip()}\r\n")
    parts.append("\r\n")
    return EncodedHeaders("".join(parts).encode())


def header_block(headers: Mapping[str, str] | None) -> EncodedHeaders | None:
    """The headers read off a message, encoded to send on: an actorbus block as
    it came (never parsed), any other encoded afresh."""
    if headers is None:
        return None
    if isinstance(headers, LazyHeaders):
        return EncodedHeaders(b"NATS/1.0\r\n" + headers.raw)
    return encode_headers(dict(headers))


def with_header(block: bytes, name: str, value: str) -> EncodedHeaders:
    """``block`` (an encoded header block) with one more header line."""
    return EncodedHeaders(block[:-2] + _header_line(name, value) + b"\r\n")


@functools.lru_cache(maxsize=256)
def _header_line(name: str, value: str) -> bytes:
    """One encoded header line; kept, as the same few (a stream's batch size, a
    forward's mode) are added to every such message (a resend's one-off stamp
    passes through the bounded cache too)."""
    return encode_headers({name: value})[len(b"NATS/1.0\r\n") : -2]


class LazyHeaders(Mapping[str, str]):
    """The headers of an actorbus envelope, parsed only when someone reads them.

    Every actorbus message carries its routing facts in headers, but the actor
    receiving it routes by subject and reads the body; parsing five header lines
    it never looks at cost about a tenth of its time per message. A lookup of a
    name that does not occur in the block at all answers without parsing;
    ``get`` of a name that occurs once reads that one line; anything else parses
    once (with the same parser) and reads the dict.
    """

    __slots__ = ("_parsed", "_raw")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._parsed: dict[str, str] | None = None

    @property
    def raw(self) -> bytes:
        """The header lines as they came (after ``NATS/1.0``, through the blank line)."""
        return self._raw

    def _dict(self) -> dict[str, str]:
        if self._parsed is None:
            self._parsed = Client._parse_header_lines(self._raw)
        return self._parsed

    def _absent(self, key: object) -> bool:
        return self._parsed is None and isinstance(key, str) and key.encode() not in self._raw

    def __getitem__(self, key: str) -> str:
        if self._absent(key):
            raise KeyError(key)
        return self._dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        if self._parsed is None and isinstance(key, str):
            raw, name = self._raw, key.encode() + b":"
            at = raw.find(name)
            if at < 0:
                return default
            if at == 0 or raw[at - 2 : at] == b"\r\n":  # one line read, not the block
                end = raw.find(b"\r\n", at)
                if end >= 0 and raw.find(name, end) < 0:
                    return raw[at + len(name) : end].decode("utf-8", "replace").strip()
        return self._dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return not self._absent(key) and key in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __bool__(self) -> bool:
        # `if msg.headers:` must not parse: a leading well-formed line settles it.
        if self._parsed is None:
            name, sep, _ = self._raw.partition(b"\r\n")[0].partition(b":")
            if sep and name and name.isascii() and len(name.split()) == 1:
                return True
        return bool(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return f"LazyHeaders({self._dict()!r})"


class BadHeaders(Mapping[str, str]):
    """The header block of a message that could not be parsed: no headers at all
    to anyone who looks them up, and the reason for whoever must refuse it."""

    __slots__ = ("problem", "raw")

    def __init__(self, raw: bytes, problem: str) -> None:
        self.raw = raw
        self.problem = problem

    def __getitem__(self, key: str) -> str:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"BadHeaders({self.raw[:64]!r}: {self.problem})"


def _ours(headers: bytes) -> LazyHeaders | None:
    """A block actorbus wrote, to be parsed when read; None for any other."""
    if headers.startswith(_ACTORBUS_BLOCK):
        return LazyHeaders(headers[_HDR_LINE_SIZE + 2 :])
    return None


class Client(_NatsClient):
    def __init__(self) -> None:
        super().__init__()
        self._ps = MessageParser(self)

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        if (headers is None or isinstance(headers, EncodedHeaders)) and self.publish_now(
            subject, payload, reply, headers
        ):
            return
        await super().publish(subject, payload, reply, headers)

    def publish_now(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        headers: EncodedHeaders | None = None,
        at_once: bool = False,
    ) -> bool:
        """Queue a publish at once, as nats-py's ``publish`` would, without its four
        coroutines (measured: an actor's CPU per ask 66 -> 60 µs). False, with nothing
        done, when that path must take it: not connected (it buffers or raises),
        the buffer over its limit (it waits for the flush), a payload too large or
        a bad subject (it says why).

        ``at_once``: written to the socket now when nothing is queued ahead of it,
        rather than by the flusher at the loop's next pass: for a message whose
        latency counts and which comes alone (a stream's first frame). Replies in
        bulk are left to the flusher, which writes a loop pass's worth in one call."""
        size = len(payload)
        if not self.is_connected or size > self._max_payload or not subject:
            return False
        if not self._skip_subject_validation and not (
            _publishable(subject) and (not reply or _publishable(reply))
        ):
            return False  # nats-py's publish says what is wrong with it
        if headers is None:
            command = pub_cmd(subject, reply, payload)
        else:
            command = hpub_cmd(subject, reply, headers, payload)
        if self._pending_data_size + len(command) > self._max_pending_size > 0:
            return False
        flush = self._flush_queue
        flusher = self._flusher_task
        if flush is None or flusher is None or flusher.done():
            return False
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        if at_once and not self._pending and flush.empty():
            transport = self._transport
            # A socket's writer sends at once; a WebSocket's only queues until drained.
            if isinstance(transport, TcpTransport):
                transport.write(command)  # type: ignore[no-untyped-call]  # nothing ahead of it: in order
                return True
        self._pending.append(command)
        self._pending_data_size += len(command)
        if flush.empty():  # kick the flusher, as nats-py does (it sets the future)
            flush.put_nowait(asyncio.get_running_loop().create_future())
        return True

    def deliver_now(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> bool:
        """Queue a message read off the wire for its plain subscription, as nats-py's
        ``_process_msg`` would, without its two coroutines. False, with nothing
        done, when that path must take it: JetStream's subscriptions (flow control,
        ordering), old-style requests, a message limit, a subscription over its
        pending limits (the slow consumer error), or headers other than the ones
        actorbus writes (status lines among them)."""
        sub = self._subs.get(sid)
        if sub is None or sub._jsi is not None or sub._future is not None or sub._max_msgs:
            return False
        size = len(data)
        limit = sub._pending_bytes_limit
        queue = sub._pending_queue
        if (limit > 0 and sub._pending_size + size >= limit) or queue.full():
            return False
        parsed = _ours(headers) if headers else None
        if headers and parsed is None:
            return False
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += size
        sub._received += 1
        sub._pending_size += size
        queue.put_nowait(
            self.msg_class(
                subject=subject.decode(),
                reply=reply.decode(),
                data=data,
                headers=parsed,  # type: ignore[arg-type]  # a Mapping, read as nats-py's dict
                _client=self,
                _sid=sid,
            )
        )
        return True

    async def _send_ping(self, future: asyncio.Future[bool] | None = None) -> None:
        # nats-py writes PING straight to the socket, ahead of commands still in
        # the pending buffer, so a PONG could come back before a SUB reached the
        # server. Queued behind them, a flush() proves the server has them all.
        if future is None:
            future = asyncio.get_running_loop().create_future()
        self._pongs.append(future)
        await self._send_command(PING_PROTO)
        await self._flush_pending()

    async def _send_publish(
        self,
        subject: str,
        reply: str,
        payload: bytes,
        payload_size: int,
        headers: Any,
    ) -> None:
        if not isinstance(headers, EncodedHeaders):
            await super()._send_publish(subject, reply, payload, payload_size, headers)
            return
        if not subject:
            await super()._send_publish(subject, reply, payload, payload_size, None)
            return
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(hpub_cmd(subject, reply, headers, payload))
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_headers(  # type: ignore[override]
        self, headers: bytes
    ) -> Mapping[str, str] | None:
        if not headers:
            return None
        ours = _ours(headers)
        if ours is not None:  # the hot path: parsed when read
            return ours
        try:
            if not headers.startswith(b"NATS/1.0"):
                raise ValueError("the block does not start with NATS/1.0")
            # Status lines (no responders, JetStream flow control) keep nats-py's path.
            if len(headers) <= _HDR_LINE_SIZE or headers[_HDR_LINE_SIZE] == _SPACE:
                return await super()._process_headers(headers)
            if headers[_HDR_LINE_SIZE : _HDR_LINE_SIZE + 2] != b"\r\n":
                raise ValueError("the version line does not end after NATS/1.0")
            return self._parse_header_lines(headers[_HDR_LINE_SIZE + 2 :]) or None
        except Exception as exc:  # never inside the read loop: the message is refused later
            return BadHeaders(headers, f"malformed NATS header block ({type(exc).__name__}: {exc})")

    async def _read_loop(self) -> None:
        # nats-py's loop ends on any unexpected exception and leaves the client
        # "connected" but deaf. Whatever ended it, a connection that is still up
        # gets a reconnect now, rather than at the next missed ping minutes later.
        await super()._read_loop()
        if self.is_connected and not self.is_draining:
            log.error("the NATS read loop stopped while connected; reconnecting")
            await self._process_op_err(ProtocolError())

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in raw.decode("utf-8", "replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep:
                continue
            name = name.strip()
            # Names are ASCII tokens: skip anything else, as nats-py does.
            if name and name.isascii() and len(name.split()) == 1:
                out[name] = value.strip()
        return out
