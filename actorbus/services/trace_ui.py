"""A local tracing UI: Arize Phoenix in a subprocess on loopback, no docker.

Phoenix (``pip install arize-phoenix``) is a tracing backend with a web UI that
accepts OTLP over HTTP at ``/v1/traces``. It is big (about 800 MB of packages),
so actorbus never imports it: this module starts it as a subprocess of whichever
Python interpreter has it installed, and talks to it over HTTP only.

- :func:`find_phoenix` finds that interpreter (``$ACTORBUS_PHOENIX_PYTHON``, the
  running one, or ``$ACTORBUS_TRACE_VENV`` / ``./.venv-trace``);
  :func:`ensure_phoenix_venv` creates ``.venv-trace`` with Phoenix in it on demand.
- :func:`start_phoenix` starts it on ``127.0.0.1`` on a free port with a temp
  working dir (its SQLite store), offline (no telemetry, no web fonts), its gRPC
  receiver switched off, and waits (bounded) until its health check answers.
  :meth:`PhoenixServer.otel_env` is the environment that sends a process's spans
  there; :meth:`PhoenixServer.trace_url` is the UI page of one trace;
  :meth:`PhoenixServer.stop` ends it (SIGTERM to its process group, then SIGKILL).
- :class:`PhoenixClient` reads spans back through Phoenix's REST API
  (``GET /v1/projects``, ``GET /v1/projects/{project}/spans?trace_id=...``).
- :func:`screenshot` / :func:`capture_page` save a PNG of a page (and read its
  DOM) with headless Chromium.

Phoenix files spans under a *project*: the ``openinference.project.name``
resource attribute (which :meth:`~PhoenixServer.otel_env` sets through
``OTEL_RESOURCE_ATTRIBUTES``), else ``default``. It keeps no other resource
attribute, so ``service.name`` is visible in Phoenix only when a span carries it
as a span attribute: add :class:`ServiceNameSpanProcessor` to the tracer provider.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from actorbus.telemetry.config import ServiceNameSpanProcessor

__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_TRACE_VENV",
    "PHOENIX_REQUIREMENT",
    "STOP_TIMEOUT",
    "PhoenixClient",
    "PhoenixServer",
    "ServiceNameSpanProcessor",
    "TraceSpan",
    "TraceUIError",
    "capture_page",
    "ensure_phoenix_venv",
    "find_chromium",
    "find_phoenix",
    "format_tree",
    "free_port",
    "otel_env",
    "phoenix_version",
    "render_dom",
    "screenshot",
    "start_phoenix",
    "trace_url",
]

PHOENIX_REQUIREMENT = "arize-phoenix>=20.26,<21"
"""What :func:`ensure_phoenix_venv` installs (tested with 20.26.1)."""

DEFAULT_PROJECT = "actorbus"
"""The Phoenix project actorbus's spans are filed under."""

DEFAULT_TRACE_VENV = ".venv-trace"
"""Where :func:`ensure_phoenix_venv` puts Phoenix, relative to the working directory."""

ENV_PHOENIX_PYTHON = "ACTORBUS_PHOENIX_PYTHON"
ENV_TRACE_VENV = "ACTORBUS_TRACE_VENV"
ENV_CHROMIUM = "ACTORBUS_CHROMIUM"

LOOPBACK = "127.0.0.1"

# Runs inside Phoenix's interpreter: switch its OTLP gRPC receiver off (it would
# listen on every interface, [::]:port, whatever PHOENIX_HOST says), then run the
# `phoenix` command. If a later Phoenix renames the class the receiver stays on,
# on the free port start_phoenix chose for it, and the log says so.
_BOOTSTRAP = """\
import inspect
import sys
try:
    from phoenix.server import grpc_server as _grpc

    _init = _grpc.GrpcServer.__init__
    if "disabled" not in inspect.signature(_init).parameters:
        raise TypeError("GrpcServer takes no `disabled` argument")

    def _no_grpc(self, *args, **kwargs):
        kwargs["disabled"] = True
        _init(self, *args, **kwargs)

    _grpc.GrpcServer.__init__ = _no_grpc
    print("actorbus: Phoenix OTLP/gRPC receiver disabled", file=sys.stderr, flush=True)
except Exception as exc:
    print(f"actorbus: could not disable Phoenix OTLP/gRPC: {exc!r}", file=sys.stderr, flush=True)
sys.argv = ["phoenix", *sys.argv[1:]]
from phoenix.server.main import main

main()
"""

_VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n    print(m.version('arize-phoenix'))\n"
    "except m.PackageNotFoundError:\n    pass\n"
)

_PROJECT_ATTRIBUTE = "openinference.project.name"

STOP_TIMEOUT = 10.0
"""Seconds :meth:`PhoenixServer.stop` waits after SIGTERM before SIGKILL."""

_HEX_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


class TraceUIError(RuntimeError):
    """Phoenix or Chromium is missing, did not start, or did not answer."""


# -- finding and installing Phoenix ---------------------------------------------


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def phoenix_version(python: str | os.PathLike[str] | None = None) -> str | None:
    """The arize-phoenix version installed for ``python`` (default: this one), or None."""
    if python is None or Path(python) == Path(sys.executable):
        try:
            return importlib.metadata.version("arize-phoenix")
        except importlib.metadata.PackageNotFoundError:
            return None
    if not Path(python).exists():
        return None
    try:
        out = subprocess.run(
            [os.fspath(python), "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = out.stdout.strip()
    return version or None


def _absolute(python: str | os.PathLike[str]) -> Path:
    """An interpreter's absolute path (a bare name is looked up on PATH); not resolved,
    since a venv's python is a symlink to the base interpreter."""
    text = os.fspath(python)
    if os.sep not in text and (found := shutil.which(text)):
        return Path(found)
    return Path(text).absolute()


def _default_venv() -> Path:
    return Path(os.environ.get(ENV_TRACE_VENV) or DEFAULT_TRACE_VENV)


def find_phoenix(extra: Iterable[str | os.PathLike[str]] = ()) -> Path | None:
    """A Python interpreter that has arize-phoenix, or None.

    Looks at ``$ACTORBUS_PHOENIX_PYTHON``, the running interpreter, the venv at
    ``$ACTORBUS_TRACE_VENV`` (default ``./.venv-trace``), then ``extra``
    (interpreters or venv directories), in that order.
    """
    candidates: list[Path] = []
    if configured := os.environ.get(ENV_PHOENIX_PYTHON):
        candidates.append(Path(configured))
    candidates.append(Path(sys.executable))
    candidates.append(_venv_python(_default_venv()))
    for item in extra:
        path = Path(item)
        candidates.append(_venv_python(path) if path.is_dir() else path)
    seen: set[Path] = set()
    for candidate in map(_absolute, candidates):
        if candidate in seen:
            continue
        seen.add(candidate)
        if phoenix_version(candidate) is not None:
            return candidate
    return None


def ensure_phoenix_venv(
    venv: str | os.PathLike[str] | None = None,
    *,
    requirement: str = PHOENIX_REQUIREMENT,
    base_python: str | None = None,
    quiet: bool = True,
) -> Path:
    """Create a venv with Phoenix in it unless it is there already; its Python.

    Default place ``$ACTORBUS_TRACE_VENV`` or ``./.venv-trace``. Phoenix gets a
    venv of its own so its ~150 packages never touch actorbus's: about 830 MB
    and one to three minutes of ``pip install`` the first time.
    """
    path = Path(venv).absolute() if venv is not None else _default_venv().absolute()
    python = _venv_python(path)
    if phoenix_version(python) is not None:
        return python
    if not python.exists():
        subprocess.run([base_python or sys.executable, "-m", "venv", os.fspath(path)], check=True)
    ignore = path / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")  # the venv never shows up in `git status`
    pip = [os.fspath(python), "-m", "pip", "install", *(["--quiet"] if quiet else [])]
    subprocess.run([*pip, requirement], check=True)
    if phoenix_version(python) is None:
        raise TraceUIError(f"installed {requirement!r} into {path} but cannot find it there")
    return python


# -- running Phoenix --------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _normalize_trace_id(trace_id: str | int) -> str:
    text = format(trace_id, "032x") if isinstance(trace_id, int) else trace_id.strip().lower()
    text = text.removeprefix("0x").replace("-", "")
    if not _HEX_TRACE_ID.match(text):
        raise ValueError(f"not an OpenTelemetry trace id (32 hex digits): {trace_id!r}")
    return text


def trace_url(base_url: str, trace_id: str | int) -> str:
    """The Phoenix UI page of one trace (Phoenix redirects it to the trace's project)."""
    return f"{base_url.rstrip('/')}/redirects/traces/{_normalize_trace_id(trace_id)}"


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
    resource = f"{_PROJECT_ATTRIBUTE}={urllib.parse.quote(project)}"
    if existing := env.get("OTEL_RESOURCE_ATTRIBUTES", "").strip():
        kept = [
            item.strip()
            for item in existing.split(",")
            if item.strip() and not item.strip().startswith(f"{_PROJECT_ATTRIBUTE}=")
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
    interpreter = _absolute(python) if python is not None else find_phoenix()
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
            [os.fspath(interpreter), "-c", _BOOTSTRAP, "serve"],
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


# -- reading spans back -------------------------------------------------------------


@dataclass(frozen=True)
class TraceSpan:
    """One span as Phoenix stored it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    service: str | None
    """The ``service.name`` span attribute (see :class:`ServiceNameSpanProcessor`)."""
    project: str
    start_time: str
    attributes: dict[str, Any]


def _lookup(attributes: Mapping[str, Any], dotted: str) -> Any:
    """``attributes["a.b"]`` flat, or ``attributes["a"]["b"]`` nested."""
    if dotted in attributes:
        return attributes[dotted]
    node: Any = attributes
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


class PhoenixClient:
    """Reads Phoenix's REST API (``/v1``) with the standard library only."""

    def __init__(self, base_url: str, *, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str | Sequence[str]] | None = None) -> Any:
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.base_url}{path}" + (f"?{query}" if query else "")
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read())

    def projects(self) -> list[str]:
        """Names of all projects (Phoenix's ``default`` included)."""
        names: list[str] = []
        cursor: str | None = None
        while True:
            body = self._get("/v1/projects", {"cursor": cursor} if cursor else None)
            names.extend(str(item["name"]) for item in body.get("data", []))
            cursor = body.get("next_cursor")
            if not cursor:
                return names

    def spans(self, trace_id: str | int, project: str | None = None) -> list[TraceSpan]:
        """The spans of one trace in ``project`` (default: in every project), by start time."""
        tid = _normalize_trace_id(trace_id)
        found: list[TraceSpan] = []
        for name in [project] if project is not None else self.projects():
            path = f"/v1/projects/{urllib.parse.quote(name, safe='')}/spans"
            cursor: str | None = None
            while True:
                params: dict[str, str | Sequence[str]] = {
                    "trace_id": [tid],
                    "limit": "1000",
                    "sort": "start_time",
                    "order": "asc",
                }
                if cursor:
                    params["cursor"] = cursor
                try:
                    body = self._get(path, params)
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:  # no such project (yet)
                        break
                    raise
                for item in body.get("data", []):
                    attributes = dict(item.get("attributes") or {})
                    service = _lookup(attributes, "service.name")
                    found.append(
                        TraceSpan(
                            trace_id=str(item["context"]["trace_id"]),
                            span_id=str(item["context"]["span_id"]),
                            parent_id=item.get("parent_id") or None,
                            name=str(item["name"]),
                            service=None if service is None else str(service),
                            project=name,
                            start_time=str(item.get("start_time", "")),
                            attributes=attributes,
                        )
                    )
                cursor = body.get("next_cursor")
                if not cursor:
                    break
        found.sort(key=lambda span: span.start_time)
        return found

    def wait_for_spans(
        self,
        trace_id: str | int,
        count: int,
        *,
        project: str | None = None,
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> list[TraceSpan]:
        """Poll until the trace has at least ``count`` spans; ``TimeoutError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        spans: list[TraceSpan] = []
        while True:
            with contextlib.suppress(OSError):  # URLError is an OSError
                spans = self.spans(trace_id, project)
            if len(spans) >= count:
                return spans
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"trace {trace_id} has {len(spans)} span(s) in Phoenix after "
                    f"{timeout:.0f} s, wanted {count}: {[s.name for s in spans]}"
                )
            time.sleep(interval)

    def latest_trace_id(self, project: str = DEFAULT_PROJECT) -> str | None:
        """The trace id of the project's most recently started trace, if any."""
        try:
            body = self._get(
                f"/v1/projects/{urllib.parse.quote(project, safe='')}/traces",
                {"sort": "start_time", "order": "desc", "limit": "1"},
            )
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        data = body.get("data") or []
        return str(data[0]["trace_id"]) if data else None


def format_tree(spans: Iterable[TraceSpan]) -> str:
    """The spans as an indented tree, one line each: ``name [service]``."""
    spans = list(spans)
    ids = {span.span_id for span in spans}
    children: dict[str | None, list[TraceSpan]] = {}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else None  # orphans at the top
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            service = f" [{span.service}]" if span.service else ""
            lines.append(f"{'  ' * depth}{span.name}{service}")
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


# -- screenshots ----------------------------------------------------------------


def find_chromium() -> Path | None:
    """``$ACTORBUS_CHROMIUM``, or chromium / chromium-browser / google-chrome on PATH."""
    if configured := os.environ.get(ENV_CHROMIUM):
        return Path(configured) if Path(configured).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return Path(found)
    return None


def _run_chromium(
    url: str,
    args: Sequence[str],
    *,
    window_size: tuple[int, int],
    settle_ms: int,
    timeout: float,
    chromium: str | os.PathLike[str] | None,
) -> tuple[int, bytes, bytes]:
    """Headless Chromium on ``url`` with ``args``: (exit code, stdout, stderr)."""
    browser = Path(chromium) if chromium is not None else find_chromium()
    if browser is None:
        raise TraceUIError(
            "Chromium not found: `apt-get install chromium` (Debian) or set "
            f"{ENV_CHROMIUM}=/path/to/chromium"
        )
    width, height = window_size
    with tempfile.TemporaryDirectory(prefix="actorbus-chromium-") as profile:
        command = [
            os.fspath(browser),
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--disable-extensions",
            # No animations: Phoenix's trace panel otherwise may be caught mid-fade.
            "--force-prefers-reduced-motion",
            "--proxy-server=http://127.0.0.1:9",  # non-loopback traffic goes nowhere
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={settle_ms}",
            *args,
            url,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses to run as root otherwise
        with tempfile.TemporaryFile() as stderr:  # chatty; a pipe nobody reads could block it
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=profile,
                start_new_session=True,
            )
            try:
                stdout, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise TraceUIError(f"Chromium took more than {timeout:.0f} s on {url}") from None
            stderr.seek(0)
            errors = stderr.read()
    return proc.returncode, stdout, errors


def capture_page(
    url: str,
    path: str | os.PathLike[str],
    *,
    window_size: tuple[int, int] = (1400, 900),
    settle_ms: int = 5_000,
    timeout: float = 90.0,
    chromium: str | os.PathLike[str] | None = None,
) -> tuple[Path, str]:
    """Save a PNG of ``url`` as headless Chromium renders it: (the PNG's path, the DOM).

    One Chromium run takes both, so a test can check what the page shows (the
    DOM's text) and keep the picture. ``settle_ms`` is Chromium's virtual-time
    budget: how long the page's own scripts (Phoenix's UI fetching the trace)
    run before the shot. Chromium gets a fresh profile and a proxy that goes
    nowhere, so it reaches loopback addresses only.
    """
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    code, dom, errors = _run_chromium(
        url,
        ["--dump-dom", f"--screenshot={target}"],
        window_size=window_size,
        settle_ms=settle_ms,
        timeout=timeout,
        chromium=chromium,
    )
    if code != 0 or not target.exists() or target.stat().st_size == 0:
        tail = "\n".join(errors.decode(errors="replace").splitlines()[-20:])
        raise TraceUIError(f"Chromium made no screenshot of {url} (exit {code}):\n{tail}")
    return target, dom.decode(errors="replace")


def screenshot(
    url: str,
    path: str | os.PathLike[str],
    *,
    window_size: tuple[int, int] = (1400, 900),
    settle_ms: int = 5_000,
    timeout: float = 90.0,
    chromium: str | os.PathLike[str] | None = None,
) -> Path:
    """Save a PNG of ``url`` as headless Chromium renders it; its path.

    See :func:`capture_page`, which also returns the page's DOM.
    """
    png, _ = capture_page(
        url, path, window_size=window_size, settle_ms=settle_ms, timeout=timeout, chromium=chromium
    )
    return png


def render_dom(
    url: str,
    *,
    window_size: tuple[int, int] = (1400, 900),
    settle_ms: int = 5_000,
    timeout: float = 90.0,
    chromium: str | os.PathLike[str] | None = None,
) -> str:
    """The page's DOM (HTML) after its scripts ran, as headless Chromium sees it."""
    code, dom, errors = _run_chromium(
        url,
        ["--dump-dom"],
        window_size=window_size,
        settle_ms=settle_ms,
        timeout=timeout,
        chromium=chromium,
    )
    if code != 0:
        tail = "\n".join(errors.decode(errors="replace").splitlines()[-20:])
        raise TraceUIError(f"Chromium could not render {url} (exit {code}):\n{tail}")
    return dom.decode(errors="replace")


# -- python -m actorbus.services.trace_ui -----------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Start Phoenix, print where to send spans and where to look, run until Ctrl-C."""
    import argparse
    import shlex

    parser = argparse.ArgumentParser(
        prog="python -m actorbus.services.trace_ui",
        description="A local tracing UI (Arize Phoenix) on 127.0.0.1, until Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--dir", default=None, help="keep Phoenix's data here (default: temp)")
    parser.add_argument("--project", default=DEFAULT_PROJECT, help="Phoenix project name")
    parser.add_argument(
        "--install",
        action="store_true",
        help=f"create {DEFAULT_TRACE_VENV} with Phoenix in it first if Phoenix is missing",
    )
    args = parser.parse_args(argv)
    # Ctrl-C and SIGTERM both end in server.stop(): Phoenix runs in a session of its
    # own and would outlive this process otherwise.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    python = find_phoenix()
    if python is None and args.install:
        print(f"installing {PHOENIX_REQUIREMENT} into {_default_venv()} ...", flush=True)
        python = ensure_phoenix_venv()
    try:
        server = start_phoenix(
            python=python, port=args.port, working_dir=args.dir, project=args.project
        )
    except TraceUIError as exc:
        print(exc, file=sys.stderr)
        return 2
    with server:
        print(f"Phoenix {server.version} up in {server.startup_seconds:.1f} s")
        print(f"UI:   {server.ui_url}")
        print("Send spans from a shell with:")
        for key in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES"):
            print(f"  export {key}={shlex.quote(server.otel_env(base={})[key])}")
        print("  export OTEL_METRICS_EXPORTER=none")
        print("Ctrl-C stops it.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
