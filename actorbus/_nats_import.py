"""nats-py, imported without the HTTP client it needs for WebSocket connections only.

``nats.aio.transport`` imports aiohttp (and with it yarl, multidict, attrs and two
SSL contexts loaded with the system's CA certificates) as it is imported: about
0.15 s of every process start, a quarter of ``import actorbus``, paid by every
agent process for a transport few use. A restarted agent serves that much later
(the Fail-Storm recovery), and every CLI command starts that much slower.

Importing this module imports nats-py with aiohttp hidden, where neither was
imported yet (``actorbus/__init__.py`` imports it first of all);
:func:`enable_websockets` hands nats-py the real aiohttp before a ``ws://`` or
``wss://`` connection. Python 3.11's ``importlib.util.LazyLoader``
cannot defer it instead: the import system reads a lazy module's ``__spec__``,
which loads it.
"""

from __future__ import annotations

import importlib
import sys

_WEBSOCKET_SCHEMES = ("ws://", "wss://")


def import_nats() -> None:
    """Import nats-py, leaving out aiohttp unless something imported it already."""
    if "nats" in sys.modules or "aiohttp" in sys.modules:
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # `import aiohttp` fails
    try:
        importlib.import_module("nats.aio.transport")
    finally:
        del sys.modules["aiohttp"]  # a later `import aiohttp` (the gateway's) works


def is_websocket(url: str) -> bool:
    return url.startswith(_WEBSOCKET_SCHEMES)


def enable_websockets(servers: list[str]) -> None:
    """Give nats-py the aiohttp it left out when any of ``servers`` is a WebSocket URL."""
    if not any(is_websocket(url) for url in servers):
        return
    transport = vars(importlib.import_module("nats.aio.transport"))
    if transport["aiohttp"] is None:
        transport["aiohttp"] = importlib.import_module("aiohttp")
        transport["multidict"] = importlib.import_module("multidict")


import_nats()
