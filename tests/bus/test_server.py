"""The embedded nats-server: start, config, JetStream, stop, no orphans."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import nats
import pytest

from actorbus.bus.server import EmbeddedServer, ServerConfig, ServerStartError


def pid_gone(pid: int) -> bool:
    """True when the process no longer exists (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_pid_gone(pid: int, timeout: float = 5.0) -> bool:
    """Bounded poll for a process to disappear (there is no event to wait on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid_gone(pid):
            return True
        time.sleep(0.02)
    return pid_gone(pid)


def varz(server: EmbeddedServer) -> dict:
    with urllib.request.urlopen(f"{server.monitor_url}/varz", timeout=2) as resp:
        return json.load(resp)


def test_session_server_is_running(nats_server: EmbeddedServer) -> None:
    assert nats_server.running
    assert nats_server.url.startswith("nats://127.0.0.1:")
    assert nats_server.monitor_url.startswith("http://127.0.0.1:")


def test_config_always_has_sync_interval_always(tmp_path: Path) -> None:
    for config in (ServerConfig(), ServerConfig(store_dir=tmp_path), ServerConfig(extra="# x")):
        text = config.render(tmp_path / "ports", tmp_path / "store")
        assert 'sync_interval: "always"' in text
        assert 'listen: "127.0.0.1:-1"' in text


def test_running_server_syncs_always(nats_server: EmbeddedServer) -> None:
    js = varz(nats_server)["jetstream"]["config"]
    assert js.get("sync_always") is True


async def test_jetstream_enabled(nats_server: EmbeddedServer) -> None:
    nc = await nats.connect(nats_server.url, allow_reconnect=False)
    try:
        info = await nc.jetstream().account_info()
        assert info.limits is not None
    finally:
        await nc.close()


def test_start_and_stop_leave_nothing_behind() -> None:
    server = EmbeddedServer()
    server.start_sync()
    try:
        pid = server.pid
        store = server.store_dir
        assert pid is not None
        assert store.is_dir()
        assert server.running
        host, port = server.url.removeprefix("nats://").rsplit(":", 1)
        assert host == "127.0.0.1"
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            assert sock.recv(4).startswith(b"INFO")
    finally:
        server.stop_sync()
    assert not server.running
    assert server.pid is None
    assert pid_gone(pid)
    assert not store.exists()


def test_stop_is_idempotent() -> None:
    server = EmbeddedServer()
    server.start_sync()
    server.stop_sync()
    server.stop_sync()
    assert not server.running


def test_given_store_dir_is_kept(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with EmbeddedServer(ServerConfig(store_dir=store)) as server:
        assert server.store_dir == store
    assert store.is_dir()


async def test_async_context_manager() -> None:
    async with EmbeddedServer() as server:
        nc = await nats.connect(server.url, allow_reconnect=False)
        await nc.close()
        pid = server.pid
    assert pid is not None
    assert pid_gone(pid)


def test_kill_then_restart_keeps_port_and_store() -> None:
    server = EmbeddedServer()
    server.start_sync()
    try:
        url, store, pid = server.url, server.store_dir, server.pid
        server.kill()
        assert pid is not None
        assert pid_gone(pid)
        assert store.is_dir()
        server.start_sync()
        assert server.url == url
        assert server.pid != pid
    finally:
        server.stop_sync()


def test_a_server_killed_from_outside_says_how_it_ended() -> None:
    """What `actorbus up` reports when its server dies under it."""
    server = EmbeddedServer()
    server.start_sync()
    try:
        assert server.ended() is None
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while server.ended() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # bounded: the kernel reaps it within milliseconds
        assert server.ended() == "killed by SIGKILL"
    finally:
        server.stop_sync()


def test_bad_config_raises_server_start_error_with_log() -> None:
    server = EmbeddedServer(ServerConfig(extra="this is { not valid"))
    try:
        with pytest.raises(ServerStartError, match="exited"):
            server.start_sync(timeout=10)
    finally:
        server.stop_sync()
    assert not server.running


def test_port_in_use_raises_server_start_error(nats_server: EmbeddedServer) -> None:
    port = int(nats_server.url.rsplit(":", 1)[1])
    server = EmbeddedServer(ServerConfig(port=port))
    try:
        with pytest.raises(ServerStartError):
            server.start_sync(timeout=10)
    finally:
        server.stop_sync()


def test_missing_binary_raises_server_start_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORBUS_NATS_SERVER", "/nonexistent/nats-server")
    server = EmbeddedServer()
    try:
        with pytest.raises(ServerStartError):
            server.start_sync(timeout=5)
    finally:
        server.stop_sync()


def test_sigkilled_parent_leaves_no_orphan_server() -> None:
    script = textwrap.dedent(
        """
        import sys
        from actorbus.bus.server import EmbeddedServer

        server = EmbeddedServer()
        server.start_sync()
        print(server.pid, flush=True)
        sys.stdin.read()  # serve until killed
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    server_pid: int | None = None
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # bounded by the test timeout; the child prints fast
        server_pid = int(line)
        assert not pid_gone(server_pid)
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        assert wait_pid_gone(server_pid, 5.0), f"nats-server {server_pid} outlived its parent"
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(3)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if server_pid is not None and not pid_gone(server_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(server_pid, signal.SIGKILL)


def test_server_outlives_the_thread_that_started_it() -> None:
    """PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the
    process. A server started from a short-lived thread (``asyncio.to_thread`` in a
    loop that is then closed, a worker thread) must keep running."""
    server = EmbeddedServer()
    try:
        worker = threading.Thread(target=server.start_sync)
        worker.start()
        worker.join(20)
        assert server.url
        pid = server.pid
        assert pid is not None
        # the thread is gone; give a pending death signal the chance to land
        assert not wait_pid_gone(pid, 0.5), "nats-server died with the thread that started it"
        assert server.running
    finally:
        server.stop_sync()


def test_async_start_survives_its_event_loop() -> None:
    """``await server.start()`` in one loop, then the server used after that loop closed."""
    server = EmbeddedServer()
    try:
        asyncio.run(server.start())
        pid = server.pid
        assert pid is not None
        assert not wait_pid_gone(pid, 0.5), "nats-server died when the starting loop closed"

        async def use() -> None:
            nc = await nats.connect(server.url, allow_reconnect=False)
            await nc.close()

        asyncio.run(use())
    finally:
        server.stop_sync()


def test_start_failure_reports_the_server_log_and_cleans_up() -> None:
    """A server that cannot start: the error carries its own words, and nothing is
    left behind (no process, no work directory)."""
    server = EmbeddedServer(ServerConfig(extra="no_such_option_xyz: true"))
    with pytest.raises(ServerStartError, match="no_such_option_xyz") as info:
        server.start_sync(timeout=10)
    assert "exited with code" in str(info.value)
    assert not server.running
    assert server._workdir is None
