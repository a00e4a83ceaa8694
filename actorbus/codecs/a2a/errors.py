"""A2A's errors and version negotiation, mapped onto the actorbus error taxonomy.

Every error A2A names (JSON-RPC -32700..-32603 and A2A's own -32001..-32009)
is a class here that *also* is a taxonomy class (``TaskNotFoundError`` is an
``ActorNotFoundError``, ``VersionNotSupportedError`` an ``UnsupportedError``...),
so code inside the bus that catches the taxonomy keeps working, and the gateway
can still answer with the exact A2A code.

:func:`error_response` turns any :class:`ActorBusError` into a JSON-RPC error
response: A2A 1.0 puts a list of ``google.rpc.ErrorInfo`` in ``error.data``,
0.3 a plain object. Both carry the actorbus ``code`` and error ``type`` so that
:func:`error_from_response` rebuilds an error of the same taxonomy code when the
other side is actorbus too; foreign errors are rebuilt from the JSON-RPC code.
Tracebacks never leave the process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, Literal

from actorbus.codecs.errors import (
    CLASS_OF_CODE,
    ActorBusError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    AuthError,
    ConnectionLostError,
    DecodeError,
    EncodeError,
    ExpiredError,
    ForbiddenError,
    InvalidAddressError,
    MessageTooLargeError,
    NoRespondersError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    UnsupportedError,
    ValidationFailedError,
    bare_error,
)

# -- versions -------------------------------------------------------------------

A2AVersion = Literal["1.0", "0.3"]
V10: Final = "1.0"
V03: Final = "0.3"
SUPPORTED_VERSIONS: Final = (V03, V10)


def parse_version(header: str | None) -> A2AVersion | None:
    """The A2A version an ``A2A-Version`` header names, None if not one we speak.

    A missing or empty header means 0.3 (the spec: clients before 1.0 sent none).
    Only major.minor counts ("1.0.2" is 1.0, "1" is 1.0).
    """
    if header is None:
        return V03
    text = header.strip()
    if not text:
        return V03
    major, _, rest = text.partition(".")
    minor = rest.partition(".")[0] or "0"
    if major == "1" and minor == "0":
        return V10
    if major == "0" and minor == "3":
        return V03
    return None


def negotiate_version(header: str | None) -> A2AVersion:
    """The version to speak for a request's ``A2A-Version`` header, or -32009."""
    version = parse_version(header)
    if version is None:
        shown = str(header).encode("ascii", "backslashreplace").decode()  # echoed safely
        raise VersionNotSupportedError(
            f"A2A version {shown!r} is not supported (supported: {', '.join(SUPPORTED_VERSIONS)})",
            metadata={"requested": shown, "supported": ",".join(SUPPORTED_VERSIONS)},
        )
    return version


def _reply_version(version: str | None) -> A2AVersion:
    """Errors must always be answerable: an unknown version gets the newest shape."""
    return parse_version(version) or V10


# -- the error classes ------------------------------------------------------------

A2A_DOMAIN: Final = "a2a-protocol.org"
ACTORBUS_DOMAIN: Final = "actorbus"
ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
# Keys of ErrorInfo.metadata (1.0) / error.data (0.3) that carry the taxonomy.
META_CODE: Final = "actorbusCode"
META_TYPE: Final = "actorbusType"


class A2AError(ActorBusError):
    """An error with an exact JSON-RPC code; never raised itself, only its subclasses.

    ``metadata`` (string to string, as ``google.rpc.ErrorInfo`` wants) travels in
    the error response (e.g. ``{"taskId": ...}``); ``request_id`` is the JSON-RPC
    id of the request that failed, when it was known, so the gateway can answer it.
    Subclasses list this class first and a taxonomy class second: the taxonomy
    class supplies ``code``.
    """

    rpc_code: ClassVar[int] = -32603
    reason: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(
        self,
        message: str = "",
        *,
        metadata: Mapping[str, str] | None = None,
        request_id: str | int | None = None,
    ) -> None:
        super().__init__(message or _DEFAULT_MESSAGES.get(self.rpc_code, "A2A error"))
        self.metadata: dict[str, str] = dict(metadata or {})
        self.request_id = request_id


class A2AParseError(A2AError, DecodeError):
    """The body is not JSON at all."""

    rpc_code = -32700
    reason = "PARSE_ERROR"


class InvalidRequestError(A2AError, DecodeError):
    """JSON, but not a JSON-RPC 2.0 request object."""

    rpc_code = -32600
    reason = "INVALID_REQUEST"


class MethodNotFoundError(A2AError, UnsupportedError):
    """A method name that no A2A version defines."""

    rpc_code = -32601
    reason = "METHOD_NOT_FOUND"


class InvalidParamsError(A2AError, ValidationFailedError):
    """Params (or a message inside them) that do not match the A2A schema."""

    rpc_code = -32602
    reason = "INVALID_PARAMS"


class TaskNotFoundError(A2AError, ActorNotFoundError):
    rpc_code = -32001
    reason = "TASK_NOT_FOUND"


class TaskNotCancelableError(A2AError, UnsupportedError):
    rpc_code = -32002
    reason = "TASK_NOT_CANCELABLE"


class PushNotificationNotSupportedError(A2AError, UnsupportedError):
    rpc_code = -32003
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"


class UnsupportedOperationError(A2AError, UnsupportedError):
    rpc_code = -32004
    reason = "UNSUPPORTED_OPERATION"


class ContentTypeNotSupportedError(A2AError, UnsupportedError):
    rpc_code = -32005
    reason = "CONTENT_TYPE_NOT_SUPPORTED"


class InvalidAgentResponseError(A2AError, ProtocolError):
    """The remote agent answered with something that is not valid A2A."""

    rpc_code = -32006
    reason = "INVALID_AGENT_RESPONSE"


class ExtendedAgentCardNotConfiguredError(A2AError, UnsupportedError):
    rpc_code = -32007
    reason = "EXTENDED_AGENT_CARD_NOT_CONFIGURED"


class ExtensionSupportRequiredError(A2AError, UnsupportedError):
    rpc_code = -32008
    reason = "EXTENSION_SUPPORT_REQUIRED"


class VersionNotSupportedError(A2AError, UnsupportedError):
    """An ``A2A-Version`` we do not speak, or a method of the other version."""

    rpc_code = -32009
    reason = "VERSION_NOT_SUPPORTED"


_DEFAULT_MESSAGES: Final[dict[int, str]] = {
    -32700: "Invalid JSON payload",
    -32600: "Request payload validation error",
    -32601: "Method not found",
    -32602: "Invalid parameters",
    -32603: "Internal error",
    -32000: "Unauthenticated",
    -32001: "Task not found",
    -32002: "Task cannot be canceled",
    -32003: "Push Notification is not supported",
    -32004: "This operation is not supported",
    -32005: "Incompatible content types",
    -32006: "Invalid agent response",
    -32007: "Extended agent card is not configured",
    -32008: "A required extension is not supported",
    -32009: "This protocol version is not supported",
}

A2A_ERRORS: Final[tuple[type[A2AError], ...]] = (
    A2AParseError,
    InvalidRequestError,
    MethodNotFoundError,
    InvalidParamsError,
    TaskNotFoundError,
    TaskNotCancelableError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    VersionNotSupportedError,
)
_BY_RPC_CODE: Final[dict[int, type[A2AError]]] = {cls.rpc_code: cls for cls in A2A_ERRORS}

# Taxonomy errors that are not A2A classes: the JSON-RPC code each is sent as.
# Everything not listed (timeouts, lost connections, auth, rate limits, handler
# failures...) has no A2A equivalent and goes out as -32603 with its own reason.
RPC_CODE_BY_TAXONOMY: Final[dict[str, int]] = {
    # A2A leaves authentication errors to a "custom" code (spec 3.3.2); -32000 is
    # the one JSON-RPC server-error code outside A2A's own -32001..-32099. The
    # HTTP status (401, 403) and WWW-Authenticate say the rest.
    AuthError.code: -32000,
    DecodeError.code: -32700,
    ValidationFailedError.code: -32602,
    InvalidAddressError.code: -32602,
    MessageTooLargeError.code: -32600,
    UnsupportedError.code: -32004,
    ActorNotFoundError.code: -32001,
    ProtocolError.code: -32006,
    EncodeError.code: -32006,
}

# Taxonomy classes by code, to rebuild an actorbus error that crossed A2A
# (E_UNSUPPORTED as the plain UnsupportedError).
_TAXONOMY: Final[dict[str, type[ActorBusError]]] = {
    **CLASS_OF_CODE,
    UnsupportedError.code: UnsupportedError,
}

# For the REST binding and for refusals before any JSON-RPC is read (the JSON-RPC
# binding itself answers errors with HTTP 200).
_HTTP_BY_RPC: Final[dict[int, int]] = {
    -32700: 400,
    -32600: 400,
    -32601: 404,
    -32602: 400,
    -32001: 404,
    -32002: 409,
    -32003: 400,
    -32004: 400,
    -32005: 415,
    -32006: 502,
    -32007: 400,
    -32008: 400,
    -32009: 400,
}
_HTTP_BY_TAXONOMY: Final[dict[str, int]] = {
    MessageTooLargeError.code: 413,
    AuthError.code: 401,
    RateLimitedError.code: 429,
    AskTimeoutError.code: 504,
    ExpiredError.code: 504,
    NoRespondersError.code: 503,
    ConnectionLostError.code: 503,
    ActorStoppedError.code: 503,
}


def rpc_code(err: ActorBusError) -> int:
    """The JSON-RPC error code ``err`` is answered with."""
    if isinstance(err, A2AError):
        return err.rpc_code
    return RPC_CODE_BY_TAXONOMY.get(err.code, -32603)


def http_status(err: ActorBusError) -> int:
    """The HTTP status for ``err`` (REST binding; refusals before JSON-RPC)."""
    if isinstance(err, ForbiddenError):
        return 403
    by_taxonomy = _HTTP_BY_TAXONOMY.get(err.code)
    if by_taxonomy is not None and not isinstance(err, A2AError):
        return by_taxonomy
    return _HTTP_BY_RPC.get(rpc_code(err), 500)


_STATUS_NAMES: Final[dict[int, str]] = {  # google.rpc.Code, as the REST binding names them
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
    413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    501: "UNIMPLEMENTED",
    502: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def rest_error(err: ActorBusError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and body for ``err`` in A2A 1.0's HTTP+JSON binding: a
    ``google.rpc.Status`` whose details hold the same ErrorInfo as JSON-RPC's."""
    status = http_status(err)
    rpc = error_object(err, V10)
    body = {
        "code": status,
        "status": _STATUS_NAMES.get(status, "INTERNAL"),
        "message": rpc["message"],
        "details": rpc["data"],
    }
    return status, {"error": body}


# -- taxonomy -> JSON-RPC error -----------------------------------------------------


def _reason_and_domain(err: ActorBusError, code: int) -> tuple[str, str]:
    if -32009 <= code <= -32001:
        return _BY_RPC_CODE[code].reason, A2A_DOMAIN
    if isinstance(err, A2AError):
        return err.reason, ACTORBUS_DOMAIN
    return err.code.removeprefix("E_"), ACTORBUS_DOMAIN


def _type_and_message(err: ActorBusError) -> tuple[str, str]:
    """A handler's own exception type and message, not RemoteError's wrapper."""
    if isinstance(err, RemoteError):
        return err.remote_type, err.remote_message
    return type(err).__name__, str(err)


def error_object(err: ActorBusError, version: str | None) -> dict[str, Any]:
    """The JSON-RPC ``error`` member for ``err`` in the given A2A version's form."""
    code = rpc_code(err)
    err_type, message = _type_and_message(err)
    details: dict[str, str] = dict(err.metadata) if isinstance(err, A2AError) else {}
    details[META_CODE] = err.code
    details[META_TYPE] = err_type
    retry = getattr(err, "retry_after", None)
    if retry is not None:  # a rate limit says when to come back
        details["retryAfter"] = f"{retry:g}"
    data: Any
    if _reply_version(version) == V10:
        reason, domain = _reason_and_domain(err, code)
        data = [{"@type": ERROR_INFO_TYPE, "reason": reason, "domain": domain, "metadata": details}]
    else:
        data = details
    return {"code": code, "message": message or _DEFAULT_MESSAGES.get(code, err_type), "data": data}


def error_response(
    err: ActorBusError, request_id: str | int | None, version: str | None
) -> dict[str, Any]:
    """A whole JSON-RPC error response answering request ``request_id``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error_object(err, version)}


# -- JSON-RPC error -> taxonomy -----------------------------------------------------


def _details(data: Any) -> dict[str, str]:
    """The string details an error carries: ErrorInfo.metadata (1.0) or data (0.3)."""
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and str(item.get("@type", "")).endswith(
                "google.rpc.ErrorInfo"
            ):
                data = item.get("metadata")
                break
        else:
            return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


def _taxonomy_error(code: str, err_type: str, message: str) -> ActorBusError:
    if code == RemoteError.code:
        return RemoteError(message, remote_type=err_type or "Exception")
    cls = _TAXONOMY.get(code)
    if cls is None:
        return RemoteError(message, remote_type=err_type or code)
    return bare_error(cls, message)


def error_from_response(obj: Any) -> ActorBusError:
    """The taxonomy error for a JSON-RPC error response (or its ``error`` member).

    Never raises: a malformed error is an :class:`InvalidAgentResponseError`.
    """
    request_id = obj.get("id") if isinstance(obj, dict) and "error" in obj else None
    error = obj.get("error") if isinstance(obj, dict) and "error" in obj else obj
    if not isinstance(error, dict):
        return InvalidAgentResponseError(f"malformed A2A error: {error!r:.200}")
    code, message = error.get("code"), error.get("message", "")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
        return InvalidAgentResponseError(f"malformed A2A error: {error!r:.200}")
    details = _details(error.get("data"))
    ours_code = details.pop(META_CODE, "")
    ours_type = details.pop(META_TYPE, "")
    cls = _BY_RPC_CODE.get(code)
    err: ActorBusError
    if ours_code and (cls is None or cls.code != ours_code):
        err = _taxonomy_error(ours_code, ours_type, message)
    elif cls is not None:
        err = cls(message, metadata=details)
    else:
        err = RemoteError(message, remote_type=ours_type or f"JSONRPCError({code})")
    if isinstance(err, A2AError) and isinstance(request_id, str | int):
        err.request_id = request_id
    return err
