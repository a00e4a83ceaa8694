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
(see :mod:`.mcp_tools` for the tool mapping); prompts, resource templates and
``logging/setLevel`` (:mod:`.mcp_prompts`). Arguments a tool's schema refuses are
an ``isError`` result (SEP-1303). A call with a ``progressToken`` from a client that
takes event streams is answered as one: ``notifications/progress`` per streamed
item, then the result. A call runs as a gateway task
(``protocol="mcp"``, stored like every other task): the actor's reply is the
result, an actor failure an ``isError`` result, a question
(``InputRequired``) an answer whose ``_meta["io.actorbus/task"]`` names the task;
the next call with ``_meta["io.actorbus/taskId"]`` continues it.
``_meta["io.actorbus/contextId"]`` picks the conversation. In a 2025-11-25
session, ``notifications/cancelled`` for a call in flight cancels its task.
``resources/list`` and ``resources/read`` serve each agent's description
(``actorbus://agents/{name}``: skills, intents with their schemas, tool names),
as the UAP gateway mapping puts agent information in resources.

Answers are JSON (``application/json``), or one SSE ``message`` event to a
client whose ``Accept`` names ``text/event-stream`` and no JSON. Bodies are read as JSON
whatever the Content-Type; errors are JSON-RPC errors (-32700 not JSON, -32600
not one JSON-RPC request, -32601 unknown method, -32602 bad params or an
unknown tool), never a traceback. ``GET /mcp`` is 405: the gateway
sends no server-initiated messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections import OrderedDict
from typing import Any, ClassVar

from aiohttp import web
from opentelemetry import trace

from actorbus.codecs.common import read_json
from actorbus.codecs.errors import (
    ActorBusError,
    AuthError,
    DecodeError,
    MessageTooLargeError,
    RateLimitedError,
)
from actorbus.services.gateway.agents import (
    Agent,
)
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.edges import Edge
from actorbus.services.gateway.edges.http import SSE_HEADERS, json_response, read_body, refusal
from actorbus.services.gateway.edges.mcp_calls import ToolCalls, stamped
from actorbus.services.gateway.edges.mcp_prompts import (
    AGENT_TEMPLATE,
    ParamsError,
    log_level,
    prompt_messages,
    prompts_of,
)
from actorbus.services.gateway.edges.mcp_tools import (
    Tool,
    tools_of,
)
from actorbus.services.gateway.edges.mcp_wire import (
    AGENT_URI,
    CAPABILITIES,
    HANDSHAKE_VERSIONS,
    INSTRUCTIONS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_HANDSHAKE,
    MAX_SESSIONS,
    METHOD_NOT_FOUND,
    MODERN_STATUS,
    MODERN_VERSIONS,
    PAGE_SIZE,
    PARSE_ERROR,
    PATH,
    SESSION_HEADER,
    VERSION_HEADER,
    Call,
    McpError,
    Session,
    _valid_id,
    accepts_sse,
    decode_call,
    error_body,
    progress_token,
    server_info,
    sse_message,
    unsupported,
    wants_sse,
)
from actorbus.services.gateway.settings import GatewaySettings

log = logging.getLogger("actorbus.gateway.mcp")


class McpEdge(Edge):
    name: ClassVar[str] = "mcp"

    def __init__(self, core: GatewayCore, settings: GatewaySettings) -> None:
        super().__init__(core, settings)
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.calls = ToolCalls(core)
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
        unauthenticated = self._unauthenticated()
        if unauthenticated is not None:
            return unauthenticated
        sid = request.headers.get(SESSION_HEADER)
        if not sid:
            err = McpError(INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id")
            return json_response(error_body(None, err), status=400)
        if self._sessions.pop(sid, None) is None:
            err = McpError(INVALID_REQUEST, "Not Found: no such session (initialize again)")
            return json_response(error_body(None, err), status=404)
        return web.Response(status=204)

    def _unauthenticated(self) -> web.Response | None:
        """HTTP 401 for a request this server cannot take at all: a token that
        does not verify, or none where no agent is open. (A valid token, or none
        where some agents are open, gets in, and sees what it may ask.) The
        answer's ``WWW-Authenticate`` leads MCP clients to the token endpoint."""
        auth = self.core.auth
        if auth is None:
            return None
        try:
            auth.authenticate()
        except AuthError as e:
            err = McpError(INVALID_REQUEST, f"{e.code}: {e}", {"code": e.code})
            return refusal(error_body(None, err), e)
        return None

    async def post(self, request: web.Request) -> web.StreamResponse:
        unauthenticated = self._unauthenticated()
        if unauthenticated is not None:
            return unauthenticated
        header = request.headers.get(VERSION_HEADER)
        modern = header is not None and header not in HANDSHAKE_VERSIONS
        try:
            body = await read_body(request, self.settings)
        except MessageTooLargeError as e:
            too_big = McpError(INVALID_REQUEST, str(e))
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
            call = decode_call(request, decoded, header, modern, self._sessions)
        except McpError as e:
            return await self._error(request, rid if _valid_id(rid) else None, e, modern, e.status)
        span = trace.get_current_span()
        span.set_attribute("mcp.method.name", call.method)
        span.set_attribute("mcp.protocol.version", call.version)
        token = progress_token(call)
        if token is not None and accepts_sse(request):
            try:
                return await self.calls.call_with_progress(request, call, token)
            except McpError as e:
                return await self._error(request, call.id, e, modern, e.status)
            except (AuthError, RateLimitedError) as e:
                return self._refused(call, e)
        try:
            result = await self._dispatch(call)
        except McpError as e:
            return await self._error(request, call.id, e, modern, e.status)
        except (AuthError, RateLimitedError) as e:  # refused before any work: HTTP says so
            return self._refused(call, e)
        except ActorBusError as e:  # the gateway is stopping, lost NATS ...
            err = McpError(INTERNAL_ERROR, f"{e.code}: {e}")
            return await self._error(request, call.id, err, modern)
        except Exception:
            log.exception("MCP %s failed", call.method)
            err = McpError(INTERNAL_ERROR, "internal error in the gateway")
            return await self._error(request, call.id, err, modern)
        answer = {"jsonrpc": "2.0", "id": call.id, "result": stamped(result, modern)}
        return await self._answer(request, answer, 200, call.extra_headers)

    def _refused(self, call: Call, err: AuthError | RateLimitedError) -> web.Response:
        if call.session is not None:
            call.session.give_back(call.id)
        refused = McpError(INVALID_REQUEST, f"{err.code}: {err}", {"code": err.code})
        return refusal(error_body(call.id, refused), err)

    async def _error(
        self,
        request: web.Request,
        rid: Any,
        err: McpError,
        modern: bool,
        status: int | None = None,
    ) -> web.StreamResponse:
        if status is None:
            status = MODERN_STATUS.get(err.code, 200) if modern else 200
        return await self._answer(request, error_body(rid, err), status)

    async def _answer(
        self,
        request: web.Request,
        body: dict[str, Any],
        status: int,
        headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        """The JSON-RPC answer as JSON, or as one SSE ``message`` event to a client
        that reads only streams (an HTTP-level failure stays a JSON error)."""
        if status != 200 or not wants_sse(request):
            return json_response(body, status=status, headers=headers)
        response = web.StreamResponse(headers={**SSE_HEADERS, **(headers or {})})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            await response.write(sse_message(body))
            await response.write_eof()
        return response

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

    # -- methods -----------------------------------------------------------------------
    async def _dispatch(self, call: Call) -> dict[str, Any]:
        m = call.method
        if m == "tools/list":
            return await self._list_tools(call)
        if m == "tools/call":
            return await self.calls.call(call)
        if m == "resources/list":
            return await self._list_resources(call)
        if m == "resources/read":
            return await self._read_resource(call)
        if m == "resources/templates/list":
            return self._page(call, [AGENT_TEMPLATE], "resourceTemplates")
        if m == "prompts/list":
            return self._page(call, prompts_of(await self._visible()), "prompts")
        if m == "prompts/get":
            name = call.params.get("name")
            try:
                if not isinstance(name, str):
                    raise ParamsError("`params.name` must be a string")
                return prompt_messages(await self._visible(), name, call.params.get("arguments"))
            except ParamsError as e:
                raise McpError(INVALID_PARAMS, str(e)) from None
        if call.modern:
            if m == "server/discover":
                return self._discover()
        elif m == "initialize":
            return self._initialize(call)
        elif m == "ping":
            return {}
        elif m == "logging/setLevel" and call.session is not None:
            try:
                call.session.log_level = log_level(call.params)
            except ParamsError as e:
                raise McpError(INVALID_PARAMS, str(e)) from None
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
            for a in await self._visible()
        ]
        return self._page(call, resources, "resources")

    async def _read_resource(self, call: Call) -> dict[str, Any]:
        uri = call.params.get("uri")
        if not isinstance(uri, str):
            raise McpError(INVALID_PARAMS, "`params.uri` must be a string")
        agents = await self._visible()
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

    async def _visible(self) -> list[Agent]:
        """The agents this caller may ask: what it is shown."""
        auth = self.core.auth
        agents = await self.core.agents()
        return agents if auth is None else [a for a in agents if auth.may_ask(a.name)]

    async def _list_tools(self, call: Call) -> dict[str, Any]:
        tools = tools_of(await self._visible())
        return self._page(call, [t.describe() for t in tools], "tools")


__all__ = ["McpEdge", "McpError", "Session"]
