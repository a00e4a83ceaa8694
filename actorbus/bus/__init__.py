"""The NATS layer: embedded server, connection, subject scheme. Knows nothing of actors."""

from actorbus.bus.connection import BusConnection, ConnectOptions
from actorbus.bus.server import EmbeddedServer, ServerConfig, ServerStartError
from actorbus.bus.subjects import Address, Subjects

__all__ = [
    "Address",
    "BusConnection",
    "ConnectOptions",
    "EmbeddedServer",
    "ServerConfig",
    "ServerStartError",
    "Subjects",
]
