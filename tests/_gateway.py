"""Helpers for the gateway tests (importable as ``_gateway``: tests/ is on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from actorbus import Actor, ActorSystem, handler
from actorbus.services.gateway import GatewayService, GatewaySettings, InputRequired

RUN_STREAM_EVENTS = [  # an ACP run of GwStreamer on "a b c", event by event
    "run.created",
    "run.in-progress",
    "message.created",
    "message.part",
    "message.part",
    "message.part",
    "message.completed",
    "run.completed",
]


async def check_unreachable(make_egress: Callable[[str], Any]) -> None:
    """An egress to a port nobody listens on: unhealthy, and a send fails with
    ConnectionLostError (not a hang, not a raw socket error)."""
    from actorbus.codecs.errors import ConnectionLostError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    gone = make_egress(dead)
    try:
        assert not await gone.health_check()
        try:
            await gone.send("anyone?")
        except ConnectionLostError:
            pass
        else:
            raise AssertionError("a send to a dead port did not fail")
    finally:
        await gone.cleanup()


async def check_egress(egress: Any, **again: Any) -> None:
    """An egress to the remote test agent: healthy, a send answered, a second send
    (with ``again``'s session keywords) on the same HTTP session, a stream."""
    assert await egress.health_check()
    assert await egress.send("hello") == "remote: hello"
    session = egress.session
    assert await egress.send("again", **again) == "remote: again"
    assert egress.session is session  # one HTTP session, reused
    assert [i async for i in egress.stream("words a b c")] == ["A", "B", "C"]


async def check_relay(system: ActorSystem, cls: type[Actor], **kwargs: Any) -> None:
    """Spawn the proxy actor ``cls`` at ``<type>/1`` and check that an ask and a
    stream reach the remote test agent through it."""
    ref = await system.spawn(cls, "1", **kwargs)
    # an actor calls the outside agent as if it were an actor
    assert await system.ask(ref.address, "direct") == "remote: direct"
    items = [i async for i in system.stream(ref.address, "words x y", intent="stream-text")]
    assert items == ["X", "Y"]


@contextlib.asynccontextmanager
async def asgi_server(
    make_app: Callable[[str], Any], release: asyncio.Event, *, lifespan: str = "off"
) -> AsyncIterator[str]:
    """An ASGI app (an official SDK's server) under uvicorn on a loopback socket;
    yields its base URL. ``make_app`` gets the URL (cards name it); ``release``
    is set first on the way out, so handlers waiting on it end."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn serves: no race
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(make_app(base), log_level="warning", lifespan=lifespan)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield base
    finally:
        release.set()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, 5)
        sock.close()


class Probe:
    """In-process facts the streaming actor reports to a test."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()  # lets "hang" asks finish (set at teardown)
        self.contexts: list[Any] = []  # the envelope context of every shout


class GwEcho(Actor):
    """Echoes text in capitals and data back with its session."""

    type_name = "gw-echo"
    skills = ("echo",)
    tags = ("test",)

    def __init__(self, probe: Probe | None = None) -> None:
        self.probe = probe or Probe()
        self.asked: set[str | None] = set()  # sessions we asked for a name

    @handler
    async def shout(self, text: str) -> str | InputRequired:
        self.probe.contexts.append(self.envelope.context)
        session = self.envelope.context.session_id
        if text == "ask me":
            self.asked.add(session)
            return InputRequired(message="what is your name?")
        if session in self.asked:
            self.asked.discard(session)
            return f"HELLO {text.upper()}"
        if text == "fail":
            raise ValueError("asked to fail")
        if text == "hang":
            await self.probe.release.wait()  # set at teardown: the gateway's ask gives up first
        return text.upper()

    @handler
    async def data(self, d: dict[str, Any]) -> dict[str, Any]:
        """Return the object as it came, with the session it came in.

        (A second paragraph, which tool descriptions leave out.)"""
        return {"echo": d, "session": self.envelope.context.session_id}


class GwStreamer(Actor):
    """Streams the words of a text in capitals; "forever" streams until cancelled."""

    type_name = "gw-streamer"
    skills = ("words",)

    def __init__(self, probe: Probe | None = None) -> None:
        self.probe = probe or Probe()

    @handler
    async def words(self, text: str) -> AsyncIterator[str]:
        if text == "forever":
            self.probe.started.set()
            try:
                i = 0
                while True:
                    yield f"tick {i}"
                    i += 1
                    await asyncio.sleep(0.02)  # a producer pacing itself
            except (asyncio.CancelledError, GeneratorExit):
                # Cancelled while it waits inside the generator, or closed at a
                # `yield` while the producer waits for credit: both are the cancel.
                self.probe.cancelled.set()
                raise
        for word in text.split():
            yield word.upper()


async def host_agents(system: ActorSystem, probe: Probe | None = None) -> None:
    probe = probe or Probe()
    await system.spawn(GwEcho, "1", probe=probe)
    await system.spawn(GwStreamer, "1", probe=probe)


async def wait_agents(gw: GatewayService, *names: str, timeout: float = 10.0) -> None:
    """Until the gateway's registry mirror lists every agent in ``names`` (event-driven)."""
    assert gw.system is not None
    store = await gw.system.directory.store()
    deadline = time.monotonic() + timeout
    while True:
        found = {
            listing.name for listing in await gw.system.discover() if listing.address is not None
        }
        if set(names) <= found:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"agents {names} never appeared; found {found}")
        await store.wait_for_change(store.services_index, left, "services")


def settings(db: Path, **overrides: Any) -> GatewaySettings:
    return GatewaySettings(http_host="127.0.0.1", http_port=0, db_path=db, **overrides)


@contextlib.asynccontextmanager
async def running_gateway(
    url: str, ns: str, db: Path, *agents: str, **overrides: Any
) -> AsyncIterator[GatewayService]:
    async with GatewayService(nats_url=url, namespace=ns, settings=settings(db, **overrides)) as gw:
        await wait_agents(gw, *agents)
        yield gw


def message(
    text: str | None = None,
    *,
    data: Any = None,
    version: str = "1.0",
    context_id: str | None = None,
    task_id: str | None = None,
) -> dict[str, Any]:
    """An A2A user message in ``version``'s JSON."""
    if version == "1.0":
        part: dict[str, Any] = {"text": text} if text is not None else {"data": data}
        out: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [part]}
    else:
        part = (
            {"kind": "text", "text": text} if text is not None else {"kind": "data", "data": data}
        )
        out = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": [part]}
    if context_id is not None:
        out["contextId"] = context_id
    if task_id is not None:
        out["taskId"] = task_id
    return out


def headers(version: str | None) -> dict[str, str]:
    return {"A2A-Version": version} if version is not None else {}


async def rpc(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: Any = None,
    *,
    version: str | None = "1.0",
    rid: Any = 1,
) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    async with http.post(url, json=body, headers=headers(version)) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "application/json"
        data: dict[str, Any] = await resp.json()
        return data


async def sse(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: Any,
    *,
    version: str | None = "1.0",
    on_event: Any = None,
) -> tuple[list[dict[str, Any]], bytes]:
    """The events of an SSE answer and its raw bytes; ``on_event(event)`` after each."""
    body = {"jsonrpc": "2.0", "id": "s1", "method": method, "params": params}
    events: list[dict[str, Any]] = []
    raw = b""
    async with http.post(url, json=body, headers=headers(version)) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "text/event-stream"
        buf = b""
        async for chunk in resp.content.iter_any():
            raw += chunk
            buf += chunk
            while b"\n\n" in buf:
                frame, buf = buf.split(b"\n\n", 1)
                assert frame.startswith(b"data: "), frame
                event = json.loads(frame[len(b"data: ") :])
                events.append(event)
                if on_event is not None:
                    await on_event(event)
        assert buf == b"", f"a frame did not end with a blank line: {buf!r}"
    return events, raw


@dataclass(frozen=True)
class GatewayUnderTest:
    """What the shared ``gw`` fixture (tests/gateway/conftest.py) puts behind the
    gateway for a test module: its module-level ``GATEWAY``."""

    agents: tuple[str, ...] = ("gw-echo", "gw-streamer")
    edges: tuple[str, ...] | None = None  # None: every edge
    ask_timeout: float | None = 0.5  # None: the gateway's default
    host: Callable[[ActorSystem, Probe], Awaitable[None]] = host_agents
    settings: tuple[tuple[str, Any], ...] = ()  # more GatewaySettings fields, by name
