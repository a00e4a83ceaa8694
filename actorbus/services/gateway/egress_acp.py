"""Egress: an outside ACP agent, called from inside the bus as if it were an actor.

:class:`AcpEgress` is an adapter for one destination: an ACP server's base URL
(``https://host/`` for an acp-sdk server, ``https://gw/acp`` for an actorbus
gateway) and one agent on it (``agent=``, or ``.../agents/{name}`` in the URL,
or the server's only agent):

- ``initialize()`` reads the agent's manifest (``GET /agents/{name}``; without a
  name, ``GET /agents`` must list exactly one);
- ``health_check()`` pings (``GET /ping``; True when it answers 200);
- ``send(content)`` creates a ``sync`` run and returns its output's content (one
  simple part is its value: text, JSON or bytes; several parts ``{"parts": [...]}``,
  as the ACP codec reads them); ``run()`` returns the whole run, ``resume()``
  answers an ``awaiting`` run, ``get_run()``/``cancel_run()``/``run_events()``;
- ``stream(content)`` creates a ``stream`` run and yields the content of each
  ``message.part``; leaving early cancels the remote run;
- ``cleanup()`` closes the HTTP session (one aiohttp session per adapter, reused
  by every call, unless one was handed in).

The message's session id becomes the ACP ``session_id``: as is when it is a
UUID, else a UUID derived from it (uuid5), so one actorbus session is one ACP
session.

Errors are the taxonomy's: unreachable -> ``ConnectionLostError``, no answer in
time -> ``AskTimeoutError``, an ACP error object (HTTP error, ``error`` event or
a failed run) -> :func:`~actorbus.codecs.acp.error_from` (``not_found`` ->
``ActorNotFoundError``, ``invalid_input`` -> ``ValidationFailedError``, an
actorbus code in ``data`` -> that error, else ``RemoteError``), a ``cancelled``
run -> ``StreamCancelledError``, an ``awaiting`` run -> ``UnsupportedError``
from ``send`` (``run`` returns it, to ``resume``), anything that is not ACP ->
``ProtocolError``.

:class:`AcpProxy` hosts an adapter as an actor
(``await system.spawn(AcpProxy, "summarizer", url="https://...", agent="summarizer")``):
its ``text``, ``dict`` and ``bytes`` handlers forward with ``send``, and
``stream-text`` streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final, Literal

import aiohttp
import msgspec

from actorbus.codecs.acp import content_parts, error_from, parts_content
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    ConnectionLostError,
    ProtocolError,
    StreamCancelledError,
    UnsupportedError,
)
from actorbus.services.gateway.egress_common import EgressProxy, HttpAdapter, sse_data

log = logging.getLogger("actorbus.gateway.egress.acp")

Mode = Literal["sync", "async", "stream"]
RUN_ID_HEADER: Final = "Run-ID"
_JSON = msgspec.json.Decoder()


def acp_session(session_id: str | None) -> str | None:
    """The ACP session id (a UUID) for an actorbus session id."""
    if session_id is None:
        return None
    try:
        return str(uuid.UUID(session_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"actorbus:session:{session_id}"))


def run_error(run: dict[str, Any]) -> ActorBusError | None:
    """The taxonomy error a run's status means for a caller waiting for an answer."""
    status = run.get("status")
    where = f"remote ACP run {run.get('run_id')}"
    if status == "failed":
        return error_from(
            run.get("error") or {"code": "server_error", "message": f"{where} failed"}
        )
    if status in ("cancelled", "cancelling"):
        return StreamCancelledError(f"{where} was cancelled")
    if status == "awaiting":
        question = ((run.get("await_request") or {}).get("message") or {}).get("parts") or []
        text = " ".join(str(p.get("content") or "") for p in question if isinstance(p, dict))
        return UnsupportedError(f"{where} awaits more input: {text}")
    return None


def output_content(run: dict[str, Any]) -> Any:
    """The content of a completed run's output (taxonomy error for other statuses)."""
    err = run_error(run)
    if err is not None:
        raise err
    if run.get("status") != "completed":
        raise ProtocolError(f"remote ACP run {run.get('run_id')} is still {run.get('status')}")
    parts = [
        p
        for m in run.get("output") or ()
        if isinstance(m, dict)
        for p in m.get("parts") or ()
        if isinstance(p, dict)
    ]
    return parts_content(parts)


class AcpEgress(HttpAdapter):
    """One agent on an outside ACP server (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        agent: str | None = None,
        timeout: float = 30.0,
        stream_item_timeout: float = 300.0,
        headers: dict[str, str] | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        url = url.rstrip("/")
        base, sep, name = url.rpartition("/agents/")
        if sep and name and "/" not in name:
            url, agent = base, agent or name
        self.url = url
        self.agent = agent
        self.timeout = timeout
        self.stream_item_timeout = stream_item_timeout
        self.headers = dict(headers or {})
        super().__init__(session)
        self.manifest: dict[str, Any] | None = None
        self.last_run_id: str | None = None  # the run the last run()/stream() made
        self._init_lock = asyncio.Lock()

    # -- lifecycle -----------------------------------------------------------------
    async def initialize(self) -> dict[str, Any]:
        """Read the agent's manifest (and find the agent if none was named)."""
        async with self._init_lock:
            if self.agent is None:
                listed = await self._call("GET", "/agents")
                agents = listed.get("agents") if isinstance(listed, dict) else None
                if not isinstance(agents, list) or len(agents) != 1:
                    count = len(agents) if isinstance(agents, list) else 0
                    raise UnsupportedError(
                        f"ACP server {self.url} has {count} agents: name one with agent="
                    )
                self.manifest = dict(agents[0])
                self.agent = str(self.manifest.get("name"))
            else:
                manifest = await self._call("GET", f"/agents/{self.agent}")
                if not isinstance(manifest, dict) or "name" not in manifest:
                    raise ProtocolError(f"{self.url}/agents/{self.agent} is not an ACP manifest")
                self.manifest = manifest
            return self.manifest

    async def _ready(self) -> str:
        if self.manifest is None or self.agent is None:
            await self.initialize()
        assert self.agent is not None
        return self.agent

    async def health_check(self) -> bool:
        try:
            await self._call("GET", "/ping")
        except ActorBusError:
            return False
        return True

    # -- HTTP ----------------------------------------------------------------------
    def _http_headers(self, stream: bool = False) -> dict[str, str]:
        return {
            **self.headers,
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
        }

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = self.url + path
        data = None if body is None else msgspec.json.encode(body)
        try:
            async with self.session.request(
                method,
                url,
                data=data,
                headers=self._http_headers(),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except TimeoutError:
            raise AskTimeoutError(url, method, self.timeout) from None
        except (aiohttp.ClientConnectionError, OSError) as e:
            raise ConnectionLostError(f"ACP server {url} is unreachable: {e}") from e
        return self._decoded(status, raw, url)

    @staticmethod
    def _decoded(status: int, raw: bytes, url: str) -> Any:
        try:
            obj = _JSON.decode(raw) if raw else None
        except msgspec.DecodeError:
            raise ProtocolError(f"ACP server {url} answered HTTP {status}, not JSON") from None
        if status >= 400:
            if isinstance(obj, dict) and "code" in obj and "message" in obj:
                raise error_from(obj)
            raise ProtocolError(f"ACP server {url} answered HTTP {status}")
        return obj

    # -- runs ----------------------------------------------------------------------
    @staticmethod
    def message(content: Any) -> dict[str, Any]:
        return {"role": "user", "parts": content_parts(content)[0]}

    async def run(
        self, content: Any, *, session_id: str | None = None, mode: Mode = "sync"
    ) -> dict[str, Any]:
        """Create a ``sync`` (or ``async``) run; the run the server answered."""
        agent = await self._ready()
        body: dict[str, Any] = {"agent_name": agent, "input": [self.message(content)], "mode": mode}
        session = acp_session(session_id)
        if session is not None:
            body["session_id"] = session
        run = self._checked_run(await self._call("POST", "/runs", body))
        self.last_run_id = str(run["run_id"])
        return run

    async def resume(self, run_id: str, content: Any, *, mode: Mode = "sync") -> dict[str, Any]:
        """Answer an ``awaiting`` run; the run the server answered."""
        body = {
            "run_id": run_id,
            "await_resume": {"type": "message", "message": self.message(content)},
            "mode": mode,
        }
        return self._checked_run(await self._call("POST", f"/runs/{run_id}", body))

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return self._checked_run(await self._call("GET", f"/runs/{run_id}"))

    async def cancel_run(self, run_id: str) -> dict[str, Any]:
        return self._checked_run(await self._call("POST", f"/runs/{run_id}/cancel"))

    async def run_events(self, run_id: str) -> list[dict[str, Any]]:
        got = await self._call("GET", f"/runs/{run_id}/events")
        events = got.get("events") if isinstance(got, dict) else None
        if not isinstance(events, list):
            raise ProtocolError(f"ACP server {self.url} answered no event list")
        return events

    def _checked_run(self, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict) or "run_id" not in obj or "status" not in obj:
            raise ProtocolError(f"ACP server {self.url} answered something that is not a run")
        return obj

    async def send(self, content: Any, *, session_id: str | None = None) -> Any:
        """Run ``content`` to the end; the content of the run's output."""
        return output_content(await self.run(content, session_id=session_id))

    async def stream(self, content: Any, *, session_id: str | None = None) -> AsyncIterator[Any]:
        """A ``stream`` run; the content of each ``message.part``, in order."""
        agent = await self._ready()
        body: dict[str, Any] = {
            "agent_name": agent,
            "input": [self.message(content)],
            "mode": "stream",
        }
        session = acp_session(session_id)
        if session is not None:
            body["session_id"] = session
        url = self.url + "/runs"
        run_id: str | None = None
        finished = False
        try:
            try:
                resp = await self.session.post(
                    url,
                    data=msgspec.json.encode(body),
                    headers=self._http_headers(stream=True),
                    timeout=aiohttp.ClientTimeout(
                        total=None, connect=self.timeout, sock_read=self.stream_item_timeout
                    ),
                )
            except TimeoutError:
                raise AskTimeoutError(url, "stream", self.timeout) from None
            except (aiohttp.ClientConnectionError, OSError) as e:
                raise ConnectionLostError(f"ACP server {url} is unreachable: {e}") from e
            async with resp:
                run_id = self.last_run_id = resp.headers.get(RUN_ID_HEADER)
                if resp.status != 200 or resp.content_type != "text/event-stream":
                    self._decoded(resp.status, await resp.read(), url)
                    raise ProtocolError(f"ACP server {url} answered a stream with JSON")
                async for data in sse_data(resp, url, self.stream_item_timeout, "ACP"):
                    try:
                        event = _JSON.decode(data)
                    except msgspec.DecodeError:
                        raise ProtocolError(f"an event from {url} is not JSON") from None
                    if not isinstance(event, dict):
                        raise ProtocolError(f"an event from {url} is not a JSON object")
                    kind = event.get("type")
                    if kind == "message.part" and isinstance(event.get("part"), dict):
                        yield parts_content([event["part"]])
                    elif kind == "error":
                        finished = True
                        raise error_from(event)
                    elif isinstance(kind, str) and kind.startswith("run."):
                        run = event.get("run")
                        if isinstance(run, dict):
                            run_id = str(run.get("run_id") or run_id or "") or None
                            self.last_run_id = run_id
                            err = run_error(run)
                            if kind in ("run.completed", "run.failed", "run.cancelled") or err:
                                finished = True
                                if err is not None:
                                    raise err
                                return
                finished = True
        finally:
            if not finished and run_id is not None:
                with contextlib.suppress(Exception):  # best effort: the remote run stops
                    await asyncio.shield(self.cancel_run(run_id))


class AcpProxy(EgressProxy):
    """An outside ACP agent as an actor (``spawn(AcpProxy, key, url=..., agent=...)``)."""

    type_name = "acp-proxy"
    advertise = True
    session_arg = "session_id"
    protocol = "ACP"

    def make_egress(self, url: str, **options: Any) -> AcpEgress:
        return AcpEgress(url, **options)


__all__ = ["AcpEgress", "AcpProxy", "acp_session", "output_content", "run_error"]
