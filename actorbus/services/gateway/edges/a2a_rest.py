"""A2A 1.0's HTTP+JSON (REST) binding, beside JSON-RPC on the same agent URL.

Each REST call is read into the request the JSON-RPC binding would have decoded
(same codec, same checks) and run by the A2A edge's own methods, so the two
bindings cannot drift apart; only the framing differs:

============================================  ======================  ==============
route (under ``/a2a/{agent}``)                 method                  answer
============================================  ======================  ==============
``POST /message:send``                         SendMessage             a Task or Message
``POST /message:stream``                       SendStreamingMessage    SSE of StreamResponse
``GET /tasks/{id}?historyLength=``             GetTask                 the Task
``GET /tasks?contextId=&status=&...``          ListTasks               ListTasksResponse
``POST /tasks/{id}:cancel``                    CancelTask              the Task
``POST`` or ``GET /tasks/{id}:subscribe``      SubscribeToTask         SSE of StreamResponse
``POST|GET /tasks/{id}/pushNotificationConfigs``  Create / ListTaskPush...  the config / the list
``GET|DELETE .../pushNotificationConfigs/{c}``   Get / DeleteTaskPush...   the config / ``{}``
``GET /extendedAgentCard``                     GetExtendedAgentCard    400
============================================  ======================  ==============

Errors are HTTP statuses with a ``google.rpc.Status`` body (``code``,
``status``, ``message``, ``details`` holding the ErrorInfo JSON-RPC answers carry),
also for a stream that cannot begin; an error after a stream began is its last
frame, ``event: error``. The version
is 1.0 whatever the headers say: 0.3's REST binding is not served.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from aiohttp import web

from actorbus.codecs.a2a import (
    V10,
    InvalidParamsError,
    InvalidRequestError,
    UnsupportedOperationError,
    decode_request,
    rest_error,
)
from actorbus.codecs.a2a.types import A2ARequest
from actorbus.codecs.common import read_json
from actorbus.codecs.errors import ActorBusError, DecodeError, RemoteError
from actorbus.services.gateway.agents import Agent, AgentNotFoundError
from actorbus.services.gateway.edges.http import json_response, read_body
from actorbus.services.gateway.settings import GatewaySettings

log = logging.getLogger("actorbus.gateway.a2a")

_TASK = "/tasks/{task:[^/:]+}"
_CONFIGS = _TASK + "/pushNotificationConfigs"
_CONFIG = _CONFIGS + "/{config}"


class A2AMethods(Protocol):
    """What the REST binding needs of the A2A edge: its agents and its methods."""

    async def agent_named(self, name: str) -> Agent:
        """The agent of that name; AgentNotFoundError if the registry has none."""
        ...

    async def call(self, req: A2ARequest, agent: Agent) -> dict[str, Any]: ...

    async def stream(
        self, request: web.Request, req: A2ARequest, agent: Agent, *, rest: bool
    ) -> web.StreamResponse: ...

    def as_a2a_error(self, err: ActorBusError) -> ActorBusError: ...


def rest_frame(result: Any) -> bytes:
    """One StreamResponse as an SSE frame (the JSON-RPC result, unwrapped)."""
    return b"data: " + msgspec.json.encode(result) + b"\n\n"


def rest_error_frame(err: ActorBusError) -> bytes:
    _, body = rest_error(err)
    return b"event: error\ndata: " + msgspec.json.encode(body) + b"\n\n"


def _int(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidParamsError(f"query parameter `{name}` must be an integer: {raw!r}") from None


def _list_params(query: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in ("contextId", "status", "pageToken", "statusTimestampAfter"):
        if query.get(name):
            params[name] = query[name]
    for name in ("pageSize", "historyLength"):
        value = _int(query, name)
        if value is not None:
            params[name] = value
    flag = query.get("includeArtifacts")
    if flag is not None:
        if flag.lower() not in ("true", "false"):
            raise InvalidParamsError(f"`includeArtifacts` must be true or false: {flag!r}")
        params["includeArtifacts"] = flag.lower() == "true"
    return params


class A2ARest:
    """The HTTP+JSON routes of the A2A edge."""

    def __init__(
        self, prefix: str, methods: A2AMethods, settings: GatewaySettings, agent: str | None = None
    ) -> None:
        self.prefix = prefix
        self.methods = methods
        self.settings = settings
        self.agent = agent  # the one agent served at ``prefix`` (else ``/{agent}`` names it)

    def routes(self) -> list[web.RouteDef]:
        base = self.prefix if self.agent is not None else self.prefix + "/{agent}"
        return [
            web.post(base + "/message:send", self._handler("SendMessage", self._body)),
            web.post(base + "/message:stream", self._handler("SendStreamingMessage", self._body)),
            web.get(base + "/tasks", self._handler("ListTasks", self._list)),
            web.get(base + _TASK, self._handler("GetTask", self._task_ref)),
            web.post(base + _TASK + ":cancel", self._handler("CancelTask", self._task_ref)),
            web.post(base + _TASK + ":subscribe", self._handler("SubscribeToTask", self._task_ref)),
            web.get(base + _TASK + ":subscribe", self._handler("SubscribeToTask", self._task_ref)),
            web.post(base + _CONFIGS, self._handler("CreateTaskPushNotificationConfig", self._new)),
            web.get(base + _CONFIGS, self._handler("ListTaskPushNotificationConfigs", self._of)),
            web.get(base + _CONFIG, self._handler("GetTaskPushNotificationConfig", self._of)),
            web.delete(base + _CONFIG, self._handler("DeleteTaskPushNotificationConfig", self._of)),
            web.get(base + "/extendedAgentCard", self._handler("GetExtendedAgentCard", self._none)),
        ]

    # -- reading a REST call as the JSON-RPC request it stands for -------------------
    async def _body(self, request: web.Request) -> Any:
        raw = await read_body(request, self.settings)
        try:
            return read_json(raw)
        except DecodeError as e:
            raise InvalidRequestError(f"the body is not JSON: {e}") from None

    @staticmethod
    async def _task_ref(request: web.Request) -> Any:
        params: dict[str, Any] = {"id": request.match_info["task"]}
        history = _int(request.query, "historyLength")
        if history is not None:
            params["historyLength"] = history
        return params

    async def _new(self, request: web.Request) -> Any:
        """A config to create: the body, for the task the path names."""
        body = await self._body(request)
        if not isinstance(body, dict):
            raise InvalidRequestError("the body must be a push notification config object")
        return {**body, "taskId": request.match_info["task"]}

    @staticmethod
    async def _of(request: web.Request) -> Any:
        """The task (and config) the path names."""
        params = {"taskId": request.match_info["task"]}
        if "config" in request.match_info:
            params["id"] = request.match_info["config"]
        return params

    @staticmethod
    async def _list(request: web.Request) -> Any:
        return _list_params(request.query)

    @staticmethod
    async def _none(request: web.Request) -> Any:
        return {}

    def _handler(
        self, method: str, params_of: Callable[[web.Request], Awaitable[Any]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._serve(request, method, params_of)

        return handle

    async def _serve(
        self,
        request: web.Request,
        method: str,
        params_of: Callable[[web.Request], Awaitable[Any]],
    ) -> web.StreamResponse:
        streaming = method in ("SendStreamingMessage", "SubscribeToTask")
        try:
            params = await params_of(request)
            req = decode_request(
                {"jsonrpc": "2.0", "id": "rest", "method": method, "params": params}, V10
            )
            agent = await self.methods.agent_named(self.agent or request.match_info["agent"])
            if streaming:  # an error before the first event is still an HTTP status
                return await self.methods.stream(request, req, agent, rest=True)
            answer = await self.methods.call(req, agent)
        except AgentNotFoundError as e:  # no such resource: the path names no agent
            status, body = rest_error(UnsupportedOperationError(str(e)))
            body["error"].update(code=404, status="NOT_FOUND")
            return json_response(body, 404)
        except ActorBusError as e:
            status, body = rest_error(self.methods.as_a2a_error(e))
            headers = {}
            retry = getattr(e, "retry_after", None)
            if retry is not None:
                headers["Retry-After"] = str(int(retry or 1))
            return json_response(body, status, headers)
        except Exception as exc:
            log.exception("A2A REST %s failed", method)
            internal = RemoteError("internal error in the gateway", remote_type=type(exc).__name__)
            status, body = rest_error(internal)
            return json_response(body, status)
        return json_response(answer["result"])
