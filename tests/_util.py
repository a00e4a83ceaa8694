"""Helpers shared by the tests (importable as ``_util``: tests/ is on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats

from actorbus.security.guard import Guard

TESTS_DIR = Path(__file__).resolve().parent
HOST_SCRIPT = TESTS_DIR / "_host.py"

# How long a test waits for something that should happen "now".
WAIT = 5.0


def subject_of(ns: str, address: str) -> str:
    """The direct subject of an address, written out (``{ns}.a.{type}.{key}``)."""
    type_, key = address.split("/", 1)
    return f"{ns}.a.{type_}.{key}"


# -- processes -------------------------------------------------------------


def child_env() -> dict[str, str]:
    """Environment for child Python processes: tests/ importable, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def terminate(proc: asyncio.subprocess.Process, timeout: float = 5.0) -> None:
    """SIGTERM, wait (bounded), then SIGKILL."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def run_to_end(
    *argv: str,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    merge: bool = False,
) -> tuple[int, str, str]:
    """Run a command to its end, bounded (killed at ``timeout``): its exit code,
    stdout and stderr (with ``merge``, stderr goes into stdout)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge else asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), (err or b"").decode()


class HostProcess:
    """An actor host running ``tests/_host.py`` in its own OS process."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr: Any) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.stderr = stderr  # a temp file: a pipe nobody reads could block the child

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return str(self.stderr.read().decode(errors="replace"))

    async def wait_ready(self, timeout: float = 15.0) -> None:
        assert self.proc.stdout is not None
        lines: list[str] = []
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            if not line:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), 2.0)
                raise RuntimeError(
                    f"host process exited before 'ready': {lines} {self.stderr_text()}"
                )
            text = line.decode().strip()
            lines.append(text)
            if text == "ready":
                return


@contextlib.asynccontextmanager
async def run_host(
    target: str,
    url: str,
    namespace: str,
    key: str,
    replicas: int = 1,
    ack_wait: float | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[HostProcess]:
    """Start a host process serving ``target`` (``module:Class``) at ``type/key``
    (``env`` added to its environment); yield once it printed "ready"; SIGTERM
    (then SIGKILL) it on the way out."""
    with tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HOST_SCRIPT),
            target,
            url,
            namespace,
            key,
            str(replicas),
            *([str(ack_wait)] if ack_wait is not None else []),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**child_env(), **(env or {})},
        )
        host = HostProcess(proc, stderr)
        try:
            await host.wait_ready()
            yield host
        finally:
            await terminate(proc)


async def barrier(target: Any, timeout: float = 5.0) -> None:
    """Return once the server has processed everything sent so far on a connection.

    For plain nats-py clients ``nc.flush()`` is not enough (2.16 writes its PING
    ahead of commands still in the pending buffer; actorbus's own client fixes
    that, so spawn()/register() need no barrier). A message published to
    ourselves travels behind those commands instead.
    ``target`` is an ActorSystem or a nats-py client.
    """
    nc = getattr(target, "nc", target)
    subject = f"_BARRIER.{uuid.uuid4().hex}"
    arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_msg(_: Any) -> None:
        if not arrived.done():
            arrived.set_result(None)

    sub = await nc.subscribe(subject, cb=on_msg)
    try:
        await nc.publish(subject, b"")
        await asyncio.wait_for(arrived, timeout)
    finally:
        await sub.unsubscribe()


# -- raw NATS protocol -------------------------------------------------------


class RawNats:
    """A hand-written NATS client that sends bytes no real client would: any header
    block (HPUB), any payload, any reply subject."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, url: str) -> RawNats:
        import json

        host, port = url.removeprefix("nats://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        assert (await reader.readline()).startswith(b"INFO")
        connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1}
        writer.write(f"CONNECT {json.dumps(connect)}\r\n".encode())
        raw = cls(reader, writer)
        await raw.ping()
        return raw

    async def hpub(
        self, subject: str, header_block: bytes, payload: bytes, reply: str = ""
    ) -> None:
        """Publish with ``header_block`` exactly as given, then wait for the server's PONG
        (so it has routed the message before this returns)."""
        hdr, total = len(header_block), len(header_block) + len(payload)
        head = f"HPUB {subject} {reply + ' ' if reply else ''}{hdr} {total}\r\n".encode()
        self.writer.write(head + header_block + payload + b"\r\n")
        await self.ping()

    async def ping(self) -> None:
        self.writer.write(b"PING\r\n")
        await self.writer.drain()
        while (line := await asyncio.wait_for(self.reader.readline(), WAIT)) != b"PONG\r\n":
            assert not line.startswith(b"-ERR"), line

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def until_it_works(call: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    """Call ``call()`` until it returns without an ActorBusError (a service coming
    back: a broker restarted, a store made again), for at most ``timeout``."""
    from actorbus import ActorBusError
    from actorbus.testing import eventually

    async def works() -> bool:
        try:
            await call()
        except ActorBusError:
            return False
        return True

    await eventually(works, what=what, timeout=timeout)


@contextlib.contextmanager
def exclusive(what: str, *, machine: bool = False) -> Iterator[None]:
    """Hold a lock named ``what`` across the test processes of this checkout (make
    test runs two workers): builds that write into the source tree
    (``actorbus.egg-info``). ``machine``: across every checkout's tests on this
    machine, for what the machine has one of (the Docker engine, which a run
    starts and stops; the default port): two checkouts tested at once would
    otherwise stop the engine under each other."""
    import fcntl
    import hashlib

    tag = "machine" if machine else hashlib.sha256(str(TESTS_DIR).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"actorbus-tests-{tag}-{what}.lock"
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for the other worker's turn
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class OwnBroker:
    """A nats-server of one test's own, on a store under ``tmp_path``, which the
    test may kill, restart or bring back on a fresh store (same port), and the
    systems connected to it, which ride such a restart out."""

    def __init__(self, tmp_path: Path) -> None:
        from actorbus.bus.server import EmbeddedServer, ServerConfig

        self.tmp_path = tmp_path
        self.stores = 1
        self.server = EmbeddedServer(ServerConfig(store_dir=tmp_path / "store1"))
        self.server.start_sync()
        self.systems: list[Any] = []

    @property
    def url(self) -> str:
        return str(self.server.url)

    async def system(self, ns: str, **options: Any) -> Any:
        """A system on this broker that keeps reconnecting for 30 s (closed at the end)."""
        from actorbus import ActorSystem
        from actorbus.bus.connection import ConnectOptions

        options.setdefault("connect_options", ConnectOptions(reconnect_deadline=30.0))
        system = await ActorSystem.connect(self.url, namespace=ns, **options)
        self.systems.append(system)
        return system

    def kill_and_restart(self) -> None:
        """SIGKILL (no shutdown, nothing flushed beyond what was synced), then the
        same server again: same port, same store."""
        self.server.kill()
        self.server.start_sync()

    def on_a_fresh_store(self) -> None:
        """The broker comes back with its JetStream data gone (same port)."""
        from actorbus.bus.server import EmbeddedServer, ServerConfig

        port = self.server.config.port
        self.server.stop_sync()
        self.stores += 1
        store = self.tmp_path / f"store{self.stores}"
        self.server = EmbeddedServer(ServerConfig(port=port, store_dir=store))
        self.server.start_sync()


@contextlib.asynccontextmanager
async def own_broker(tmp_path: Path) -> AsyncIterator[OwnBroker]:
    """An :class:`OwnBroker`; its systems are closed and its server stopped at the end."""
    broker = OwnBroker(tmp_path)
    try:
        yield broker
    finally:
        for system in reversed(broker.systems):
            await system.close(timeout=2)
        broker.server.stop_sync()


async def raw_member(
    url: str,
    broker: Any,
    ns: str,
    name: str,
    types: list[str],
    error_cb: Any = None,
) -> nats.NATS:
    """A plain nats-py connection with the NATS user a member hosting ``types`` gets
    (a ``SecureBroker``'s): what an insider holds, used for what it should not do."""
    options = broker.connect_options(ns, name, hosts=types)
    return await nats.connect(
        url,
        user_credentials=options.nats_credentials(),
        tls=options.tls,
        inbox_prefix=options.inbox_prefix,
        allow_reconnect=False,
        **({"error_cb": error_cb} if error_cb is not None else {}),
    )


def guard_of(system: Any) -> Guard:
    """The guard of a secured system (its security stage)."""
    security = system.runtime.security
    assert isinstance(security, Guard), f"the system is not secured: {security!r}"
    return security


async def kv_keys(kv: Any) -> list[str]:
    """The live keys of a JetStream key-value bucket (nats-py's ``keys()`` can
    miss them all: see ``actorbus.bus.kv_watch``)."""
    from actorbus.bus.kv_watch import current_entries

    return [entry.key for entry in await current_entries(kv)]
