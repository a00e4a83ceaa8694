"""What a NATS server asks of its clients, read from the INFO line it sends first.

A client that connects without TLS to a server that requires it, or without
credentials to one that wants them, fails with an error that does not say
why. The server says it in its INFO (``tls_required``, ``auth_required``)
before anything else, so a tool can read that and connect the right way.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

from actorbus._nats_import import is_websocket
from actorbus.codecs.errors import ConnectionLostError


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
                    line = await reader.readline()
                finally:
                    writer.close()
    except (OSError, TimeoutError) as exc:
        raise ConnectionLostError(f"no NATS server answered at {url}: {exc}") from None
    if not line.startswith(b"INFO "):
        raise ConnectionLostError(f"{url} did not greet like a NATS server: {line[:60]!r}")
    try:
        info = json.loads(line[5:])
    except ValueError:
        raise ConnectionLostError(f"{url} sent an unreadable INFO line") from None
    return info if isinstance(info, dict) else {}


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
