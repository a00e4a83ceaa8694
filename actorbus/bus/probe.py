"""What a NATS server asks of its clients, read from the INFO line it sends first.

A client that connects without TLS to a server that requires it, or without
credentials to one that wants them, fails with an error that does not say
why. The server says it in its INFO (``tls_required``, ``auth_required``)
before anything else, so a tool can read that and connect the right way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

from actorbus._nats_import import is_websocket
from actorbus.codecs.errors import ConnectionLostError

_HANDSHAKE_TIMEOUT = 0.5  # seconds; well within server_info's own timeout


async def server_info(url: str, timeout: float = 2.0) -> dict[str, Any]:
    """The INFO object of the server at ``url`` (ConnectionLostError if there is
    none to read within ``timeout``)."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    try:
        async with asyncio.timeout(timeout):
            if is_websocket(url):
                line = await _websocket_greeting(url)
            else:
                host, port = parts.hostname or "127.0.0.1", parts.port or 4222
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    info = _parsed(url, await reader.readline())
                    if info.get("tls_required"):
                        await _finish_handshake(writer, host)
                finally:
                    writer.close()
                return info
    except (OSError, TimeoutError) as exc:
        raise ConnectionLostError(f"no NATS server answered at {url}: {exc}") from None
    return _parsed(url, line)


def _parsed(url: str, line: bytes) -> dict[str, Any]:
    if not line.startswith(b"INFO "):
        raise ConnectionLostError(f"{url} did not greet like a NATS server: {line[:60]!r}")
    try:
        info = json.loads(line[5:])
    except ValueError:
        raise ConnectionLostError(f"{url} sent an unreadable INFO line") from None
    return info if isinstance(info, dict) else {}


async def _finish_handshake(writer: asyncio.StreamWriter, host: str) -> None:
    """Complete the TLS handshake a TLS server waits for before closing: a client
    that leaves in the middle of one is logged as an error by the server, once
    for every process that looked at its INFO line. Nothing is sent over it, so
    nothing is verified."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA store loaded: nothing to trust
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):  # INFO is read already
        async with asyncio.timeout(_HANDSHAKE_TIMEOUT):
            await writer.start_tls(context, server_hostname=host)


async def _websocket_greeting(url: str) -> bytes:
    """The first frame a NATS server's WebSocket endpoint sends: its INFO line.
    Read without checking a ``wss://`` certificate, as the INFO line of a
    ``nats://`` URL is read before TLS: it only says how to connect."""
    import aiohttp  # only for a WebSocket URL: nats-py's own WebSocket client

    try:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, ssl=False) as ws,
        ):
            frame = await ws.receive()
    except aiohttp.ClientError as exc:
        raise OSError(str(exc) or type(exc).__name__) from None
    return frame.data if isinstance(frame.data, bytes) else b""


def wants_security(info: dict[str, Any]) -> bool:
    """Whether the server takes only authenticated (or TLS) clients."""
    return bool(info.get("auth_required") or info.get("tls_required"))
