"""The bus: the transport seam the actor runtime is written against, its two
buses (NATS: embedded server, connection; in-process: ``LocalBus``), and the
subject scheme. Knows nothing of actors."""

from actorbus.bus.connection import BusConnection, ConnectOptions
from actorbus.bus.local import LocalBus, LocalConnection
from actorbus.bus.server import EmbeddedServer, ServerConfig, ServerStartError
from actorbus.bus.subjects import Address, Subjects
from actorbus.bus.transport import Messaging, Transport

__all__ = [
    "Address",
    "BusConnection",
    "ConnectOptions",
    "EmbeddedServer",
    "LocalBus",
    "LocalConnection",
    "Messaging",
    "ServerConfig",
    "ServerStartError",
    "Subjects",
    "Transport",
]
