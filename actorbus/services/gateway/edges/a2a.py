"""The A2A edge: each agent (actor type) as an A2A server over JSON-RPC.

Routes (``{agent}`` is the actor type's name in the registry):

- ``POST /a2a/{agent}``: JSON-RPC, A2A 1.0 or 0.3 by the ``A2A-Version`` header
  (missing: 0.3). SendMessage / message/send, SendStreamingMessage /
  message/stream (SSE), GetTask / tasks/get, ListTasks (1.0), CancelTask /
  tasks/cancel, SubscribeToTask / tasks/resubscribe. Push notification config
  methods answer -32003, GetExtendedAgentCard -32007.
- ``GET /a2a/{agent}/.well-known/agent-card.json`` and the legacy
  ``.../.well-known/agent.json``: one union card with 1.0's
  ``supportedInterfaces`` and 0.3's ``url``/``protocolVersion``/``preferredTransport``.
- ``GET /a2a``: the agents this gateway exposes, with their card URLs.
- ``GET /.well-known/agent-card.json`` (and ``/a2a/.well-known/...``): the default
  agent's card, or the gateway's own with every agent as a skill.

Bodies are read as JSON whatever the Content-Type says (or without one).
Errors are JSON-RPC error responses in the request's version (HTTP 200, as
JSON-RPC servers answer; 404 for an agent the registry does not know), never a
traceback.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any, ClassVar

import msgspec
from aiohttp import web

import actorbus
from actorbus.codecs.a2a import (
    V10,
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    ListTasksParams,
    Method,
    SendParams,
    TaskList,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskRef,
    UnsupportedOperationError,
    decode_request,
    error_response,
    list_tasks_response,
    message_request,
    send_response,
    sse_frame,
    stream_event,
    task_response,
)
from actorbus.codecs.a2a.types import A2ARequest
from actorbus.codecs.errors import (
    ActorBusError,
    AuthError,
    MessageTooLargeError,
    RateLimitedError,
    RemoteError,
    UnsupportedError,
)
from actorbus.codecs.tasks import Message, Task
from actorbus.services.gateway import oauth
from actorbus.services.gateway.agents import (
    Agent,
    AgentNotFoundError,
    Event,
    NotCancelableError,
    TaskNotContinuableError,
    UnknownTaskError,
)
from actorbus.services.gateway.edges import Edge
from actorbus.services.gateway.edges.a2a_push import checked_config, push_method, pusher_of
from actorbus.services.gateway.edges.a2a_rest import A2ARest, rest_error_frame, rest_frame
from actorbus.services.gateway.edges.http import (
    base_url,
    json_response,
    read_body,
    refusal,
    serve_events,
    sse_error,
)
from actorbus.services.gateway.store import TaskQuery

log = logging.getLogger("actorbus.gateway.a2a")

PREFIX = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
VERSION_HEADER = "A2A-Version"
MODES = ["text/plain", "application/json", "application/octet-stream"]


SCHEME = "oauth2"  # the name of the cards' one security scheme


def security(base: str, scopes: list[str]) -> dict[str, Any]:
    """The card fields that say how to get a token: OAuth 2's client-credentials
    flow at the gateway's token endpoint, needing ``scopes``.

    ``securitySchemes`` is in 0.3's form (``type`` and the flows), which 0.3
    clients read and 1.0 SDKs convert, with 1.0's ``oauth2SecurityScheme`` inside
    for 1.0 readers; ``security`` is 0.3's requirement, ``securityRequirements``
    1.0's."""
    flows = {
        "clientCredentials": {
            "tokenUrl": base + oauth.TOKEN_PATH,
            "scopes": {scope: f"ask {scope.removeprefix(oauth.AGENT_SCOPE)}" for scope in scopes},
        }
    }
    metadata = base + oauth.SERVER_METADATA_PATH
    scheme = {"flows": flows, "oauth2MetadataUrl": metadata}
    return {
        "securitySchemes": {
            SCHEME: {
                "type": "oauth2",
                "description": "a token from the gateway's token endpoint "
                "(client credentials; scopes agent:<name> or agent:*)",
                **scheme,
                "oauth2SecurityScheme": scheme,
            }
        },
        "security": [{SCHEME: scopes}],
        "securityRequirements": [{"schemes": {SCHEME: {"list": scopes}}}],
    }


def agent_card(
    agent: Agent, base: str, *, push: bool = False, secured: bool = False
) -> dict[str, Any]:
    """A card both A2A 1.0 and 0.3 clients read (skills from the registry listing);
    ``push``: whether push notifications are served; ``secured``: whether calls
    need a token (then the card says how to get one)."""
    url = f"{base}{PREFIX}/{agent.name}"
    skills = []
    for s in agent.skills:
        sid = str(s.get("id") or s.get("name") or agent.name)
        skill: dict[str, Any] = {
            "id": sid,
            "name": str(s.get("name") or sid),
            "description": str(s.get("description") or sid),
            "tags": [str(t) for t in s.get("tags") or ()] or list(agent.tags),
        }
        if s.get("examples"):
            skill["examples"] = list(s["examples"])
        skills.append(skill)
    if not skills:
        skills = [{"id": agent.name, "name": agent.name, "description": agent.name, "tags": []}]
    return {
        "name": agent.name,
        "description": agent.description or f"actorbus agent {agent.name}",
        "version": actorbus.__version__,
        "provider": {"organization": "actorbus", "url": base},
        # A2A 1.0
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        # A2A 0.3
        "url": url,
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "capabilities": {
            "streaming": True,
            "pushNotifications": push,
            "stateTransitionHistory": True,
        },
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skills,
        **(security(base, [oauth.agent_scope(agent.name)]) if secured else {}),
    }


def trimmed(task: Task, history_length: int | None, artifacts: bool = True) -> Task:
    """``task`` with its last ``history_length`` messages (0: none; None: all)."""
    history = task.history
    if history_length is not None and history is not None:
        history = history[-history_length:] if history_length > 0 else None
    return msgspec.structs.replace(
        task, history=history or None, artifacts=task.artifacts if artifacts else None
    )


def as_a2a_error(err: ActorBusError) -> ActorBusError:
    """The gateway's own errors as the A2A errors clients expect."""
    if isinstance(err, A2AError):
        return err
    if isinstance(err, UnknownTaskError):
        return TaskNotFoundError(str(err))
    if isinstance(err, NotCancelableError):
        return TaskNotCancelableError(str(err))
    if isinstance(err, TaskNotContinuableError | UnsupportedError):
        return UnsupportedOperationError(str(err))
    return err


def _iso_ms(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise InvalidParamsError(
            f"`params.statusTimestampAfter` is not a timestamp: {text!r}"
        ) from None


class A2AEdge(Edge):
    name: ClassVar[str] = "a2a"

    def routes(self) -> list[web.RouteDef]:
        # the REST routes first, before `/{agent}/...` could take their paths; the
        # default agent's also at the site root, where its card is (clients given
        # only the gateway's URL, the A2A TCK's REST client among them, go there)
        rest = A2ARest(PREFIX, self, self.settings).routes()
        if self.settings.default_agent is not None:
            default = A2ARest("", self, self.settings, self.settings.default_agent)
            rest += default.routes()
        return [
            *rest,
            web.get(PREFIX, self.list_agents),
            web.get(PREFIX + "/{agent}" + CARD_PATH, self.card),
            web.get(PREFIX + "/{agent}" + LEGACY_CARD_PATH, self.card),
            web.post(PREFIX + "/{agent}", self.rpc),
            web.post(PREFIX + "/{agent}/", self.rpc),  # a base URL given with its slash
            web.get(CARD_PATH, self.root_card),  # where clients given the site look
            web.get(LEGACY_CARD_PATH, self.root_card),
            # a client given `/a2a/<agent>` without its slash and resolving the card's
            # relative path against it (the A2A JS SDK, as URL resolution goes) asks
            # here: the gateway's card answers, naming every agent's URL
            web.get(PREFIX + CARD_PATH, self.root_card),
            web.post(PREFIX, self.no_agent),
        ]

    # -- cards -----------------------------------------------------------------------
    async def list_agents(self, request: web.Request) -> web.Response:
        base = base_url(request, self.settings.public_url)
        agents = await self.core.agents()
        return json_response(
            {
                "agents": [
                    {
                        "name": a.name,
                        "url": f"{base}{PREFIX}/{a.name}",
                        "card": f"{base}{PREFIX}/{a.name}{CARD_PATH}",
                    }
                    for a in agents
                ]
            }
        )

    async def card(self, request: web.Request) -> web.Response:
        try:
            agent = await self.core.agent(request.match_info["agent"])
        except AgentNotFoundError as e:
            return json_response({"error": "not_found", "message": str(e)}, status=404)
        return json_response(self._card(agent, base_url(request, self.settings.public_url)))

    def _card(self, agent: Agent, base: str) -> dict[str, Any]:
        needs_token = self.core.auth is not None and not self.core.auth.is_open(agent.name)
        return agent_card(agent, base, push=self.core.pusher is not None, secured=needs_token)

    async def root_card(self, request: web.Request) -> web.Response:
        """The default agent's card, or the gateway's own: its agents as skills."""
        base = base_url(request, self.settings.public_url)
        if self.settings.default_agent is not None:
            try:
                agent = await self.core.agent(self.settings.default_agent)
            except AgentNotFoundError as e:
                return json_response({"error": "not_found", "message": str(e)}, status=404)
            return json_response(self._card(agent, base))
        agents = await self.core.agents()
        card = agent_card(
            Agent(
                name="actorbus-gateway",
                address="",
                description="An actorbus gateway: each skill is an agent, served at "
                f"{base}{PREFIX}/<skill id>",
                skills=[
                    {"id": a.name, "name": a.name, "description": a.description or a.name}
                    for a in agents
                ],
                intents={},
                tags=["gateway"],
            ),
            base,
        )
        url = f"{base}{PREFIX}"
        card["url"] = url
        for interface in card["supportedInterfaces"]:
            interface["url"] = url
        return json_response(card)

    async def no_agent(self, request: web.Request) -> web.Response:
        """A message to the gateway itself: it says where the agents are."""
        agents = [a.name for a in await self.core.agents()]
        err = UnsupportedOperationError(
            "this gateway serves several agents; send to "
            + ", ".join(f"{PREFIX}/{a}" for a in agents)
            if agents
            else "this gateway serves no agent yet",
            metadata={"agents": ",".join(agents)},
        )
        return json_response(error_response(err, None, request.headers.get(VERSION_HEADER)))

    # -- JSON-RPC --------------------------------------------------------------------
    async def rpc(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get(VERSION_HEADER)
        try:
            body = await read_body(request, self.settings)
        except MessageTooLargeError as e:
            # -32600, as every JSON-RPC edge of the gateway answers a body too large
            too_big = InvalidRequestError(str(e))
            return json_response(error_response(too_big, None, header), status=413)
        try:
            req = decode_request(body, header)
        except A2AError as e:
            return json_response(error_response(e, e.request_id, header))
        version = req.version
        try:
            agent = await self.core.agent(request.match_info["agent"])
        except AgentNotFoundError as e:
            err = UnsupportedOperationError(str(e), metadata={"agent": request.match_info["agent"]})
            return json_response(error_response(err, req.id, version), status=404)
        try:
            if req.method.streaming:
                try:
                    return await self._stream(request, req, agent)
                except (AuthError, RateLimitedError):
                    raise
                except ActorBusError as e:  # before the stream began: still a stream
                    frame = sse_frame(error_response(as_a2a_error(e), req.id, version))
                    return await sse_error(request, frame)
            result = await self._call(req, agent)
        except (AuthError, RateLimitedError) as e:  # refused before any work: HTTP says so
            return refusal(error_response(as_a2a_error(e), req.id, version), e)
        except ActorBusError as e:
            return json_response(error_response(as_a2a_error(e), req.id, version))
        except Exception as exc:
            log.exception("A2A %s on %s failed", req.wire_method, agent.name)
            err2 = RemoteError("internal error in the gateway", remote_type=type(exc).__name__)
            return json_response(error_response(err2, req.id, version))
        if req.notification:
            return web.Response(status=204)
        return json_response(result)

    async def _call(self, req: A2ARequest, agent: Agent) -> dict[str, Any]:
        v, rid = req.version, req.id
        if req.method is Method.SEND_MESSAGE:
            assert isinstance(req.params, SendParams)
            return await self._send(req, req.params, agent)
        self._admit(agent)  # the agent's tasks are for those who may ask it
        if req.method is Method.GET_TASK:
            assert isinstance(req.params, TaskRef)
            stored = await self.core.get(req.params.id, agent.name)
            return task_response(rid, trimmed(stored.task, req.params.history_length), v)
        if req.method is Method.CANCEL_TASK:
            assert isinstance(req.params, TaskRef)
            task = await self.core.cancel(req.params.id, agent.name)
            return task_response(rid, trimmed(task, req.params.history_length), v)
        if req.method is Method.LIST_TASKS:
            assert isinstance(req.params, ListTasksParams)
            return await self._list(req, req.params, agent)
        if req.method is Method.GET_EXTENDED_AGENT_CARD:
            raise ExtendedAgentCardNotConfiguredError()
        return await push_method(self.core, req, agent)

    def _admit(self, agent: Agent) -> None:
        if self.core.auth is not None:
            self.core.auth.admit(agent.name)

    def _submit_args(self, params: SendParams, agent: Agent) -> tuple[Message, str, Any]:
        intent, content = message_request(params.message)
        if intent.startswith("$"):
            raise InvalidParamsError(f"intent {intent!r} is reserved for actorbus itself")
        return params.message, intent, content

    async def _push_hook(
        self, params: SendParams, version: str
    ) -> Callable[[Task], Awaitable[None]] | None:
        """The push config a send carries, checked now and stored with its new task
        (before the task's first change, which it then hears)."""
        config = params.configuration
        raw = config.push_notification_config if config is not None else None
        if raw is None:
            return None
        checked = await checked_config(self.core, raw, "", version)
        pusher = pusher_of(self.core)

        async def store(task: Task) -> None:
            await pusher.configs.put(dataclasses.replace(checked, task_id=task.id))

        return store

    async def _send(self, req: A2ARequest, params: SendParams, agent: Agent) -> dict[str, Any]:
        message, intent, content = self._submit_args(params, agent)
        live, _ = await self.core.submit(
            agent,
            message,
            protocol="a2a",
            request_id=message.message_id,  # the client's own id: a replay shows
            intent=intent,
            content=content,
            stream=False,
            configure=await self._push_hook(params, req.version),
        )
        config = params.configuration
        if config is not None and config.returns_immediately:
            task = live.task
        else:
            task = await self.core.wait_settled(live)
        history_length = config.history_length if config is not None else None
        if self.settings.a2a_message_replies and task.status.state.value == "completed":
            answers = [m for m in task.history or () if m.role == "agent"]
            if answers:
                return send_response(req.id, answers[-1], req.version)
        return send_response(req.id, trimmed(task, history_length), req.version)

    async def _list(self, req: A2ARequest, params: ListTasksParams, agent: Agent) -> dict[str, Any]:
        size = params.page_size or 50
        try:
            offset = int(params.page_token or 0)
        except ValueError:
            raise InvalidParamsError(
                f"`params.pageToken` is not one of ours: {params.page_token!r}"
            ) from None
        query = TaskQuery(
            agent=agent.name,
            context_id=params.context_id,
            state=params.status,
            updated_after_ms=_iso_ms(params.status_timestamp_after),
            limit=size,
            offset=max(offset, 0),
        )
        found, total = await self.core.find(query)
        tasks = [
            trimmed(st.task, params.history_length, bool(params.include_artifacts)) for st in found
        ]
        more = offset + len(tasks) < total
        page = TaskList(
            tasks=tasks,
            next_page_token=str(offset + len(tasks)) if more else "",
            page_size=len(tasks),  # what this page holds, as the A2A TCK reads it
            total_size=total,
        )
        return list_tasks_response(req.id, page, V10)

    # -- SSE -------------------------------------------------------------------------
    # -- what the REST binding runs (a2a_rest.A2AMethods) ------------------------------
    async def agent_named(self, name: str) -> Agent:
        return await self.core.agent(name)  # AgentNotFoundError: the REST binding's 404

    async def call(self, req: A2ARequest, agent: Agent) -> dict[str, Any]:
        return await self._call(req, agent)

    async def stream(
        self, request: web.Request, req: A2ARequest, agent: Agent, *, rest: bool
    ) -> web.StreamResponse:
        return await self._stream(request, req, agent, rest=rest)

    def as_a2a_error(self, err: ActorBusError) -> ActorBusError:
        return as_a2a_error(err)

    async def _stream(
        self, request: web.Request, req: A2ARequest, agent: Agent, *, rest: bool = False
    ) -> web.StreamResponse:
        events: AsyncIterator[Event]
        if req.method is Method.SEND_STREAMING_MESSAGE:
            assert isinstance(req.params, SendParams)
            message, intent, content = self._submit_args(req.params, agent)
            _, watched = await self.core.submit(
                agent,
                message,
                protocol="a2a",
                request_id=message.message_id,
                intent=intent,
                content=content,
                stream=True,
                watch=True,
                configure=await self._push_hook(req.params, req.version),
            )
            assert watched is not None
            events = watched
        else:
            assert isinstance(req.params, TaskRef)
            self._admit(agent)
            events = await self.core.subscribe(req.params.id, agent.name)
        if rest:  # the bare StreamResponse; an error as an `event: error` frame
            return await serve_events(
                request,
                events,
                lambda event: (rest_frame(stream_event(req.id, event, V10)["result"]),),
                lambda err: rest_error_frame(as_a2a_error(err)),
                f"the A2A REST stream of {agent.name}",
            )
        return await serve_events(
            request,
            events,
            lambda event: (sse_frame(stream_event(req.id, event, req.version)),),
            lambda err: sse_frame(error_response(as_a2a_error(err), req.id, req.version)),
            f"the A2A stream of {agent.name}",
        )
