"""The HTTP gateway: outside clients of agent protocols reach actors.

:class:`GatewayService` runs one aiohttp server; each protocol edge (A2A, ACP,
ANP, Agora, MCP: see :mod:`.edges`) serves the agents of the registry (actor types) over
its protocol, backed by one task model (:mod:`.core`, :mod:`.tasks`) persisted
in SQLite (:mod:`.store`).
"""

from actorbus.actors.interim import AuthRequired, InputRequired, Working
from actorbus.extras import missing

try:
    from actorbus.services.gateway.core import GatewayCore
    from actorbus.services.gateway.service import GatewayService
    from actorbus.services.gateway.settings import GatewaySettings
    from actorbus.services.gateway.tasks import GatewayTask, TaskUpdate
except ImportError as exc:  # aiohttp, aiosqlite, jsonschema: the [gateway] extra
    raise missing("gateway", "the HTTP gateway", exc) from exc

__all__ = [
    "AuthRequired",
    "GatewayCore",
    "GatewayService",
    "GatewaySettings",
    "GatewayTask",
    "InputRequired",
    "TaskUpdate",
    "Working",
]
