"""Egress: an outside A2A agent, called from inside the bus as if it were an actor.

:class:`A2AEgress` is an adapter for one destination URL (the agent's base URL,
whose card is at ``/.well-known/agent-card.json``, or the card's own URL):

- ``initialize()`` fetches the card (``agent-card.json``, then the legacy
  ``agent.json``) and picks the JSON-RPC endpoint and version: a 1.0 interface
  from ``supportedInterfaces`` if there is one, else 0.3's ``url``;
- ``health_check()`` fetches the card again (True when it answers 200);
- ``send(content)`` sends SendMessage (message/send) and returns the answer's
  content (a Message's parts, or a completed Task's artifacts, as
  :func:`~actorbus.codecs.a2a.content_from_parts` reads them: one part is its
  value, several a list of part objects); ``send_message()`` returns the whole
  Task or Message;
- ``stream(content)`` sends SendStreamingMessage (message/stream) and yields the
  content of each artifact update (or the Message); leaving early cancels the
  remote task (CancelTask);
- ``cleanup()`` closes the HTTP session (one aiohttp session per adapter,
  reused by every call, unless one was handed in).

Errors are the taxonomy's: unreachable -> ``ConnectionLostError``, no answer in
time -> ``AskTimeoutError``, a JSON-RPC error -> the error it carries
(:func:`~actorbus.codecs.a2a.error_from_response`: TaskNotFound, ...), a task
that ``failed`` -> ``RemoteError``, ``rejected`` -> ``UnsupportedError``,
``canceled`` -> ``StreamCancelledError``, ``auth-required`` -> ``AuthError``,
``input-required`` -> ``UnsupportedError`` from ``send`` (``send_message``
returns the task, to answer it), anything that is not A2A ->
``InvalidAgentResponseError``.

:class:`A2AProxy` hosts an adapter as an actor
(``await system.spawn(A2AProxy, "weather", url="https://...")``): its ``text``,
``dict`` and ``bytes`` handlers forward with ``send``, ``stream-text`` streams,
and the session id of the message becomes the A2A ``contextId``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final

import aiohttp
import msgspec

from actorbus.codecs.a2a import (
    V03,
    V10,
    A2AVersion,
    InvalidAgentResponseError,
    decode_response,
    error_from_response,
    parse_version,
)
from actorbus.codecs.a2a.requests import encode_request
from actorbus.codecs.a2a.types import A2ARequest, Method, SendConfig, SendParams, TaskRef
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    AuthError,
    ConnectionLostError,
    RemoteError,
    StreamCancelledError,
    UnsupportedError,
)
from actorbus.codecs.tasks import (
    ArtifactUpdate,
    Message,
    Part,
    StatusUpdate,
    Task,
    TaskState,
    content_from_parts,
    parts_from_content,
)
from actorbus.services.gateway.egress_common import EgressProxy, HttpAdapter, sse_data

log = logging.getLogger("actorbus.gateway.egress")

CARD_PATHS: Final = ("/.well-known/agent-card.json", "/.well-known/agent.json")
_JSON = msgspec.json.Decoder()


def _text_of(message: Message | None) -> str:
    if message is None:
        return ""
    return " ".join(str(p.value) for p in message.parts if p.kind == "text")


def task_error(task: Task) -> ActorBusError | None:
    """The taxonomy error a task's state means for a caller waiting for an answer."""
    state, text = task.status.state, _text_of(task.status.message)
    where = f"remote A2A task {task.id}"
    if state is TaskState.FAILED:
        return RemoteError(text or f"{where} failed", remote_type="A2ATaskFailed")
    if state is TaskState.REJECTED:
        return UnsupportedError(text or f"{where} was rejected")
    if state is TaskState.CANCELED:
        return StreamCancelledError(text or f"{where} was canceled")
    if state is TaskState.AUTH_REQUIRED:
        return AuthError(text or f"{where} needs credentials")
    if state is TaskState.INPUT_REQUIRED:
        return UnsupportedError(f"{where} needs more input: {text}")
    return None


def content_of(parts: list[Part]) -> Any:
    return content_from_parts(parts)[0]


def answer_content(result: Task | Message) -> Any:
    """The content of a SendMessage answer (taxonomy error for unfinished tasks)."""
    if isinstance(result, Message):
        return content_of(result.parts)
    err = task_error(result)
    if err is not None:
        raise err
    if result.status.state is not TaskState.COMPLETED:
        raise InvalidAgentResponseError(
            f"remote A2A task {result.id} is still {result.status.state.value}"
        )
    parts = [p for a in result.artifacts or () for p in a.parts]
    if not parts and result.status.message is not None:
        parts = list(result.status.message.parts)
    return content_of(parts) if parts else None


def pick_endpoint(card: dict[str, Any], base: str) -> tuple[str, A2AVersion]:
    """The JSON-RPC URL and A2A version to use for an agent card."""
    interfaces = card.get("supportedInterfaces")
    if isinstance(interfaces, list):
        found: dict[A2AVersion, str] = {}
        for i in interfaces:
            if not isinstance(i, dict) or i.get("protocolBinding", "JSONRPC") != "JSONRPC":
                continue
            v = parse_version(str(i.get("protocolVersion") or "1.0"))
            if v is not None and isinstance(i.get("url"), str):
                found.setdefault(v, i["url"])
        for v in (V10, V03):
            if v in found:
                return found[v], v
    url = card.get("url")  # 0.3: the main URL (JSON-RPC unless preferredTransport says else)
    if isinstance(url, str) and card.get("preferredTransport") in ("JSONRPC", None):
        return url, V03
    raise InvalidAgentResponseError(f"the agent card at {base} names no JSON-RPC endpoint")


class A2AEgress(HttpAdapter):
    """One outside A2A agent (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        stream_item_timeout: float = 300.0,
        version: str | None = None,
        headers: dict[str, str] | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.stream_item_timeout = stream_item_timeout
        self.forced_version = None if version is None else parse_version(version)
        self.headers = dict(headers or {})
        super().__init__(session)
        self.card: dict[str, Any] | None = None
        self.endpoint: str | None = None
        self.version: A2AVersion | None = None
        self._ids = itertools.count(1)
        self._init_lock = asyncio.Lock()

    # -- lifecycle -----------------------------------------------------------------
    def _card_urls(self) -> list[str]:
        if self.url.endswith(".json"):
            return [self.url]
        return [self.url + p for p in CARD_PATHS]

    async def _fetch_card(self) -> dict[str, Any]:
        problems = []
        for card_url in self._card_urls():
            try:
                async with self.session.get(
                    card_url, timeout=aiohttp.ClientTimeout(total=self.timeout)
                ) as resp:
                    if resp.status != 200:
                        problems.append(f"{card_url}: HTTP {resp.status}")
                        continue
                    card = _JSON.decode(await resp.read())
            except TimeoutError:
                raise AskTimeoutError(self.url, "agent-card", self.timeout) from None
            except (aiohttp.ClientConnectionError, OSError) as e:
                raise ConnectionLostError(f"A2A agent {self.url} is unreachable: {e}") from e
            except msgspec.DecodeError:
                problems.append(f"{card_url}: not JSON")
                continue
            if isinstance(card, dict):
                return card
            problems.append(f"{card_url}: not a JSON object")
        raise InvalidAgentResponseError(f"no agent card: {'; '.join(problems)}")

    async def initialize(self) -> dict[str, Any]:
        """Fetch the card, pick the endpoint and version; returns the card."""
        async with self._init_lock:
            card = await self._fetch_card()
            endpoint, version = pick_endpoint(card, self.url)
            self.card, self.endpoint = card, endpoint
            self.version = self.forced_version or version
            return card

    async def _ready(self) -> tuple[str, A2AVersion]:
        if self.endpoint is None or self.version is None:
            await self.initialize()
        assert self.endpoint is not None
        assert self.version is not None
        return self.endpoint, self.version

    async def health_check(self) -> bool:
        try:
            await self._fetch_card()
        except ActorBusError:
            return False
        return True

    # -- calls -------------------------------------------------------------------
    def message(
        self, content: Any, *, context_id: str | None = None, task_id: str | None = None
    ) -> Message:
        return Message(
            message_id=uuid.uuid4().hex,
            role="user",
            parts=parts_from_content(content),
            context_id=context_id,
            task_id=task_id,
        )

    def _request(self, method: Method, params: Any, version: A2AVersion) -> dict[str, Any]:
        return encode_request(
            A2ARequest(method=method, version=version, id=next(self._ids), params=params)
        )

    def _http_headers(self, version: A2AVersion, stream: bool = False) -> dict[str, str]:
        return {
            **self.headers,
            "A2A-Version": version,
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
        }

    async def _rpc(self, method: Method, params: Any) -> Any:
        endpoint, version = await self._ready()
        body = msgspec.json.encode(self._request(method, params, version))
        try:
            async with self.session.post(
                endpoint,
                data=body,
                headers=self._http_headers(version),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except TimeoutError:
            raise AskTimeoutError(endpoint, method.value, self.timeout) from None
        except (aiohttp.ClientConnectionError, OSError) as e:
            raise ConnectionLostError(f"A2A agent {endpoint} is unreachable: {e}") from e
        if status != 200:
            self._raise_http(status, raw, endpoint)
        return decode_response(raw, version).result

    @staticmethod
    def _raise_http(status: int, raw: bytes, endpoint: str) -> None:
        with contextlib.suppress(msgspec.DecodeError):
            obj = _JSON.decode(raw)
            if isinstance(obj, dict) and "error" in obj:
                raise error_from_response(obj)
        raise InvalidAgentResponseError(f"A2A agent {endpoint} answered HTTP {status}")

    async def send_message(self, message: Message) -> Task | Message:
        """SendMessage; the Task or Message the agent answered."""
        _, version = await self._ready()
        config = SendConfig(blocking=True) if version == V03 else None
        result = await self._rpc(
            Method.SEND_MESSAGE, SendParams(message=message, configuration=config)
        )
        if not isinstance(result, Task | Message):
            raise InvalidAgentResponseError(f"SendMessage answered a {type(result).__name__}")
        return result

    async def send(
        self, content: Any, *, context_id: str | None = None, task_id: str | None = None
    ) -> Any:
        """Send ``content``; the answer's content (see the module docstring)."""
        result = await self.send_message(
            self.message(content, context_id=context_id, task_id=task_id)
        )
        return answer_content(result)

    async def get_task(self, task_id: str) -> Task:
        result = await self._rpc(Method.GET_TASK, TaskRef(id=task_id))
        if not isinstance(result, Task):
            raise InvalidAgentResponseError(f"GetTask answered a {type(result).__name__}")
        return result

    async def cancel_task(self, task_id: str) -> Task:
        result = await self._rpc(Method.CANCEL_TASK, TaskRef(id=task_id))
        if not isinstance(result, Task):
            raise InvalidAgentResponseError(f"CancelTask answered a {type(result).__name__}")
        return result

    async def stream(self, content: Any, *, context_id: str | None = None) -> AsyncIterator[Any]:
        """SendStreamingMessage; the content of each artifact update, in order."""
        endpoint, version = await self._ready()
        params = SendParams(message=self.message(content, context_id=context_id))
        body = msgspec.json.encode(self._request(Method.SEND_STREAMING_MESSAGE, params, version))
        task_id: str | None = None
        finished = False
        try:
            try:
                resp = await self.session.post(
                    endpoint,
                    data=body,
                    headers=self._http_headers(version, stream=True),
                    timeout=aiohttp.ClientTimeout(
                        total=None, connect=self.timeout, sock_read=self.stream_item_timeout
                    ),
                )
            except TimeoutError:
                raise AskTimeoutError(endpoint, "stream", self.timeout) from None
            except (aiohttp.ClientConnectionError, OSError) as e:
                raise ConnectionLostError(f"A2A agent {endpoint} is unreachable: {e}") from e
            async with resp:
                if resp.status != 200:
                    self._raise_http(resp.status, await resp.read(), endpoint)
                if resp.content_type != "text/event-stream":  # an error answered as JSON
                    decode_response(await resp.read(), version)
                    raise InvalidAgentResponseError(
                        f"A2A agent {endpoint} answered a stream with {resp.content_type}"
                    )
                async for data in sse_data(resp, endpoint, self.stream_item_timeout, "A2A"):
                    event = decode_response(data, version).result
                    if isinstance(event, Message):
                        finished = True
                        yield content_of(event.parts)
                        return
                    if isinstance(event, ArtifactUpdate):
                        task_id = event.task_id
                        yield content_of(event.artifact.parts)
                    elif isinstance(event, StatusUpdate | Task):
                        task_id = event.task_id if isinstance(event, StatusUpdate) else event.id
                        state = event.status.state
                        if state.terminal or state.interrupted:
                            finished = True
                            err = task_error(_as_task(event))
                            if err is not None:
                                raise err
                            return
                finished = True
        finally:
            if not finished and task_id is not None:
                with contextlib.suppress(Exception):  # best effort: the remote task stops
                    await asyncio.shield(self.cancel_task(task_id))


def _as_task(event: StatusUpdate | Task) -> Task:
    if isinstance(event, Task):
        return event
    return Task(id=event.task_id, context_id=event.context_id, status=event.status)


class A2AProxy(EgressProxy):
    """An outside A2A agent as an actor (``spawn(A2AProxy, key, url=...)``)."""

    type_name = "a2a-proxy"
    advertise = True
    session_arg = "context_id"
    protocol = "A2A"

    def make_egress(self, url: str, **options: Any) -> A2AEgress:
        return A2AEgress(url, **options)


__all__ = ["A2AEgress", "A2AProxy", "answer_content", "pick_endpoint", "task_error"]
