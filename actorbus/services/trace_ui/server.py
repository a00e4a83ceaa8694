"""Running Phoenix as a child process on loopback, and the OTEL variables that
send spans to it."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from actorbus.services.trace_ui.client import PhoenixClient, normalize_trace_id
from actorbus.services.trace_ui.install import (
    BOOTSTRAP,
    DEFAULT_PROJECT,
    DEFAULT_TRACE_VENV,
    ENV_PHOENIX_PYTHON,
    LOOPBACK,
    PROJECT_ATTRIBUTE,
    STOP_TIMEOUT,
    TraceUIError,
    absolute_of,
    find_phoenix,
    phoenix_version,
)

# -- running Phoenix --------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def trace_url(base_url: str, trace_id: str | int) -> str:
    """The Phoenix UI page of one trace (Phoenix redirects it to the trace's project)."""
    return f"{base_url.rstrip('/')}/redirects/traces/{normalize_trace_id(trace_id)}"


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _http_ok(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 200 <= int(response.status) < 300
    except (OSError, ValueError):
        return False


def otel_env(
    base_url: str,
    *,
    project: str = DEFAULT_PROJECT,
    service_name: str | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``base`` (default ``os.environ``) plus the OTEL_* settings that send spans to
    the Phoenix at ``base_url``.

    OTLP/HTTP protobuf to ``{base_url}/v1/traces``; Phoenix project ``project``
    through ``OTEL_RESOURCE_ATTRIBUTES`` (merged with any already there); batches
    flushed every 200 ms (``OTEL_BSP_SCHEDULE_DELAY``); ``OTEL_SERVICE_NAME`` if
    ``service_name`` is given. Metrics and logs exporters are switched off:
    Phoenix takes traces only.
    """
    env = dict(os.environ if base is None else base)
    base_url = base_url.rstrip("/")
    resource = f"{PROJECT_ATTRIBUTE}={urllib.parse.quote(project)}"
    if existing := env.get("OTEL_RESOURCE_ATTRIBUTES", "").strip():
        kept = [
            item.strip()
            for item in existing.split(",")
            if item.strip() and not item.strip().startswith(f"{PROJECT_ATTRIBUTE}=")
        ]
        resource = ",".join([*kept, resource])
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": base_url,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{base_url}/v1/traces",
            "OTEL_RESOURCE_ATTRIBUTES": resource,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "ACTORBUS_SPAN_SERVICE_NAME": "1",  # Phoenix keeps no resource attributes
        }
    )
    env.pop("OTEL_SDK_DISABLED", None)
    if service_name is not None:
        env["OTEL_SERVICE_NAME"] = service_name
    return env


@dataclass
class PhoenixServer:
    """A running Phoenix; made by :func:`start_phoenix`. A context manager."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    working_dir: Path
    log_path: Path
    project: str = DEFAULT_PROJECT
    startup_seconds: float = 0.0
    version: str | None = None
    _owns_working_dir: bool = False
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """Base URL: the UI's home page, and the REST API under ``/v1``."""
        return f"http://{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"{self.url}/"

    @property
    def otlp_endpoint(self) -> str:
        """For ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter appends ``/v1/traces``)."""
        return self.url

    @property
    def otlp_traces_endpoint(self) -> str:
        """For ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and ``OTLPSpanExporter(endpoint=)``."""
        return f"{self.url}/v1/traces"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def trace_url(self, trace_id: str | int) -> str:
        """The UI page of one trace (by its OpenTelemetry trace id)."""
        return trace_url(self.url, trace_id)

    def client(self, timeout: float = 5.0) -> PhoenixClient:
        return PhoenixClient(self.url, timeout=timeout)

    def otel_env(
        self,
        service_name: str | None = None,
        *,
        base: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The environment that sends a process's spans here: see :func:`otel_env`."""
        return otel_env(self.url, project=self.project, service_name=service_name, base=base)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to end (``None`` if it is still running after ``timeout``)."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM to Phoenix's process group, SIGKILL after ``timeout`` (default
        :data:`STOP_TIMEOUT`) seconds; idempotent."""
        atexit.unregister(self.stop)
        timeout = STOP_TIMEOUT if timeout is None else timeout
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._owns_working_dir:
            shutil.rmtree(self.working_dir, ignore_errors=True)

    def __enter__(self) -> PhoenixServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_phoenix(
    *,
    python: str | os.PathLike[str] | None = None,
    port: int | None = None,
    working_dir: str | os.PathLike[str] | None = None,
    project: str = DEFAULT_PROJECT,
    startup_timeout: float = 120.0,
    extra_env: Mapping[str, str] | None = None,
) -> PhoenixServer:
    """Start Phoenix on ``127.0.0.1`` and return once it answers its health check.

    ``python``: an interpreter with arize-phoenix (default :func:`find_phoenix`).
    ``port``: default a free one. ``working_dir``: where Phoenix keeps its SQLite
    store and this module its ``phoenix.log``; default a temp dir removed by
    :meth:`~PhoenixServer.stop` (pass one to keep traces across runs).
    Raises :class:`TraceUIError` if Phoenix is missing, exits, or is not up within
    ``startup_timeout`` seconds (it takes 10-15 s on a 2-core machine, most of
    it importing Phoenix); nothing is left running then.
    """
    interpreter = absolute_of(python) if python is not None else find_phoenix()
    if interpreter is None:
        raise TraceUIError(
            "Arize Phoenix is not installed: `pip install arize-phoenix` (into this "
            f"environment or any other, then set {ENV_PHOENIX_PYTHON}=that/bin/python), "
            f"or create {DEFAULT_TRACE_VENV} with actorbus.services.trace_ui.ensure_phoenix_venv()"
        )
    port = port or free_port()
    owns_dir = working_dir is None
    if working_dir is None:
        workdir = Path(tempfile.mkdtemp(prefix="actorbus-phoenix-"))
    else:
        workdir = Path(working_dir)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "phoenix.log"

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PHOENIX_", "OTEL_"))  # Phoenix must not trace itself to itself
    }
    env.update(
        {
            "PHOENIX_HOST": LOOPBACK,
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(free_port()),  # used only if the bootstrap cannot disable it
            "PHOENIX_WORKING_DIR": os.fspath(workdir),
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # offline: no fonts, telemetry, downloads
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_AGENTS_DISABLE_BASH": "true",
            "PHOENIX_LOG_MIGRATIONS": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra_env or {})

    log = log_path.open("wb")
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            [os.fspath(interpreter), "-c", BOOTSTRAP, "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            start_new_session=True,  # its own process group: stop() ends all of it, Ctrl-C none
        )
    except OSError as exc:
        log.close()
        if owns_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        raise TraceUIError(f"cannot run {interpreter}: {exc}") from exc

    server = PhoenixServer(
        process=process,
        host=LOOPBACK,
        port=port,
        working_dir=workdir,
        log_path=log_path,
        project=project,
        _owns_working_dir=owns_dir,
        _log=log,
    )
    atexit.register(server.stop)
    health = f"{server.url}/healthz"
    deadline = started + startup_timeout
    try:
        while True:
            if process.poll() is not None:
                raise TraceUIError(
                    f"Phoenix exited with {process.returncode} while starting; "
                    f"its log ends:\n{_tail(log_path)}"
                )
            if _http_ok(health, timeout=1.0):
                break
            if time.monotonic() >= deadline:
                raise TraceUIError(
                    f"Phoenix did not answer {health} within {startup_timeout:.0f} s; "
                    f"its log ends:\n{_tail(log_path)}"
                )
            time.sleep(0.1)
    except BaseException:
        server.stop()
        raise
    server.startup_seconds = time.monotonic() - started
    server.version = phoenix_version(interpreter)
    return server
