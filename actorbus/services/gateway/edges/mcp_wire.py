"""The MCP edge's wire: revisions, headers, errors, sessions and the decoding of
one JSON-RPC request (the HTTP and the methods are :mod:`.mcp`)."""

from __future__ import annotations

import base64
import binascii
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from aiohttp import web

import actorbus

PATH: Final = "/mcp"
HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
LATEST_HANDSHAKE: Final = HANDSHAKE_VERSIONS[-1]
DEFAULT_VERSION: Final = "2025-03-26"  # a request without the header, as the spec says

SESSION_HEADER: Final = "Mcp-Session-Id"
VERSION_HEADER: Final = "MCP-Protocol-Version"
METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"

PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META: Final = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"
TASK_ID_META: Final = "io.actorbus/taskId"
CONTEXT_ID_META: Final = "io.actorbus/contextId"

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
USED_IDS: Final = 10_000  # request ids remembered per session
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

# HTTP status of a JSON-RPC error in 2026-07-28 (the SDK's table); handshake-era
# answers are 200 but for bodies that are not one JSON-RPC request (400).
MODERN_STATUS: Final = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    -32021: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
NAME_BEARING: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
AGENT_URI: Final = "actorbus://agents/"
PAGE_SIZE: Final = 100
MAX_SESSIONS: Final = 10_000
SERVER_NAME: Final = "actorbus-gateway"
INSTRUCTIONS: Final = (
    "Each tool is an actorbus agent (an actor type from the registry). Call it with"
    " the message it takes; its reply is the result."
)
CAPABILITIES: Final = {
    "tools": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
    "prompts": {"listChanged": False},
    "logging": {},
}
_B64_SENTINEL: Final = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


class McpError(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, code: int, message: str, data: Any = None, *, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.status = status


@dataclass
class Session:
    """A handshake-era (2025-11-25) client session."""

    id: str
    version: str
    client: dict[str, Any]
    initialized: bool = False
    running: dict[str | int, str] = field(default_factory=dict)  # request id -> task id
    log_level: str | None = None  # logging/setLevel: the least severe it wants to hear
    # The ids the client used: MCP says an id is never used twice in a session,
    # so a repeat is a replayed request (kept for the last USED_IDS requests).
    used: OrderedDict[str | int, None] = field(default_factory=OrderedDict)

    def take_id(self, rid: str | int) -> None:
        if rid in self.used:
            raise McpError(
                INVALID_REQUEST,
                f"request id {rid!r} was already used in this session: a replay",
                status=400,
            )
        self.used[rid] = None
        if len(self.used) > USED_IDS:
            self.used.popitem(last=False)

    def give_back(self, rid: str | int) -> None:
        """A request refused before any work (its caller not allowed yet, a rate
        limit) was not taken: the client may send it again with the same id, as
        MCP clients do after getting a token."""
        self.used.pop(rid, None)


@dataclass
class Call:
    """One JSON-RPC request, as decoded."""

    id: str | int
    method: str
    params: dict[str, Any]
    version: str
    modern: bool
    session: Session | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)


def error_body(rid: Any, err: McpError) -> dict[str, Any]:
    error: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.data is not None:
        error["data"] = err.data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def decode_header_value(value: str | None) -> str | None:
    """An ``Mcp-Name``/``Mcp-Param-*`` value: verbatim, or the ``=?base64?...?=`` form decoded."""
    if value is None:
        return None
    m = _B64_SENTINEL.fullmatch(value)
    if m is None:
        return value
    try:
        return base64.b64decode(m.group("payload"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def unsupported(requested: Any) -> McpError:
    return McpError(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": [*HANDSHAKE_VERSIONS, *MODERN_VERSIONS], "requested": requested},
    )


def server_info() -> dict[str, Any]:
    return {"name": SERVER_NAME, "title": "actorbus gateway", "version": actorbus.__version__}


def decode_call(
    request: web.Request,
    decoded: dict[str, Any],
    header: str | None,
    modern: bool,
    sessions: OrderedDict[str, Session],
) -> Call:
    """One JSON-RPC request, checked as its revision says (2026-07-28: the
    envelope and its headers; earlier: the session it names, its id unused).

    Raises :class:`McpError`."""
    rid, method, params = decoded.get("id"), decoded.get("method"), decoded.get("params")
    if decoded.get("jsonrpc") != "2.0" or not _valid_id(rid) or not isinstance(method, str):
        raise McpError(
            INVALID_REQUEST,
            'not a JSON-RPC request: needs "jsonrpc": "2.0", a string or integer "id"'
            ' and a string "method"',
            status=400,
        )
    assert isinstance(rid, str | int)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise McpError(INVALID_PARAMS, "`params` must be an object")
    if modern:
        version = check_modern(request, decoded, params, header)
        return Call(rid, method, params, version, modern=True)
    version = header or DEFAULT_VERSION
    if method == "initialize":
        return Call(rid, method, params, version, modern=False)
    sid = request.headers.get(SESSION_HEADER)
    if not sid:
        raise McpError(
            INVALID_REQUEST,
            "Bad Request: missing Mcp-Session-Id (send initialize first, or use"
            f" protocol version {MODERN_VERSIONS[-1]} without sessions)",
            status=400,
        )
    session = sessions.get(sid)
    if session is None:
        raise McpError(INVALID_REQUEST, "Not Found: no such session (initialize again)", status=404)
    sessions.move_to_end(sid)
    session.take_id(rid)
    return Call(rid, method, params, session.version, modern=False, session=session)


def check_modern(
    request: web.Request,
    decoded: dict[str, Any],
    params: dict[str, Any],
    header: str | None,
) -> str:
    """The 2026-07-28 envelope ladder: ``_meta``, then headers, then the version."""
    for routing in (VERSION_HEADER, METHOD_HEADER, NAME_HEADER):
        if len(request.headers.getall(routing, [])) > 1:
            raise McpError(HEADER_MISMATCH, f"{routing.lower()} header appears more than once")
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise McpError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying the required {PROTOCOL_VERSION_META!r}"
            f" and {CLIENT_CAPABILITIES_META!r} envelope keys",
        )
    missing = [k for k in (PROTOCOL_VERSION_META, CLIENT_CAPABILITIES_META) if k not in meta]
    if missing:
        raise McpError(
            INVALID_PARAMS,
            f"params._meta is missing the required envelope key(s): {', '.join(missing)}",
        )
    version = meta[PROTOCOL_VERSION_META]
    if header != version:
        raise McpError(
            HEADER_MISMATCH,
            "mcp-protocol-version header does not match the request envelope's protocol version",
        )
    method = decoded["method"]
    if request.headers.get(METHOD_HEADER) != method:
        raise McpError(
            HEADER_MISMATCH, "mcp-method header does not match the request body's method"
        )
    key = NAME_BEARING.get(method)
    if key is not None:
        name = params.get(key)
        if name is not None and decode_header_value(request.headers.get(NAME_HEADER)) != name:
            raise McpError(
                HEADER_MISMATCH,
                f"mcp-name header does not match the request body's {key!r} parameter",
            )
    if not isinstance(version, str):
        raise McpError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in MODERN_VERSIONS:
        raise unsupported(version)
    return version


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))


def wants_sse(request: web.Request) -> bool:
    """The client reads answers as an event stream only: its ``Accept`` names
    ``text/event-stream`` and no JSON (streamable HTTP lets the server choose
    when a client accepts both; JSON is the lighter answer then)."""
    accepted = {
        t.split(";")[0].strip().lower() for t in request.headers.get("Accept", "").split(",")
    }
    json_too = accepted & {"application/json", "application/*", "*/*"}
    return "text/event-stream" in accepted and not json_too


def accepts_sse(request: web.Request) -> bool:
    """The client takes an event stream as the answer (its ``Accept`` names it)."""
    accepted = {
        t.split(";")[0].strip().lower() for t in request.headers.get("Accept", "").split(",")
    }
    return "text/event-stream" in accepted


PROGRESS: Final = "notifications/progress"
LOG: Final = "notifications/message"


def progress_token(call: Call) -> str | int | None:
    """The progress token a ``tools/call`` carries in ``params._meta``, if any."""
    if call.method != "tools/call":
        return None
    meta = call.params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def sse_message(body: Any) -> bytes:
    """One JSON-RPC message as an SSE ``message`` event."""
    return b"event: message\ndata: " + msgspec.json.encode(body) + b"\n\n"
