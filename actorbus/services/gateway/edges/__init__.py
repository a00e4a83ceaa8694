"""Protocol edges of the gateway: one module per outside protocol.

An edge is an :class:`Edge`: a ``name`` and ``routes()`` (aiohttp route
definitions), built with the gateway's :class:`~..core.GatewayCore` and
:class:`~..settings.GatewaySettings`. To add a protocol, write its module
(see :mod:`.a2a`) and add one line to :data:`EDGES`; ``GatewaySettings.edges``
(``--edges`` on the command line) picks which ones a gateway serves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar, Final

from aiohttp import web

from actorbus.codecs.errors import UnsupportedError

if TYPE_CHECKING:
    from actorbus.services.gateway.core import GatewayCore
    from actorbus.services.gateway.settings import GatewaySettings

EDGES: Final[dict[str, str]] = {
    "a2a": "actorbus.services.gateway.edges.a2a:A2AEdge",
    "acp": "actorbus.services.gateway.edges.acp:AcpEdge",
    "anp": "actorbus.services.gateway.edges.anp:AnpEdge",
    "agora": "actorbus.services.gateway.edges.agora:AgoraEdge",
    "mcp": "actorbus.services.gateway.edges.mcp:McpEdge",
}


class Edge:
    """One protocol's face on the gateway: ``name``, the routes it serves, and
    what it holds released by ``close()`` when the gateway stops."""

    name: ClassVar[str]

    def __init__(self, core: GatewayCore, settings: GatewaySettings) -> None:
        self.core = core
        self.settings = settings

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the edge holds (nothing, unless it says otherwise)."""


def load(name: str) -> type[Edge]:
    """The edge class of protocol ``name``."""
    target = EDGES.get(name.lower())
    if target is None:
        raise UnsupportedError(f"no gateway edge {name!r} (known: {', '.join(sorted(EDGES))})")
    module, _, attr = target.partition(":")
    cls: type[Edge] = getattr(importlib.import_module(module), attr)
    return cls
