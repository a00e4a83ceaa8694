"""What ``ActorSystem.start()`` and ``ActorSystem.connect()`` take (a module of
its own, so what prepares a system's options needs not import the system)."""

from __future__ import annotations

from typing import TypedDict

from actorbus.actors.security_settings import SecuritySettings
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings
from actorbus.codecs.wire import Encoding, SizeLimits
from actorbus.state.store import StateSettings


class SystemOptions(TypedDict, total=False):
    """What ``ActorSystem.start()`` and ``ActorSystem.connect()`` take besides the
    URL (see the README's Configuration table for the defaults)."""

    namespace: str
    encoding: Encoding
    limits: SizeLimits
    default_timeout: float
    debug: bool
    stream_window: int
    stream_credit_timeout: float
    stream_start_timeout: float
    durable: DurableSettings | None
    state: StateSettings | None
    activation_ttl: float
    registry: bool
    name: str
    connect_options: ConnectOptions | None
    tracing: bool | None
    security: SecuritySettings | None
