"""The error taxonomy shared by the bus, the actors and every protocol edge.

Each error carries a stable ``code`` (``E_TIMEOUT``, ``E_DECODE`` ...) so that an
error raised in one process can be sent over the wire as ``{code, type, message}``
and rebuilt as the same Python class in the caller's process. Protocol codecs map
these codes onto their native error shapes; :data:`CLASS_OF_CODE` (every class by
its code) and :func:`error_for_code` are how they rebuild one from a code and a
message.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ActorBusError(Exception):
    """Base of every error actorbus raises on purpose."""

    code: ClassVar[str] = "E_INTERNAL"

    def to_wire(self, *, include_traceback: str | None = None) -> dict[str, Any]:
        """The error as the ``content`` of an error envelope."""
        body: dict[str, Any] = {
            "code": self.code,
            "type": type(self).__name__,
            "message": str(self),
        }
        if include_traceback:
            body["traceback"] = include_traceback
        return body


class AskTimeoutError(ActorBusError, TimeoutError):
    """No reply arrived before the deadline."""

    code = "E_TIMEOUT"

    def __init__(self, address: str, intent: str, timeout: float, items: int | None = None) -> None:
        """``items``: for a stream, how many items came before it went silent."""
        what = f"{address!r} (intent {intent!r})"
        if items is None:
            said = f"ask to {what} got no reply within {timeout:g}s"
        elif items == 0:
            said = f"stream from {what} sent no item within {timeout:g}s"
        else:
            said = (
                f"stream from {what} sent nothing for {timeout:g}s after item {items} "
                "(its producer may be gone)"
            )
        super().__init__(said)
        self.address = address
        self.intent = intent
        self.timeout = timeout


class TurnTimeoutError(ActorBusError, TimeoutError):
    """A durable turn ran past its actor type's ``max_turn``: it was treated as hung,
    cancelled, and its message retried (or dead-lettered) by the retry policy."""

    code = "E_TIMEOUT"


class ConnectionLostError(ActorBusError, ConnectionError):
    """The link to NATS is gone and did not come back before the reconnect deadline."""

    code = "E_CONN"
    #: Why the server refused the connection, when it did: ``"untrusted-certificate"``,
    #: ``"tls"`` (a scheme or handshake mismatch) or ``"unauthorized"``; None when it
    #: was not reached (or did not say), so a tool can give its own advice.
    refused: str | None = None


class NoRespondersError(ActorBusError):
    """Nobody is subscribed on the address: the actor is not running anywhere."""

    code = "E_NO_RESPONDERS"

    def __init__(self, address: str, intent: str = "") -> None:
        what = f" (intent {intent!r})" if intent else ""
        super().__init__(f"no actor is serving {address!r}{what}")
        self.address = address
        self.intent = intent


class InvalidAddressError(ActorBusError, ValueError):
    """An address or topic that cannot become a NATS subject."""

    code = "E_ADDRESS"


class ProtocolError(ActorBusError):
    """A peer broke the actorbus wire protocol (for example, a stream chunk out of order)."""

    code = "E_PROTOCOL"


class WrongCallError(ProtocolError):
    """A handler called the wrong way: ``ask`` of a handler that streams its
    reply. A caller that can do either (the gateway, an agent's tool) catches this
    and streams instead."""


class EncodeError(ActorBusError, ValueError):
    """A value could not be encoded for the wire."""

    code = "E_ENCODE"


class DecodeError(ActorBusError, ValueError):
    """Bytes that are not a valid envelope (or not valid for the given encoding)."""

    code = "E_DECODE"


class MessageTooLargeError(ActorBusError, ValueError):
    """A message or its payload is over the configured size limit."""

    code = "E_TOO_LARGE"

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes")
        self.what = what
        self.size = size
        self.limit = limit


class UnsupportedError(ActorBusError):
    """The other side asked for something this side does not do (a method, a
    protocol version, a content type)."""

    code = "E_UNSUPPORTED"


class UnknownIntentError(UnsupportedError, LookupError):
    """The actor has no handler for the message's intent (its message type)."""

    code = "E_UNSUPPORTED"


class ValidationFailedError(ActorBusError, ValueError):
    """The payload does not validate against the handler's message model."""

    code = "E_VALIDATION"


class ActorNotFoundError(ActorBusError, LookupError):
    """The process that received the message hosts the type but not this key."""

    code = "E_NOT_FOUND"


class ActorStoppedError(ActorBusError):
    """The actor is stopping or was stopped after too many restarts."""

    code = "E_STOPPED"


class ExpiredError(ActorBusError):
    """The message's ttl_ms passed before it could be handled; it was not delivered late."""

    code = "E_EXPIRED"


class RateLimitedError(ActorBusError):
    """The actor or an edge refused the message for now; retry later (after
    ``retry_after`` seconds, when the refusal says)."""

    code = "E_RATE_LIMIT"
    retry_after: float | None = None


class AuthError(ActorBusError, PermissionError):
    """Authentication or authorization failed."""

    code = "E_AUTH"


class ForbiddenError(AuthError):
    """Authenticated, but not allowed this: a token whose scopes do not cover the
    agent, say (HTTP 403 where a plain ``AuthError`` is 401). ``scope`` names
    what would allow it."""

    code = "E_AUTH"
    scope: str | None = None


class ReplayError(AuthError):
    """A message id already seen within the replay window: a replayed message."""

    code = "E_REPLAY"


class ClockSkewError(AuthError):
    """A message stamped too far from the receiver's clock (stale or future-dated)."""

    code = "E_CLOCK_SKEW"


class StoreUnavailableError(ActorBusError):
    """JetStream did not confirm storing a durable message before the send's deadline
    (no stream leader during an election, a node away, the store refusing). The
    message may or may not be stored; sending it again is safe only with the same
    ``idempotency_key`` or message id."""

    code = "E_STORE_UNAVAILABLE"


class StateError(ActorBusError):
    """An actor's persistent state could not be loaded or saved (the store is
    unreachable, or the stored state cannot be opened here)."""

    code = "E_STATE"


class StateConflictError(StateError):
    """A state write lost to a newer one: another activation of the same actor
    (one that took over after this process lost its lease) wrote since this one
    loaded. The stale instance stops; the newer state stands."""

    code = "E_STATE_CONFLICT"


class StateTooLargeError(StateError, ValueError):
    """The state is larger than its store takes in one entry; refused at save,
    never truncated."""

    code = "E_STATE_TOO_LARGE"


class StateVersionError(StateError):
    """A stored state was written by another version of the state model and no
    migration brings it to this one."""

    code = "E_STATE_VERSION"


class StreamCancelledError(ActorBusError):
    """The consumer of a stream stopped early; raised inside the producer."""

    code = "E_CANCELLED"


class ModelError(ActorBusError):
    """A model provider failed a call for good (retries spent, a refused request,
    a deadline passed), or its answer did not fit what was asked (structured
    output that does not validate). Says which model and why."""

    code = "E_MODEL"


class MissingExtraError(ActorBusError, ImportError):
    """A part of actorbus needs a package its install did not bring."""

    code = "E_MISSING_EXTRA"

    @classmethod
    def needs(cls, package: str, extra: str, what: str) -> MissingExtraError:
        """The error for ``what``, which needs ``package`` from ``extra``."""
        return cls(f"{what} needs the '{package}' package: pip install 'actorbus[{extra}]'")


class RemoteError(ActorBusError):
    """A handler raised an exception of its own; the caller sees its type and message.

    The remote traceback is only present when the remote system runs in debug mode.
    """

    code = "E_HANDLER"

    def __init__(
        self,
        message: str,
        *,
        remote_type: str = "Exception",
        address: str = "",
        remote_traceback: str | None = None,
    ) -> None:
        where = f" in {address}" if address else ""
        super().__init__(f"{remote_type}{where}: {message}")
        self.remote_type = remote_type
        self.remote_message = message
        self.address = address
        self.remote_traceback = remote_traceback

    def to_wire(self, *, include_traceback: str | None = None) -> dict[str, Any]:
        """Carry the handler's own exception type and message, not this wrapper's."""
        body: dict[str, Any] = {
            "code": self.code,
            "type": self.remote_type,
            "message": self.remote_message,
        }
        if include_traceback:
            body["traceback"] = include_traceback
        return body


#: Every taxonomy class by its code: the one table the codecs rebuild errors from.
#: ``E_UNSUPPORTED`` is :class:`UnknownIntentError` (an :class:`UnsupportedError`),
#: ``E_INTERNAL`` the base class, ``E_HANDLER`` :class:`RemoteError`.
CLASS_OF_CODE: dict[str, type[ActorBusError]] = {
    cls.code: cls
    for cls in (
        ActorBusError,
        AskTimeoutError,
        ConnectionLostError,
        NoRespondersError,
        InvalidAddressError,
        ProtocolError,
        EncodeError,
        DecodeError,
        MessageTooLargeError,
        UnknownIntentError,
        ValidationFailedError,
        ActorNotFoundError,
        ActorStoppedError,
        ExpiredError,
        RateLimitedError,
        AuthError,
        ReplayError,
        ClockSkewError,
        StreamCancelledError,
        StoreUnavailableError,
        StateError,
        StateConflictError,
        StateTooLargeError,
        StateVersionError,
        ModelError,
        RemoteError,
    )
}

# What error_from_wire rebuilds as its own class; a remote timeout, a missing
# responder, a handler failure or an internal error comes back as a RemoteError.
_BY_CODE: dict[str, type[ActorBusError]] = {
    code: cls
    for code, cls in CLASS_OF_CODE.items()
    if cls not in (ActorBusError, AskTimeoutError, NoRespondersError, RemoteError)
}


# Subclasses that share their parent's code, told apart by the type the wire names
# (an older peer's bare code still rebuilds the parent).
_REFINED: dict[str, type[ActorBusError]] = {
    cls.__name__: cls for cls in (WrongCallError, ForbiddenError)
}


def error_from_wire(body: Any, address: str) -> ActorBusError:
    """Rebuild the typed error a remote actor sent back."""
    if not isinstance(body, dict):
        return ProtocolError(f"{address} sent a malformed error reply: {body!r:.200}")
    code = str(body.get("code", "E_HANDLER"))
    message = str(body.get("message", ""))
    remote_type = str(body.get("type", "Exception"))
    tb = body.get("traceback")
    cls = _BY_CODE.get(code)
    if cls is None:
        return RemoteError(
            message,
            remote_type=remote_type,
            address=address,
            remote_traceback=tb if isinstance(tb, str) else None,
        )
    refined = _REFINED.get(remote_type)
    if refined is not None and refined.code == code:
        cls = refined
    return bare_error(cls, f"{address}: {message}")


def bare_error(cls: type[ActorBusError], message: str) -> ActorBusError:
    """Instantiate an error class whose __init__ may take structured arguments,
    with exactly ``message`` as its text (``__init__`` is skipped)."""
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    return err


def error_for_code(code: str, message: str, remote_type: str | None = None) -> ActorBusError:
    """The taxonomy error for ``code`` with exactly ``message`` as its text.

    What a protocol edge rebuilds from a code and a message (``error_from_wire``
    prefixes the sender's address, which an edge does not have). ``E_HANDLER`` and
    codes with no class become a :class:`RemoteError` naming ``remote_type``
    (``code``, else ``"Exception"``, when None).
    """
    cls = CLASS_OF_CODE.get(code)
    if cls is None or cls is RemoteError:
        if remote_type is None:
            remote_type = code or "Exception"
        return RemoteError(message, remote_type=remote_type)
    err = cls.__new__(cls)  # bare_error, inlined: this runs for every error an edge reads
    Exception.__init__(err, message)
    return err
