"""actorbus: AI agents as actor classes on NATS.

The public API is deliberately small; everything else is reachable through the
subpackages (``actorbus.bus``, ``actorbus.codecs`` ...).
"""

import actorbus._nats_import  # noqa: F401  (first: nats-py, without its WebSocket client)
from actorbus.actors import Actor, ActorRef, ActorSystem, Crash, handler
from actorbus.actors.reminders import Reminders
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.schedules import Reminder
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    AuthError,
    ClockSkewError,
    ConnectionLostError,
    DecodeError,
    ExpiredError,
    ForbiddenError,
    InvalidAddressError,
    MessageTooLargeError,
    ModelError,
    NoRespondersError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    ReplayError,
    StateConflictError,
    StateError,
    StateTooLargeError,
    StateVersionError,
    StoreUnavailableError,
    TurnTimeoutError,
    UnknownIntentError,
    ValidationFailedError,
    WrongCallError,
)
from actorbus.codecs.wire import Encoding, SizeLimits
from actorbus.security.settings import SecuritySettings
from actorbus.state import StateSettings, StateStore

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ActorBusError",
    "ActorNotFoundError",
    "ActorRef",
    "ActorStoppedError",
    "ActorSystem",
    "AskTimeoutError",
    "AuthError",
    "ClockSkewError",
    "ConnectOptions",
    "ConnectionLostError",
    "Crash",
    "DecodeError",
    "DurableSettings",
    "Encoding",
    "Envelope",
    "ExpiredError",
    "ForbiddenError",
    "InvalidAddressError",
    "MessageTooLargeError",
    "ModelError",
    "NoRespondersError",
    "ProtocolError",
    "RateLimitedError",
    "Reminder",
    "Reminders",
    "RemoteError",
    "ReplayError",
    "SecuritySettings",
    "SizeLimits",
    "StateConflictError",
    "StateError",
    "StateSettings",
    "StateStore",
    "StateTooLargeError",
    "StateVersionError",
    "StoreUnavailableError",
    "TurnTimeoutError",
    "UnknownIntentError",
    "ValidationFailedError",
    "WrongCallError",
    "handler",
]
