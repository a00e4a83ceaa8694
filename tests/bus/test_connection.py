"""The connection under failure: reconnect after a server restart, buffered publishes,
a reconnect deadline after which calls fail with ConnectionLostError."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from _util import WAIT, barrier
from pydantic import BaseModel

from actorbus import (
    Actor,
    ActorSystem,
    AskTimeoutError,
    ConnectionLostError,
    NoRespondersError,
    handler,
)
from actorbus.bus.connection import BusConnection, ConnectOptions
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.bus.tasks import backoff_delay


class CnPing(BaseModel):
    n: int


class CnNote(BaseModel):
    n: int


class Pinger(Actor):
    type_name = "cn-pinger"

    def __init__(self, notes: asyncio.Queue[int] | None = None) -> None:
        self.notes = notes

    @handler
    async def ping(self, p: CnPing) -> int:
        return p.n

    @handler
    async def note(self, n: CnNote) -> None:
        if self.notes is not None:
            self.notes.put_nowait(n.n)


@pytest.fixture
def own_server() -> Any:
    """A server of this test's own, free to be killed and restarted."""
    with EmbeddedServer() as server:
        yield server


def fast_options(**overrides: Any) -> ConnectOptions:
    options = ConnectOptions(backoff_initial=0.02, backoff_max=0.2, connect_timeout=1.0)
    for name, value in overrides.items():
        setattr(options, name, value)
    return options


def link_events(system: ActorSystem) -> tuple[asyncio.Event, asyncio.Event]:
    lost, back = asyncio.Event(), asyncio.Event()

    async def on_lost() -> None:
        back.clear()
        lost.set()

    async def on_back() -> None:
        back.set()

    system.runtime.conn.on_disconnect.append(on_lost)
    system.runtime.conn.on_reconnect.append(on_back)
    return lost, back


async def ask_until_it_works(system: ActorSystem, deadline: float = 10.0) -> int:
    """Bounded retry loop of asks while the link comes back."""
    end = time.monotonic() + deadline
    while True:
        try:
            result: int = await system.ask("cn-pinger/p", CnPing(n=1), timeout=0.5)
            return result
        except (AskTimeoutError, NoRespondersError, ConnectionLostError):
            if time.monotonic() > end:
                raise


async def test_reconnects_after_server_restart(own_server: EmbeddedServer, ns: str) -> None:
    async with (
        ActorSystem.connect(own_server.url, namespace=ns, connect_options=fast_options()) as host,
        ActorSystem.connect(own_server.url, namespace=ns, connect_options=fast_options()) as client,
    ):
        await host.spawn(Pinger, "p")
        await barrier(host)
        assert await client.ask("cn-pinger/p", CnPing(n=5), timeout=2) == 5
        host_lost, host_back = link_events(host)
        client_lost, client_back = link_events(client)
        url = own_server.url
        own_server.kill()
        await asyncio.wait_for(asyncio.gather(host_lost.wait(), client_lost.wait()), WAIT)
        assert not client.runtime.conn.connected
        own_server.start_sync()
        assert own_server.url == url
        await asyncio.wait_for(asyncio.gather(host_back.wait(), client_back.wait()), WAIT)
        assert await ask_until_it_works(client) == 1
        for i in range(20):
            assert await client.ask("cn-pinger/p", CnPing(n=i), timeout=2) == i


async def test_reconnect_with_retry_loop_only(own_server: EmbeddedServer, ns: str) -> None:
    """Without watching callbacks: kill, restart, and asks work again within a bound."""
    async with ActorSystem.connect(
        own_server.url, namespace=ns, connect_options=fast_options()
    ) as system:
        await system.spawn(Pinger, "p")
        assert await system.ask("cn-pinger/p", CnPing(n=2), timeout=2) == 2
        own_server.kill()
        own_server.start_sync()
        assert await ask_until_it_works(system) == 1


async def test_tells_while_disconnected_are_delivered_after_reconnect(
    own_server: EmbeddedServer, ns: str
) -> None:
    notes: asyncio.Queue[int] = asyncio.Queue()
    async with ActorSystem.connect(
        own_server.url, namespace=ns, connect_options=fast_options()
    ) as system:
        await system.spawn(Pinger, "p", notes=notes)
        lost, back = link_events(system)
        own_server.kill()
        await asyncio.wait_for(lost.wait(), WAIT)
        for i in range(10):
            await system.tell("cn-pinger/p", CnNote(n=i))  # buffered, not refused
        own_server.start_sync()
        await asyncio.wait_for(back.wait(), WAIT)
        got = [await asyncio.wait_for(notes.get(), WAIT) for _ in range(10)]
        assert got == list(range(10))


async def test_calls_fail_with_connection_lost_after_deadline(
    own_server: EmbeddedServer, ns: str
) -> None:
    system = await ActorSystem.connect(
        own_server.url, namespace=ns, connect_options=fast_options(reconnect_deadline=1.0)
    )
    try:
        await system.spawn(Pinger, "p")
        assert await system.ask("cn-pinger/p", CnPing(n=1), timeout=2) == 1
        own_server.kill()
        end = time.monotonic() + 6.0
        lost: ConnectionLostError | None = None
        while lost is None:
            try:
                await system.ask("cn-pinger/p", CnPing(n=1), timeout=0.3)
            except AskTimeoutError:
                assert time.monotonic() < end, "no ConnectionLostError after the deadline"
            except ConnectionLostError as exc:
                lost = exc
        assert "within 1s" in str(lost)
        assert own_server.url.removeprefix("nats://") in str(lost)
        assert isinstance(lost, ConnectionError)
        assert lost.code == "E_CONN"
        assert not system.runtime.conn.connected
    finally:
        await asyncio.wait_for(system.close(timeout=1.0), WAIT)


async def _drain_stream(system: ActorSystem) -> None:
    async for _ in system.stream("cn-pinger/p", CnPing(n=1), timeout=0.5):
        pass


async def _noop_cb(_: Any) -> None:
    return None


CALLS = {
    "tell": lambda s: s.tell("cn-pinger/p", CnPing(n=1)),
    "publish": lambda s: s.publish("cn.topic", {"x": 1}),
    "stream": _drain_stream,
    "subscribe": lambda s: s.subscribe("cn.topic", _noop_cb),
    "spawn": lambda s: s.spawn(Pinger, "other"),
    "register": lambda s: s.register(Pinger),
}


@pytest.mark.parametrize("call", list(CALLS))
async def test_every_call_fails_with_connection_lost_after_deadline(
    own_server: EmbeddedServer, ns: str, call: str
) -> None:
    system = await ActorSystem.connect(
        own_server.url, namespace=ns, connect_options=fast_options(reconnect_deadline=0.5)
    )
    try:
        lost, _ = link_events(system)
        own_server.kill()
        await asyncio.wait_for(lost.wait(), WAIT)
        end = time.monotonic() + 5.0
        while True:  # bounded: until the deadline passed and the link was given up
            try:
                await system.ask("cn-pinger/p", CnPing(n=1), timeout=0.2)
            except ConnectionLostError:
                break
            except (AskTimeoutError, NoRespondersError):
                assert time.monotonic() < end
        with pytest.raises(ConnectionLostError, match=r"within 0\.5s"):
            await CALLS[call](system)
    finally:
        await asyncio.wait_for(system.close(timeout=1.0), WAIT)


async def test_connect_to_nothing_fails_fast() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # nobody listens on the port now
    started = time.monotonic()
    with pytest.raises(ConnectionLostError, match="cannot connect"):
        await asyncio.wait_for(
            ActorSystem.connect(f"nats://127.0.0.1:{port}", connect_options=fast_options()),
            4.0,
        )
    assert time.monotonic() - started < 4.0


async def test_bus_connection_close_is_idempotent(own_server: EmbeddedServer) -> None:
    conn = await BusConnection.connect(fast_options(servers=[own_server.url]))
    assert conn.connected
    await conn.close()
    await conn.close()
    assert not conn.connected


def test_backoff_grows_and_is_capped() -> None:
    for attempt in range(30):
        delay = backoff_delay(attempt, 0.05, 2.0)
        ceiling = min(2.0, 0.05 * 2**attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert backoff_delay(100, 0.05, 2.0) <= 2.0


async def test_connect_options_are_not_shared_between_systems(
    own_server: EmbeddedServer, nats_server: EmbeddedServer, ns: str
) -> None:
    options = fast_options()
    first = await ActorSystem.connect(own_server.url, namespace=ns, connect_options=options)
    try:
        second = await ActorSystem.connect(nats_server.url, namespace=ns, connect_options=options)
        try:
            assert first.url == own_server.url, "connecting a second system rewrote the first's URL"
            assert second.url == nats_server.url
        finally:
            await second.close()
    finally:
        await first.close()


async def test_close_keeps_its_timeout_when_the_server_just_died() -> None:
    """The server is gone but the client has not noticed yet: close(timeout) must not
    wait for nats-py's own drain timeout."""
    import signal

    from actorbus.bus.server import ServerConfig

    server = EmbeddedServer(ServerConfig(jetstream=False))
    await server.start()
    try:
        system = await ActorSystem.connect(server.url)
        assert server._proc is not None
        server._proc.send_signal(signal.SIGINT)
        await asyncio.to_thread(server._proc.wait)
        started = time.monotonic()
        await system.close(timeout=1.0)
        assert time.monotonic() - started < 4.0
    finally:
        await server.stop()


def test_importing_actorbus_leaves_out_the_websocket_client() -> None:
    """nats-py's WebSocket transport needs aiohttp, which costs every process a
    sixth of a second to import: actorbus imports nats-py without it."""
    import subprocess
    import sys

    probe = "import sys, actorbus; print('aiohttp' in sys.modules, 'nats' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


async def test_a_system_connects_over_websocket(ns: str) -> None:
    """A ``ws://`` URL works all the same: aiohttp is handed to nats-py when one is used."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = f"websocket {{\n  host: 127.0.0.1\n  port: {port}\n  no_tls: true\n}}\n"
    with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)):
        async with ActorSystem.connect(f"ws://127.0.0.1:{port}", namespace=ns) as system:
            await system.spawn(Pinger, "p")
            assert await system.ask("cn-pinger/p", CnPing(n=7), timeout=WAIT) == 7
