"""One system's configuration: every default in one place, frozen once it opens.

``ActorSystem.start()`` and ``ActorSystem.connect()`` take keyword options
(:class:`~actorbus.actors.options.SystemOptions`, checked by mypy for typed
callers and at run time for the rest); :meth:`SystemConfig.of` turns them into
this value, which the runtime is built from and nothing changes afterwards.
Each part has its own small settings value (connection, streams, durable
delivery, state, security), as nats.py's ``micro`` keeps one config per object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from actorbus.actors.options import SystemOptions
from actorbus.bus.claims import RECORD_TTL
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings
from actorbus.codecs.wire import DEFAULT_LIMITS, Encoding, SizeLimits
from actorbus.security.settings import SecuritySettings
from actorbus.state.store import StateSettings


@dataclass(frozen=True)
class StreamSettings:
    """How streamed replies are paced (see ``actors/streaming.py``)."""

    window: int = 256  # items a producer may run ahead of its consumer, at most
    window_bytes: int = 1 << 20  # ... and about this many bytes: fewer items when large
    credit_timeout: float = 300.0  # a silent consumer is given up after this long
    start_timeout: float = 2.0  # the consumer must take the first item this soon

    def __post_init__(self) -> None:
        if self.window < 2:
            raise ValueError("stream_window must be >= 2")
        if self.window_bytes < 1:
            raise ValueError("stream_window_bytes must be >= 1")

    def window_for(self, sent_bytes: int, items: int) -> int:
        """Items in the next window, for a stream that sent ``items`` in
        ``sent_bytes`` so far: ``window`` at most, fewer when that many of its
        items would be over ``window_bytes`` (2 at least)."""
        if sent_bytes <= 0 or items <= 0:
            return self.window
        return max(2, min(self.window, self.window_bytes * items // sent_bytes))


@dataclass(frozen=True)
class SystemConfig:
    """What a system is opened with (the README's Configuration table)."""

    namespace: str = "ab"
    name: str = "actorbus"  # the connection's name, as the server lists it
    encoding: Encoding = Encoding.MSGPACK  # of what this system sends
    limits: SizeLimits = DEFAULT_LIMITS
    default_timeout: float = 5.0  # of an ask or stream without its own
    debug: bool = False  # remote tracebacks in error replies
    streams: StreamSettings = field(default_factory=StreamSettings)
    durable: DurableSettings = field(default_factory=DurableSettings)
    state: StateSettings = field(default_factory=StateSettings)
    activation_ttl: float = 5.0  # a keyed activation's lease
    placement_ttl: float = RECORD_TTL  # longest life of a keyed activation's record
    gc_young: int | None = 20_000  # the collector's young threshold in a hosting process
    registry: bool = True  # announce hosted types and answer discovery
    connect: ConnectOptions | None = None  # None: as the server asks (connect())
    tracing: bool | None = None  # None: as the OTEL_* variables say
    security: SecuritySettings | None = None  # None: an open bus

    def __post_init__(self) -> None:
        if self.placement_ttl < max(2.0, 4 * self.activation_ttl):
            raise ValueError(
                f"placement_ttl ({self.placement_ttl:g}) must be at least 2 s and four "
                f"times activation_ttl ({self.activation_ttl:g})"
            )

    @classmethod
    def of(cls, options: SystemOptions) -> SystemConfig:
        """The configuration the keyword options describe, defaults filled in."""
        unknown = set(options) - set(SystemOptions.__annotations__)
        if unknown:  # what mypy catches for typed callers, said at run time for the rest
            raise TypeError(f"unknown ActorSystem option(s): {', '.join(sorted(unknown))}")
        o = options
        name = o.get("name", cls.name)
        streams = StreamSettings(
            o.get("stream_window", StreamSettings.window),
            o.get("stream_window_bytes", StreamSettings.window_bytes),
            o.get("stream_credit_timeout", StreamSettings.credit_timeout),
            o.get("stream_start_timeout", StreamSettings.start_timeout),
        )
        return cls(
            namespace=o.get("namespace", cls.namespace),
            name=name,
            encoding=o.get("encoding", cls.encoding),
            limits=o.get("limits", cls.limits),
            default_timeout=o.get("default_timeout", cls.default_timeout),
            debug=o.get("debug", cls.debug),
            streams=streams,
            durable=o.get("durable") or DurableSettings(),
            state=o.get("state") or StateSettings(),
            activation_ttl=o.get("activation_ttl", cls.activation_ttl),
            placement_ttl=o.get("placement_ttl", cls.placement_ttl),
            gc_young=o.get("gc_young", cls.gc_young),
            registry=o.get("registry", cls.registry),
            connect=o.get("connect_options"),
            tracing=o.get("tracing"),
            security=o.get("security"),
        )

    def connect_to(self, servers: list[str]) -> ConnectOptions:
        """The connection's options, to ``servers``."""
        return dataclasses.replace(self.connect or ConnectOptions(name=self.name), servers=servers)
