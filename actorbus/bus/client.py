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

``bench/ask.py`` measures the effect; ``tests/test_bus_client.py`` checks the
bytes against nats-py's encoder.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from nats.aio.client import PING_PROTO
from nats.aio.client import Client as _NatsClient
from nats.protocol.command import hpub_cmd

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HDR_LINE_SIZE = len(b"NATS/1.0")
_SPACE = ord(" ")
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_VALID_NAMES: set[str] = set()  # names already checked: the same few recur on every message


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


class Client(_NatsClient):
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

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        # The common block (no inline status line) goes straight to the parser;
        # status lines (no responders, JetStream flow control) keep nats-py's path.
        if headers and len(headers) > _HDR_LINE_SIZE and headers[_HDR_LINE_SIZE] != _SPACE:
            return self._parse_header_lines(headers[_HDR_LINE_SIZE + 2 :]) or None
        return await super()._process_headers(headers)

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
