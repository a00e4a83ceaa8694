"""What ``ActorSystem.start()`` and ``ActorSystem.connect()`` take (a module of
its own, so what prepares a system's options needs not import the system)."""

from __future__ import annotations

import dataclasses
from typing import TypedDict

from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.server import ServerConfig
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.wire import Encoding, SizeLimits
from actorbus.security.settings import SecuritySettings, actorbus_home
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
    stream_window_bytes: int
    stream_credit_timeout: float
    stream_start_timeout: float
    durable: DurableSettings | None
    state: StateSettings | None
    activation_ttl: float
    placement_ttl: float
    gc_young: int | None
    registry: bool
    name: str
    connect_options: ConnectOptions | None
    tracing: bool | None
    security: SecuritySettings | None


def secure_start(config: ServerConfig, options: SystemOptions) -> ServerConfig:
    """What ``ActorSystem.start()`` does by default: the server's config secured
    for the system's namespace, and ``options`` given this system's way in
    (a member's credentials, TLS) and end-to-end security unless set."""
    from actorbus.security.secure_broker import SecureBroker  # only for a secured start

    try:
        broker = SecureBroker()
    except OSError as exc:
        raise ActorBusError(
            f"cannot keep the broker's keys in {actorbus_home()} ({exc}): set "
            "ACTORBUS_HOME to a writable directory, or start(secure=False)"
        ) from None
    ns = options.get("namespace", "ab")
    extra = broker.server_config([ns])
    security = options.setdefault("security", SecuritySettings())
    options["connect_options"] = broker.connect_options(
        ns,
        options.get("name", "actorbus"),
        options.get("connect_options"),
        hosts=security.hosts if security is not None else None,
    )
    return dataclasses.replace(config, extra=f"{config.extra}\n{extra}")
