"""The ACP edge: agents (actor types) as an ACP server (the BeeAI Agent
Communication Protocol, acp-sdk 1.0.x), under the prefix ``/acp``.

Routes (``{id}`` a run id, a UUID; ACP's runs are the gateway's tasks):

- ``GET /acp/ping``: ``{}``.
- ``GET /acp/agents``, ``GET /acp/agents/{name}``: agent manifests of the actor
  types in the registry (description, skills as ``metadata.capabilities``, tags).
- ``POST /acp/runs``: a ``RunCreateRequest``; ``mode`` ``sync`` (200, the
  finished or awaiting run), ``async`` (202, the run as created) or ``stream``
  (SSE: ``run.created``, ``run.in-progress``, ``message.created``,
  ``message.part``..., ``message.completed``, then ``run.completed`` /
  ``run.awaiting`` / ``run.failed`` / ``run.cancelled``). The ``Run-ID`` header
  names the run, as the SDK's server does.
- ``GET /acp/runs/{id}``: the run. ``GET /acp/runs/{id}/events``: its events,
  rebuilt from the stored task.
- ``POST /acp/runs/{id}``: a ``RunResumeRequest`` answering an ``awaiting`` run
  (``run_id`` may be left out of the body: the SDK sends it only in the URL);
  same three modes.
- ``POST /acp/runs/{id}/cancel``: 202 and the run, ``cancelled`` at once; the
  actor's stream is closed (its generator sees ``CancelledError``).
- ``GET /acp/sessions/{id}``: the session (a conversation: the gateway's context
  id) with its history as URLs of messages, ``GET /acp/sessions/{id}/messages/{n}``.

A run is a task of :class:`~..core.GatewayCore`, so runs share the SQLite store
with the other edges and survive a restart. Run status <-> task state as the ACP
codec maps them (:data:`actorbus.codecs.acp.TASK_STATE_OF_RUN`): an actor's
``InputRequired``/``AuthRequired`` makes the run ``awaiting``, with the
question in ``await_request``. The run id is the task id written as a UUID, the
session id the context id (a new session gets a UUID).

Bodies are read as JSON whatever the Content-Type says (the acp-sdk client sends
none). Errors are ACP's ``{code, message, data}`` (``data.code`` the actorbus
code) with the HTTP status of :func:`actorbus.codecs.acp.http_status`: 422
``invalid_input``, 404 ``not_found``, 409 for resuming a run that does not
await or cancelling a finished one, 413 for a body over ``max_body``; never a
traceback.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

import msgspec
from aiohttp import web

from actorbus.codecs.acp import (
    ACP_CODE_OF,
    TERMINAL_STATUSES,
    agent_role,
    content_parts,
    decode_request,
    decode_resume,
    error_to,
    http_status,
    run_status,
    sse_frame,
)
from actorbus.codecs.common import read_json
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    ActorNotFoundError,
    MessageTooLargeError,
    ValidationFailedError,
)
from actorbus.codecs.tasks import (
    ArtifactUpdate,
    Message,
    Part,
    StatusUpdate,
    Task,
    appended,
    parts_from_content,
)
from actorbus.services.gateway.agents import (
    Agent,
    Event,
    LiveTask,
    NotCancelableError,
    TaskNotContinuableError,
)
from actorbus.services.gateway.core import META_KEY
from actorbus.services.gateway.edges import Edge
from actorbus.services.gateway.edges.http import base_url, json_response, read_body, serve_events
from actorbus.services.gateway.settings import GatewaySettings
from actorbus.services.gateway.store import TaskQuery

log = logging.getLogger("actorbus.gateway.acp")

PREFIX: Final = "/acp"
RUN_ID_HEADER: Final = "Run-ID"
CONTENT_TYPES: Final = ["text/plain", "application/json", "application/octet-stream"]
_JSON = msgspec.json.Decoder()


class UnknownRunError(ActorNotFoundError):
    """No run (task) of that id."""


# -- ids ------------------------------------------------------------------------------


def run_id_of(task_id: str) -> str:
    """The ACP run id (a UUID, as the SDK types it) of a task id."""
    try:
        return str(uuid.UUID(task_id))
    except ValueError:
        return task_id


def task_id_of(run_id: str) -> str:
    """The task id of an ACP run id (UnknownRunError if it cannot be one)."""
    try:
        return uuid.UUID(run_id).hex
    except ValueError:
        raise UnknownRunError(f"no run {run_id!r}") from None


def session_of(context_id: str | None) -> str | None:
    """The ACP session id (a UUID) of a context id, None if it is not a UUID."""
    if context_id is None:
        return None
    try:
        return str(uuid.UUID(context_id))
    except ValueError:
        return None


# -- parts, messages, runs ----------------------------------------------------------------


def acp_parts(part: Part) -> list[dict[str, Any]]:
    """The ACP parts for one of the task's (A2A) parts."""
    if part.kind == "url":
        out: dict[str, Any] = {"content_url": str(part.value)}
        if part.media_type is not None:
            out["content_type"] = part.media_type
        parts = [out]
    else:
        parts, _ = content_parts(part.value)
        if part.media_type is not None and len(parts) == 1 and part.kind in ("text", "raw"):
            parts[0]["content_type"] = part.media_type
    if part.filename is not None and len(parts) == 1:
        parts[0]["name"] = part.filename
    return parts


def acp_message(parts: list[Part], role: str) -> dict[str, Any]:
    return {"role": role, "parts": [p for part in parts for p in acp_parts(part)]}


def run_error(task: Task) -> dict[str, Any]:
    """ACP's error object for a failed (or rejected) task."""
    gateway = (task.metadata or {}).get(META_KEY)
    error = gateway.get("error") if isinstance(gateway, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code = error["code"]
        return {
            "code": ACP_CODE_OF.get(code, "server_error"),
            "message": str(error.get("message") or ""),
            "data": {"code": code, "type": str(error.get("type") or "Exception")},
        }
    parts = task.status.message.parts if task.status.message is not None else []
    text = " ".join(str(p.value) for p in parts if p.kind == "text")
    return {"code": "server_error", "message": text or "the run failed"}


def run_json(task: Task, agent: str, created_ms: int = 0) -> dict[str, Any]:
    """The ACP ``Run`` for a task."""
    status = run_status(task.status.state.value)
    role = agent_role(agent)
    run: dict[str, Any] = {
        "run_id": run_id_of(task.id),
        "agent_name": agent,
        "status": status,
        "await_request": None,
        "output": [acp_message(a.parts, role) for a in task.artifacts or ()],
        "error": None,
    }
    session = session_of(task.context_id)
    if session is not None:
        run["session_id"] = session
    if created_ms:
        run["created_at"] = _iso(created_ms)
    if status == "awaiting":
        question = task.status.message.parts if task.status.message is not None else []
        run["await_request"] = {"type": "message", "message": acp_message(question, role)}
    elif status == "failed":
        run["error"] = run_error(task)
    if status in TERMINAL_STATUSES and task.status.timestamp:
        run["finished_at"] = task.status.timestamp
    return run


def _iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_EVENT_OF_STATUS: Final = {
    "in-progress": "run.in-progress",
    "awaiting": "run.awaiting",
    "completed": "run.completed",
    "failed": "run.failed",
    "cancelled": "run.cancelled",
}


def task_events(task: Task, agent: str, created_ms: int = 0) -> list[dict[str, Any]]:
    """A run's events, rebuilt from its task as it is now."""
    run = run_json(task, agent, created_ms)
    events: list[dict[str, Any]] = [
        {"type": "run.created", "run": run | {"status": "created", "output": []}}
    ]
    if run["status"] == "created":
        return events
    events.append({"type": "run.in-progress", "run": run | {"status": "in-progress"}})
    for message in run["output"]:
        events.append({"type": "message.created", "message": {**message, "parts": []}})
        events.extend({"type": "message.part", "part": p} for p in message["parts"])
        events.append({"type": "message.completed", "message": message})
    kind = _EVENT_OF_STATUS.get(run["status"])
    if kind is not None and kind != "run.in-progress":
        events.append({"type": kind, "run": run})
    return events


# -- HTTP helpers -------------------------------------------------------------------------


def _error(err: ActorBusError) -> web.Response:
    status = 409 if isinstance(err, NotCancelableError | TaskNotContinuableError) else None
    return json_response(error_to(err), status or http_status(err))


def stamped_id(messages: list[Any]) -> tuple[str | None, float | None]:
    """The id and time of a request whose messages all carry ``created_at`` (the
    acp-sdk stamps every message it makes): the digest of the messages, stamps
    and all, and the newest stamp. ACP requests have no id of their own; these
    tell a replay from a new message that happens to say the same thing."""
    stamps = []
    for m in messages:
        raw = m.get("created_at") if isinstance(m, dict) else None
        try:
            stamps.append(datetime.fromisoformat(str(raw)).timestamp())
        except ValueError:
            return None, None
    if not stamps:
        return None, None
    canonical = json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "acp:" + hashlib.sha256(canonical.encode()).hexdigest(), max(stamps)


async def _body(request: web.Request, settings: GatewaySettings) -> Any:
    """The request's JSON body, whatever its Content-Type (or none)."""
    try:
        raw = await read_body(request, settings)
    except MessageTooLargeError as e:
        raise _TooLarge(str(e)) from None
    return read_json(raw)


class _TooLarge(ValidationFailedError):
    code = "E_TOO_LARGE"


class _Stream:
    """Turns the core's task events into ACP events, with the run they make."""

    def __init__(self, agent: str, resume: bool) -> None:
        self.agent = agent
        self.resume = resume
        self.task: Task | None = None
        self.open_parts: list[Part] | None = None  # the message being streamed
        self.open_id: str | None = None

    def _run(self) -> dict[str, Any]:
        assert self.task is not None
        return run_json(self.task, self.agent)

    def _close_message(self) -> list[dict[str, Any]]:
        if self.open_parts is None:
            return []
        message = acp_message(self.open_parts, agent_role(self.agent))
        self.open_parts = self.open_id = None
        return [{"type": "message.completed", "message": message}]

    def events(self, event: Event, live: LiveTask) -> list[dict[str, Any]]:
        if isinstance(event, Task):
            self.task = event
            if self.resume or event.status.state.value != "submitted":
                return []
            return [{"type": "run.created", "run": self._run()}]
        assert self.task is not None
        if isinstance(event, ArtifactUpdate):
            out: list[dict[str, Any]] = []
            artifacts = list(self.task.artifacts or [])
            art = event.artifact
            for i, a in enumerate(artifacts):
                if a.artifact_id == art.artifact_id:
                    artifacts[i] = msgspec.structs.replace(a, parts=appended(a.parts, art.parts))
                    break
            else:
                artifacts.append(art)
            self.task = msgspec.structs.replace(self.task, artifacts=artifacts)
            if self.open_id != art.artifact_id:
                out.extend(self._close_message())
                self.open_parts, self.open_id = [], art.artifact_id
                role = agent_role(self.agent)
                out.append({"type": "message.created", "message": {"role": role, "parts": []}})
            assert self.open_parts is not None
            self.open_parts = appended(self.open_parts, art.parts)
            out.extend({"type": "message.part", "part": p} for q in art.parts for p in acp_parts(q))
            return out
        assert isinstance(event, StatusUpdate)
        metadata = live.task.metadata if event.status.state.terminal else self.task.metadata
        self.task = msgspec.structs.replace(self.task, status=event.status, metadata=metadata)
        kind = _EVENT_OF_STATUS.get(run_status(event.status.state.value))
        if kind is None:
            return []
        out = self._close_message() if kind != "run.in-progress" else []
        return [*out, {"type": kind, "run": self._run()}]


class AcpEdge(Edge):
    name: ClassVar[str] = "acp"

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PREFIX + "/ping", self.ping),
            web.get(PREFIX + "/agents", self.list_agents),
            web.get(PREFIX + "/agents/{name}", self.read_agent),
            web.post(PREFIX + "/runs", self.create_run),
            web.get(PREFIX + "/runs/{run_id}", self.read_run),
            web.post(PREFIX + "/runs/{run_id}", self.resume_run),
            web.post(PREFIX + "/runs/{run_id}/cancel", self.cancel_run),
            web.get(PREFIX + "/runs/{run_id}/events", self.run_events),
            web.get(PREFIX + "/sessions/{session_id}", self.read_session),
            web.get(PREFIX + "/sessions/{session_id}/messages/{n}", self.session_message),
            web.route("*", PREFIX + "/{tail:.*}", self.unknown),
        ]

    def _base(self, request: web.Request) -> str:
        return base_url(request, self.settings.public_url) + PREFIX

    # -- agents --------------------------------------------------------------------
    async def ping(self, request: web.Request) -> web.Response:
        return json_response({})

    async def unknown(self, request: web.Request) -> web.Response:
        err = ActorNotFoundError(f"no ACP endpoint {request.method} {request.path}")
        return json_response(error_to(err), 404)

    @staticmethod
    def manifest(agent: Agent) -> dict[str, Any]:
        capabilities = [
            {
                "name": str(s.get("name") or s.get("id") or agent.name),
                "description": str(s.get("description") or s.get("name") or agent.name),
            }
            for s in agent.skills
        ]
        metadata: dict[str, Any] = {"framework": "actorbus", "tags": list(agent.tags)}
        if capabilities:
            metadata["capabilities"] = capabilities
        return {
            "name": agent.name,
            "description": agent.description or f"actorbus agent {agent.name}",
            "metadata": metadata,
            "input_content_types": CONTENT_TYPES,
            "output_content_types": CONTENT_TYPES,
        }

    async def list_agents(self, request: web.Request) -> web.Response:
        return json_response({"agents": [self.manifest(a) for a in await self.core.agents()]})

    async def read_agent(self, request: web.Request) -> web.Response:
        try:
            agent = await self.core.agent(request.match_info["name"])
        except ActorBusError as e:
            return _error(e)
        return json_response(self.manifest(agent))

    # -- runs ----------------------------------------------------------------------
    async def create_run(self, request: web.Request) -> web.StreamResponse:
        try:
            obj = await _body(request, self.settings)
            env = decode_request(obj)  # checks obj is a RunCreateRequest
            # the URL-level agent_name routes, not a dst an envelope part may carry
            agent = await self.core.agent(str(obj["agent_name"]))
            session = obj.get("session_id") or (obj.get("session") or {}).get("id")
            context_id = str(session) if session else str(uuid.uuid4())
            return await self._run(request, agent, obj, env, "a run", context_id=context_id)
        except ActorBusError as e:
            return _error(e)

    async def resume_run(self, request: web.Request) -> web.StreamResponse:
        try:
            task_id = task_id_of(request.match_info["run_id"])
            obj = await _body(request, self.settings)
            env = decode_resume(obj, run_id=request.match_info["run_id"])
            stored = await self._stored(task_id)
            agent = await self.core.agent(stored[1])
            return await self._run(request, agent, obj, env, "a resume", task_id=task_id)
        except ActorBusError as e:
            return _error(e)

    async def _run(
        self,
        request: web.Request,
        agent: Agent,
        obj: dict[str, Any],
        env: Envelope,
        what: str,
        *,
        context_id: str | None = None,
        task_id: str | None = None,
    ) -> web.StreamResponse:
        """Submit a new run (``context_id``) or a resumed one (``task_id``) and answer
        in the mode the request asked for."""
        if env.intent.startswith("$"):
            raise ValidationFailedError(
                f"{what} needs input"
                if env.intent == "$none"
                else f"intent {env.intent!r} is reserved for actorbus itself"
            )
        message = Message(
            message_id=uuid.uuid4().hex,
            role="user",
            parts=parts_from_content(env.content),
            context_id=context_id,
            task_id=task_id,
        )
        mode = str(obj.get("mode") or "sync")
        messages = obj["input"] if task_id is None else [obj["await_resume"]["message"]]
        request_id, stamped = stamped_id(messages)
        live, events = await self.core.submit(
            agent,
            message,
            protocol="acp",
            intent=env.intent,
            content=env.content,
            stream=mode == "stream",
            watch=mode == "stream",
            request_id=request_id,
            stamped=stamped,
        )
        return await self._answer(request, live, events, mode, resume=task_id is not None)

    async def _answer(
        self,
        request: web.Request,
        live: LiveTask,
        events: AsyncIterator[Event] | None,
        mode: str,
        *,
        resume: bool,
    ) -> web.StreamResponse:
        headers = {RUN_ID_HEADER: run_id_of(live.task.id)}
        if mode == "async":
            return json_response(run_json(live.task, live.agent), 202, headers)
        if events is None:
            task = await self.core.wait_settled(live)
            stored = await self.core.store.get_task(task.id)
            created = stored.created_ms if stored is not None else 0
            return json_response(run_json(task, live.agent, created), 200, headers)
        return await self._stream(request, live, events, headers, resume)

    async def _stream(
        self,
        request: web.Request,
        live: LiveTask,
        events: AsyncIterator[Event],
        headers: dict[str, str],
        resume: bool,
    ) -> web.StreamResponse:
        acp = _Stream(live.agent, resume)
        return await serve_events(
            request,
            events,
            lambda event: [sse_frame(out) for out in acp.events(event, live)],
            lambda err: sse_frame({"type": "error", "error": error_to(err)}),
            f"the ACP stream of run {live.task.id}",
            headers,
        )

    async def _stored(self, task_id: str) -> tuple[Task, str, int]:
        """The task (live if it runs), its agent and its creation time."""
        stored = await self.core.store.get_task(task_id)
        live = self.core.live(task_id)
        if live is not None:
            self._admit(live.agent)
            return live.task, live.agent, stored.created_ms if stored is not None else 0
        if stored is None:
            raise UnknownRunError(f"no run {run_id_of(task_id)!r}")
        self._admit(stored.agent)  # an agent's runs are for those who may ask it
        return stored.task, stored.agent, stored.created_ms

    def _admit(self, agent: str) -> None:
        if self.core.auth is not None:
            self.core.auth.admit(agent)

    async def read_run(self, request: web.Request) -> web.Response:
        try:
            task, agent, created = await self._stored(task_id_of(request.match_info["run_id"]))
        except ActorBusError as e:
            return _error(e)
        return json_response(run_json(task, agent, created))

    async def run_events(self, request: web.Request) -> web.Response:
        try:
            task, agent, created = await self._stored(task_id_of(request.match_info["run_id"]))
        except ActorBusError as e:
            return _error(e)
        return json_response({"events": task_events(task, agent, created)})

    async def cancel_run(self, request: web.Request) -> web.Response:
        try:
            task_id = task_id_of(request.match_info["run_id"])
            _, agent, created = await self._stored(task_id)
            task = await self.core.cancel(task_id)
        except ActorBusError as e:
            return _error(e)
        return json_response(run_json(task, agent, created), 202)

    # -- sessions --------------------------------------------------------------------
    async def _session_messages(self, session: str) -> tuple[str, list[dict[str, Any]]]:
        try:
            sid = uuid.UUID(session)
        except ValueError:
            raise ActorNotFoundError(f"no session {session!r}") from None
        for context_id in (str(sid), sid.hex):
            found, _ = await self.core.find(TaskQuery(context_id=context_id, limit=1000))
            if found:
                break
        else:
            raise ActorNotFoundError(f"no session {session!r}")
        messages = []
        for st in found:
            self._admit(st.agent)
        for st in sorted(found, key=lambda s: s.created_ms):
            for m in st.task.history or ():
                role = "user" if m.role == "user" else agent_role(st.agent)
                messages.append(acp_message(m.parts, role))
        return str(sid), messages

    async def read_session(self, request: web.Request) -> web.Response:
        try:
            sid, messages = await self._session_messages(request.match_info["session_id"])
        except ActorBusError as e:
            return _error(e)
        base = self._base(request)
        history = [f"{base}/sessions/{sid}/messages/{n}" for n in range(len(messages))]
        return json_response({"id": sid, "history": history, "state": None})

    async def session_message(self, request: web.Request) -> web.Response:
        try:
            _, messages = await self._session_messages(request.match_info["session_id"])
            n = int(request.match_info["n"]) if request.match_info["n"].isdigit() else -1
            if not 0 <= n < len(messages):
                raise ActorNotFoundError(f"no message {request.match_info['n']!r}")
        except ActorBusError as e:
            return _error(e)
        return json_response(messages[n])
