"""The MCP edge: the registry's agents as MCP tools, over the streamable HTTP transport.

One endpoint, ``/mcp``, speaks two protocol revisions, picked per request by the
``MCP-Protocol-Version`` header as the official SDK does:

- **2025-11-25** (and the earlier handshake revisions 2024-11-05, 2025-03-26,
  2025-06-18), header absent or one of those: ``initialize`` answers the
  negotiated version and a new ``Mcp-Session-Id``; every later request must carry
  it (missing: 400, unknown or deleted: 404). ``notifications/initialized`` and
  other notifications get 202, ``ping`` ``{}``, ``DELETE /mcp`` ends a session.
  One MCP session is one actorbus conversation (the session id is the envelope's
  ``context.session_id``).
- **2026-07-28** (stateless): no ``initialize``; every request carries
  ``params._meta`` with ``io.modelcontextprotocol/protocolVersion`` and
  ``.../clientCapabilities`` (missing: -32602), and the ``MCP-Protocol-Version``,
  ``Mcp-Method`` and (for ``tools/call``, ``resources/read``) ``Mcp-Name`` headers
  must agree with the body (-32020); an unknown version is -32022 with the
  supported list.
  ``server/discover`` describes the server; every result has ``resultType`` and
  the ``serverInfo`` stamp in ``_meta``; list results carry ``ttlMs``/``cacheScope``.

Methods: ``tools/list`` (paged by ``cursor``/``nextCursor``) and ``tools/call``
(see :mod:`.mcp_tools` for the tool mapping). A call runs as a gateway task
(``protocol="mcp"``, stored like every other task): the actor's reply is the
result, an actor failure an ``isError`` result, a question
(``InputRequired``) an answer whose ``_meta["io.actorbus/task"]`` names the task;
the next call with ``_meta["io.actorbus/taskId"]`` continues it.
``_meta["io.actorbus/contextId"]`` picks the conversation. In a 2025-11-25
session, ``notifications/cancelled`` for a call in flight cancels its task.
``resources/list`` and ``resources/read`` serve each agent's description
(``actorbus://agents/{name}``: skills, intents with their schemas, tool names),
as the UAP gateway mapping puts agent information in resources.

Answers are JSON (``application/json``), never SSE. Bodies are read as JSON
whatever the Content-Type; errors are JSON-RPC errors (-32700 not JSON, -32600
not one JSON-RPC request, -32601 unknown method, -32602 bad params, bad
arguments or unknown tool), never a traceback. ``GET /mcp`` is 405: the gateway
sends no server-initiated messages.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import re
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from aiohttp import web
from opentelemetry import trace

import actorbus
from actorbus.codecs.a2a import parts_from_content
from actorbus.codecs.a2a.types import Message
from actorbus.codecs.common import read_json
from actorbus.codecs.errors import ActorBusError, AuthError, DecodeError, RateLimitedError
from actorbus.services.gateway.agents import TaskNotContinuableError, UnknownTaskError
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.edges import Edge
from actorbus.services.gateway.edges.http import json_response, refusal
from actorbus.services.gateway.edges.mcp_tools import (
    BadArguments,
    Tool,
    task_result,
    tools_of,
)
from actorbus.services.gateway.settings import GatewaySettings

log = logging.getLogger("actorbus.gateway.mcp")

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


class McpEdge(Edge):
    name: ClassVar[str] = "mcp"

    def __init__(self, core: GatewayCore, settings: GatewaySettings) -> None:
        super().__init__(core, settings)
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.page_size = PAGE_SIZE  # tools per tools/list page

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post(PATH, self.post),
            web.get(PATH, self.get),
            web.delete(PATH, self.delete),
        ]

    async def close(self) -> None:
        self._sessions.clear()

    # -- HTTP --------------------------------------------------------------------------
    async def get(self, request: web.Request) -> web.Response:
        """No server-initiated stream: every answer comes on its POST."""
        return web.Response(status=405, headers={"Allow": "POST, DELETE"})

    async def delete(self, request: web.Request) -> web.Response:
        sid = request.headers.get(SESSION_HEADER)
        if not sid:
            err = McpError(INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id")
            return json_response(error_body(None, err), status=400)
        if self._sessions.pop(sid, None) is None:
            err = McpError(INVALID_REQUEST, "Not Found: no such session (initialize again)")
            return json_response(error_body(None, err), status=404)
        return web.Response(status=204)

    async def post(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get(VERSION_HEADER)
        modern = header is not None and header not in HANDSHAKE_VERSIONS
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge as e:
            too_big = McpError(INVALID_REQUEST, f"request body too large: {e.text}")
            return json_response(error_body(None, too_big), status=413)
        try:
            decoded = read_json(body)
        except DecodeError as e:
            return json_response(
                error_body(None, McpError(PARSE_ERROR, f"Parse error: {e}")), status=400
            )
        if not isinstance(decoded, dict):
            err = McpError(INVALID_REQUEST, "the body must be one JSON-RPC request or notification")
            return json_response(error_body(None, err), status=400)
        rid = decoded.get("id")
        notification = "method" in decoded and "id" not in decoded
        response = (
            "method" not in decoded
            and "id" in decoded
            and ("result" in decoded or "error" in decoded)
        )
        if notification or response:  # a response to a request we never sent is dropped too
            return await self._notified(request, decoded, header, modern)
        try:
            call = self._call(request, decoded, header, modern)
        except McpError as e:
            return self._error(rid if _valid_id(rid) else None, e, modern, e.status)
        span = trace.get_current_span()
        span.set_attribute("mcp.method.name", call.method)
        span.set_attribute("mcp.protocol.version", call.version)
        try:
            result = await self._dispatch(call)
        except McpError as e:
            return self._error(call.id, e, modern, e.status)
        except (AuthError, RateLimitedError) as e:  # refused before any work: HTTP says so
            refused = McpError(INVALID_REQUEST, f"{e.code}: {e}", {"code": e.code})
            return refusal(error_body(call.id, refused), e)
        except ActorBusError as e:  # the gateway is stopping, lost NATS ...
            err = McpError(INTERNAL_ERROR, f"{e.code}: {e}")
            return self._error(call.id, err, modern)
        except Exception:
            log.exception("MCP %s failed", call.method)
            err = McpError(INTERNAL_ERROR, "internal error in the gateway")
            return self._error(call.id, err, modern)
        if modern:
            result.setdefault("resultType", "complete")
            meta = result.get("_meta")
            result["_meta"] = {**(meta if isinstance(meta, dict) else {})}
            result["_meta"].setdefault(SERVER_INFO_META, server_info())
        return json_response(
            {"jsonrpc": "2.0", "id": call.id, "result": result}, headers=call.extra_headers
        )

    def _error(
        self, rid: Any, err: McpError, modern: bool, status: int | None = None
    ) -> web.Response:
        if status is None:
            status = MODERN_STATUS.get(err.code, 200) if modern else 200
        return json_response(error_body(rid, err), status=status)

    async def _notified(
        self, request: web.Request, decoded: dict[str, Any], header: str | None, modern: bool
    ) -> web.Response:
        """A notification (or a response to a request we never sent): 202."""
        method = decoded.get("method")
        if "method" in decoded and not isinstance(method, str):
            err = McpError(INVALID_REQUEST, "`method` must be a string")
            return json_response(error_body(None, err), status=400)
        if modern:
            if header not in MODERN_VERSIONS:
                return json_response(error_body(None, unsupported(header)), status=400)
            return web.Response(status=202)
        sid = request.headers.get(SESSION_HEADER)
        session = self._sessions.get(sid) if sid else None
        if sid and session is None:
            err = McpError(INVALID_REQUEST, "Not Found: no such session (initialize again)")
            return json_response(error_body(None, err), status=404)
        if method == "notifications/initialized" and session is not None:
            session.initialized = True
        elif method == "notifications/cancelled" and session is not None:
            params = decoded.get("params")
            rid = params.get("requestId") if isinstance(params, dict) else None
            task_id = session.running.get(rid) if isinstance(rid, str | int) else None
            if task_id is not None:  # the call answers with the canceled task
                with contextlib.suppress(ActorBusError):
                    await self.core.cancel(task_id)
        return web.Response(status=202)

    # -- decoding ----------------------------------------------------------------------
    def _call(
        self, request: web.Request, decoded: dict[str, Any], header: str | None, modern: bool
    ) -> Call:
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
            version = self._check_modern(request, decoded, params, header)
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
        session = self._sessions.get(sid)
        if session is None:
            raise McpError(
                INVALID_REQUEST, "Not Found: no such session (initialize again)", status=404
            )
        self._sessions.move_to_end(sid)
        session.take_id(rid)
        return Call(rid, method, params, session.version, modern=False, session=session)

    def _check_modern(
        self,
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
                "mcp-protocol-version header does not match the request envelope's"
                " protocol version",
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

    # -- methods -----------------------------------------------------------------------
    async def _dispatch(self, call: Call) -> dict[str, Any]:
        m = call.method
        if m == "tools/list":
            return await self._list_tools(call)
        if m == "tools/call":
            return await self._call_tool(call)
        if m == "resources/list":
            return await self._list_resources(call)
        if m == "resources/read":
            return await self._read_resource(call)
        if call.modern:
            if m == "server/discover":
                return self._discover()
        elif m == "initialize":
            return self._initialize(call)
        elif m == "ping":
            return {}
        raise McpError(METHOD_NOT_FOUND, f"Method not found: {m}")

    def _initialize(self, call: Call) -> dict[str, Any]:
        requested = call.params.get("protocolVersion")
        if not isinstance(requested, str):
            raise McpError(INVALID_PARAMS, "`params.protocolVersion` must be a string")
        version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
        client = call.params.get("clientInfo")
        session = Session(
            id=uuid.uuid4().hex, version=version, client=client if isinstance(client, dict) else {}
        )
        self._sessions[session.id] = session
        while len(self._sessions) > MAX_SESSIONS:  # the longest idle goes first
            self._sessions.popitem(last=False)
        call.extra_headers[SESSION_HEADER] = session.id
        return {
            "protocolVersion": version,
            "capabilities": CAPABILITIES,
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        }

    def _discover(self) -> dict[str, Any]:
        return {
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": CAPABILITIES,
            "instructions": INSTRUCTIONS,
            "ttlMs": 0,
            "cacheScope": "public",
        }

    def _page(self, call: Call, items: list[Any], key: str) -> dict[str, Any]:
        """One page of ``items`` (from ``params.cursor``, an offset we handed out)."""
        cursor = call.params.get("cursor")
        offset = 0
        if cursor is not None:
            try:
                offset = int(cursor) if isinstance(cursor, str) else -1
            except ValueError:
                offset = -1
            if offset < 0:
                raise McpError(INVALID_PARAMS, f"`params.cursor` is not one of ours: {cursor!r}")
        size = self.page_size
        result: dict[str, Any] = {key: items[offset : offset + size]}
        if offset + size < len(items):
            result["nextCursor"] = str(offset + size)
        if call.modern:
            result["ttlMs"] = 0  # agents come and go
            result["cacheScope"] = "public"
        return result

    async def _list_resources(self, call: Call) -> dict[str, Any]:
        """Each agent's description as a resource (the UAP mapping's list of agents)."""
        resources = [
            {
                "uri": AGENT_URI + a.name,
                "name": a.name,
                "title": a.name,
                "description": a.description or f"actorbus agent {a.name}",
                "mimeType": "application/json",
            }
            for a in await self.core.agents()
        ]
        return self._page(call, resources, "resources")

    async def _read_resource(self, call: Call) -> dict[str, Any]:
        uri = call.params.get("uri")
        if not isinstance(uri, str):
            raise McpError(INVALID_PARAMS, "`params.uri` must be a string")
        agents = await self.core.agents()
        agent = next((a for a in agents if AGENT_URI + a.name == uri), None)
        if agent is None:
            raise McpError(INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})
        info = {
            "name": agent.name,
            "description": agent.description,
            "address": agent.address,
            "tags": list(agent.tags),
            "skills": agent.skills,
            "intents": agent.intents,
            "tools": [t.name for t in tools_of([agent])],
        }
        text = json.dumps(info, ensure_ascii=False)
        result: dict[str, Any] = {
            "contents": [{"uri": uri, "mimeType": "application/json", "text": text}]
        }
        if call.modern:
            result["ttlMs"] = 0
            result["cacheScope"] = "public"
        return result

    async def _tools(self) -> list[Tool]:
        return tools_of(await self.core.agents())

    async def _list_tools(self, call: Call) -> dict[str, Any]:
        return self._page(call, [t.describe() for t in await self._tools()], "tools")

    async def _call_tool(self, call: Call) -> dict[str, Any]:
        name = call.params.get("name")
        if not isinstance(name, str):
            raise McpError(INVALID_PARAMS, "`params.name` must be a string")
        arguments = call.params.get("arguments")
        if arguments is None:
            arguments = {}
        tool = next((t for t in await self._tools() if t.name == name), None)
        if tool is None:
            raise McpError(INVALID_PARAMS, f"Unknown tool: {name}")
        trace.get_current_span().set_attribute("actorbus.gateway.agent", tool.agent.name)
        try:
            content = tool.content(arguments)
        except BadArguments as e:
            raise McpError(INVALID_PARAMS, f"Invalid arguments for tool {name}: {e}") from None
        meta = call.params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        task_id = meta.get(TASK_ID_META)
        context_id = meta.get(CONTEXT_ID_META)
        if task_id is not None and not isinstance(task_id, str):
            raise McpError(INVALID_PARAMS, f"`_meta[{TASK_ID_META!r}]` must be a string")
        if context_id is not None and not isinstance(context_id, str):
            raise McpError(INVALID_PARAMS, f"`_meta[{CONTEXT_ID_META!r}]` must be a string")
        if context_id is None and task_id is None and call.session is not None:
            context_id = call.session.id  # one MCP session, one conversation
        message = Message(
            message_id=uuid.uuid4().hex,
            role="user",
            parts=parts_from_content(content),
            task_id=task_id,
            context_id=context_id,
        )
        try:
            live, _ = await self.core.submit(
                tool.agent,
                message,
                protocol="mcp",
                intent=tool.intent,
                content=content,
                stream=False,
                # ids are the session's (taken once there); a stateless call's id
                # is its Idempotency-Key header
                request_id=None if call.session is None else f"mcp:{call.session.id}:{call.id}",
            )
        except (UnknownTaskError, TaskNotContinuableError) as e:
            raise McpError(INVALID_PARAMS, str(e)) from None
        if call.session is not None:
            call.session.running[call.id] = live.task.id
        try:
            task = await self.core.wait_settled(live)
        finally:
            if call.session is not None:
                call.session.running.pop(call.id, None)
        return task_result(task)


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))


__all__ = ["McpEdge", "McpError", "Session"]
