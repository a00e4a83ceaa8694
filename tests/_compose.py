"""compose/docker-compose.yml read as Docker Compose reads it, and run without Docker.

CI machines have no Docker engine, so tests/test_compose.py proves the compose
file in two ways: it validates it against the Compose specification's JSON
schema (``compose/compose-spec.json``, a copy, so a clean clone needs nothing
else), and it runs the command of every service it can as a local process with
the same arguments. Only what must differ between a container and this machine
is changed, always by the same rules (:class:`Loopback`):

- an address ``SERVICE:PORT`` (another service) becomes ``127.0.0.1:P``, and
  ``0.0.0.0:PORT`` / ``127.0.0.1:PORT`` / ``localhost:PORT`` inside a service
  (its own listeners, its healthcheck) becomes ``127.0.0.1:P``, where ``P`` is a
  free loopback port assigned to that service's ``PORT`` (ports come from each
  service's ``expose:``; one set per replica);
- a mount target becomes a local path: bind mounts their source in the
  repository, named volumes a fresh temporary directory, and the image's
  ``WORKDIR /app`` (where the Dockerfile copies the package and the examples)
  the repository root;
- the program: ``nats-server`` is the binary actorbus itself uses
  (:func:`actorbus.bus.server.find_nats_server`), ``actorbus`` and ``python``
  are this interpreter.

Services with no command this machine can run (Jaeger's image) are reported as
skipped, with the reason; their ports are still assigned, so a test can put a
stand-in there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import jsonschema
import yaml
from _util import terminate

from actorbus.bus.server import find_nats_server

REPO = Path(__file__).resolve().parent.parent
COMPOSE_DIR = REPO / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
# The Compose specification's JSON schema (compose-spec/compose-spec,
# schema/compose-spec.json at commit 170098b, Apache-2.0), kept in the repository
# so that a clean clone validates without network or a Docker installation.
SCHEMA_FILE = COMPOSE_DIR / "compose-spec.json"
DOCKERFILE = COMPOSE_DIR / "Dockerfile"
DOCKERIGNORE = COMPOSE_DIR.parent / ".dockerignore"

LOOPBACK = "127.0.0.1"
OWN_HOSTS = ("0.0.0.0", "127.0.0.1", "localhost")


# -- interpolation: ${VAR}, ${VAR:-default}, ... as the Compose spec defines it --

_REFERENCE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?", re.S)


class InterpolationError(ValueError):
    """A reference Compose would refuse (or one this reader does not support)."""


@dataclass(frozen=True)
class Reference:
    """One ``$NAME`` / ``${NAME...}`` in the file; ``default`` None when it has none."""

    name: str
    default: str | None


def _parse_braced(body: str) -> tuple[str, str, str]:
    m = _BRACED.fullmatch(body)
    if m is None:
        raise InterpolationError(f"invalid interpolation ${{{body}}}")
    arg = m["arg"] or ""
    if "${" in arg:
        raise InterpolationError(f"nested interpolation is not supported: ${{{body}}}")
    return m["name"], m["op"] or "", arg


def interpolate_str(text: str, env: Mapping[str, str]) -> str:
    """Resolve references in one string against ``env`` (unset means absent)."""

    def one(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        if m["named"]:
            return env.get(m["named"], "")
        name, op, arg = _parse_braced(m["braced"])
        value = env.get(name)
        if op == ":-":
            return value if value else arg
        if op == "-":
            return arg if value is None else value
        if op == ":+":
            return arg if value else ""
        if op == "+":
            return "" if value is None else arg
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            raise InterpolationError(f"{name}: {arg or 'required'}")
        return value or ""

    return _REFERENCE.sub(one, text)


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Resolve references in every string value (keys are left as they are)."""
    if isinstance(value, str):
        return interpolate_str(value, env)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def references(value: Any) -> Iterator[Reference]:
    """Every variable reference in the (uninterpolated) document."""
    if isinstance(value, str):
        for m in _REFERENCE.finditer(value):
            if m["named"]:
                yield Reference(m["named"], None)
            elif m["braced"] is not None:
                name, op, arg = _parse_braced(m["braced"])
                yield Reference(name, arg if op in (":-", "-") else None)
    elif isinstance(value, dict):
        for v in value.values():
            yield from references(v)
    elif isinstance(value, list):
        for v in value:
            yield from references(v)


# -- loading and validating ----------------------------------------------------


def load_raw(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The YAML as written (anchors and ``<<`` merges resolved, no interpolation)."""
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path} is not a mapping"
    return doc


def load(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose model after interpolation with ``env`` (default: no variables
    set, so every default applies, whatever the caller's environment holds)."""
    doc = interpolate(load_raw(path), env or {})
    assert isinstance(doc, dict)
    return doc


def schema_errors(doc: Mapping[str, Any]) -> list[str]:
    """What the Compose spec's JSON schema says is wrong with ``doc`` (none: valid).

    The schema declares draft-07 by a URI (https, no ``#``) that jsonschema does
    not map to a draft, so the Draft 7 validator is named here rather than
    looked up (the lookup would fall back to the newest draft)."""
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]


# -- one service, read -----------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    source: str  # bind: a host path; volume: the volume's name
    target: str
    kind: str  # "bind" or "volume"
    read_only: bool


@dataclass
class Service:
    """The parts of a compose service the local run and the checks need."""

    name: str
    spec: dict[str, Any]

    @property
    def command(self) -> list[str]:
        cmd = self.spec.get("command")
        if cmd is None:
            return []
        return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]

    @property
    def replicas(self) -> int:
        return int((self.spec.get("deploy") or {}).get("replicas", 1))

    @property
    def expose(self) -> list[int]:
        return [int(str(p).split("/")[0]) for p in self.spec.get("expose", [])]

    @property
    def published(self) -> list[tuple[str, int]]:
        """(host part, container port) of every ``ports:`` entry."""
        out: list[tuple[str, int]] = []
        for entry in self.spec.get("ports", []):
            if isinstance(entry, dict):
                out.append((str(entry.get("published", "")), int(entry["target"])))
                continue
            host, _, container = str(entry).split("/")[0].rpartition(":")
            out.append((host, int(container)))
        return out

    @property
    def environment(self) -> dict[str, str]:
        env = self.spec.get("environment") or {}
        if isinstance(env, list):
            pairs = (item.split("=", 1) for item in env)
            return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}
        return {str(k): "" if v is None else str(v) for k, v in env.items()}

    @property
    def healthcheck(self) -> list[str] | None:
        """The healthcheck's exec form (``CMD`` dropped); None if it has none."""
        hc = self.spec.get("healthcheck") or {}
        test = hc.get("test")
        if not test or hc.get("disable") in (True, "true"):
            return None
        if isinstance(test, str):
            return ["/bin/sh", "-c", test]
        kind, *rest = (str(t) for t in test)
        if kind == "NONE":
            return None
        if kind == "CMD-SHELL":
            return ["/bin/sh", "-c", " ".join(rest)]
        assert kind == "CMD", f"{self.name}: healthcheck test starts with {kind!r}"
        return rest

    @property
    def healthcheck_timeout(self) -> float:
        return _duration((self.spec.get("healthcheck") or {}).get("timeout", "30s"))

    @property
    def depends_on(self) -> dict[str, str]:
        deps = self.spec.get("depends_on") or {}
        if isinstance(deps, list):
            return dict.fromkeys(deps, "service_started")
        return {k: (v or {}).get("condition", "service_started") for k, v in deps.items()}

    @property
    def mounts(self) -> list[Mount]:
        out: list[Mount] = []
        for entry in self.spec.get("volumes", []):
            if isinstance(entry, dict):
                out.append(
                    Mount(
                        str(entry.get("source", "")),
                        str(entry["target"]),
                        str(entry.get("type", "volume")),
                        bool(entry.get("read_only", False)),
                    )
                )
                continue
            source, target, *mode = str(entry).split(":")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            out.append(Mount(source, target, kind, "ro" in ",".join(mode).split(",")))
        return out

    @property
    def builds_actorbus_image(self) -> bool:
        build = self.spec.get("build") or {}
        return isinstance(build, dict) and build.get("dockerfile") == "compose/Dockerfile"


def services(doc: Mapping[str, Any]) -> dict[str, Service]:
    return {name: Service(name, spec) for name, spec in doc["services"].items()}


def _duration(text: Any) -> float:
    """Compose durations: ``1m30s``, ``500ms``, ``10s``."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(text)):
        total += float(number) * units[unit]
    return total


def dockerfile_workdir(path: Path = DOCKERFILE) -> str:
    """The final stage's WORKDIR: where service commands run in the image."""
    workdir = "/"
    for line in path.read_text().splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            workdir = "/"
        elif len(words) == 2 and words[0].upper() == "WORKDIR":
            workdir = words[1]
    return workdir


# -- the loopback mapping --------------------------------------------------------

_HOST_PORT = re.compile(r"(?<![A-Za-z0-9_.-])(?P<host>[A-Za-z0-9_.-]+):(?P<port>\d{1,5})(?!\d)")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all held open until all are chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Loopback:
    """Where each service's addresses and paths are when it runs on this machine."""

    def __init__(self, doc: Mapping[str, Any], workdir: Path) -> None:
        self.services = services(doc)
        self.workdir = workdir
        self.image_workdir = dockerfile_workdir()
        slots = [
            (name, replica, port)
            for name, svc in self.services.items()
            for replica in range(svc.replicas)
            for port in svc.expose
        ]
        self._ports = dict(zip(slots, free_ports(len(slots)), strict=True))

    def port(self, service: str, container_port: int, replica: int = 0) -> int:
        try:
            return self._ports[(service, replica, container_port)]
        except KeyError:
            raise KeyError(
                f"{service} does not list port {container_port} in expose:, "
                "so nothing is known to listen there"
            ) from None

    def url(self, service: str, container_port: int, scheme: str, replica: int = 0) -> str:
        return f"{scheme}://{LOOPBACK}:{self.port(service, container_port, replica)}"

    def paths(self, service: str) -> list[tuple[str, Path]]:
        """(path in the container, path here), longest first."""
        svc = self.services[service]
        out: list[tuple[str, Path]] = []
        for m in svc.mounts:
            if m.kind == "bind":
                out.append((m.target, (COMPOSE_DIR / m.source).resolve()))
            else:
                out.append((m.target, self.workdir / "volumes" / m.source))
        if svc.builds_actorbus_image and self.image_workdir != "/":
            out.append((self.image_workdir, REPO))
        return sorted(out, key=lambda p: -len(p[0]))

    def localize(self, text: str, service: str, replica: int = 0) -> str:
        """``text`` (an argument, an environment value) as it must read here."""

        def address(m: re.Match[str]) -> str:
            host, port = m["host"], int(m["port"])
            if host in self.services:
                return f"{LOOPBACK}:{self.port(host, port)}"
            if host in OWN_HOSTS:
                return f"{LOOPBACK}:{self.port(service, port, replica)}"
            return m.group(0)

        text = _HOST_PORT.sub(address, text)
        for inside, here in self.paths(service):
            pattern = rf"(?<![\w./-]){re.escape(inside)}(?=/|$|[^\w.-])"
            text = re.sub(pattern, str(here).replace("\\", "\\\\"), text)
        return text

    def program(self, argv0: str) -> list[str] | None:
        """How this machine runs a container's program; None if it cannot."""
        if argv0 == "nats-server":
            return [find_nats_server()]
        if argv0 == "actorbus":
            return [sys.executable, "-m", "actorbus"]
        if argv0 in ("python", "python3"):
            return [sys.executable]
        return None

    def argv(self, service: str, replica: int = 0) -> list[str]:
        svc = self.services[service]
        program = self.program(svc.command[0]) if svc.command else None
        assert program is not None, f"{service}: {self.skip_reason(service)}"
        return program + [self.localize(a, service, replica) for a in svc.command[1:]]

    def skip_reason(self, service: str) -> str | None:
        """Why ``service`` cannot run here (None: it can)."""
        svc = self.services[service]
        if not svc.command:
            return f"no command: it runs what its image ({svc.spec.get('image')}) runs"
        if self.program(svc.command[0]) is None:
            return f"{svc.command[0]!r} (from {svc.spec.get('image')}) is not on this machine"
        return None

    def environment(self, service: str, replica: int = 0) -> dict[str, str]:
        """This machine's basics, none of the settings a container would not see,
        the image's PYTHONUNBUFFERED, and the service's environment, localized."""
        own = ("OTEL_", "NATS_", "ACTORBUS_", "PYTHONPATH")
        env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
        env["PYTHONUNBUFFERED"] = "1"
        for key, value in self.services[service].environment.items():
            env[key] = self.localize(value, service, replica)
        return env


# -- running it ------------------------------------------------------------------


@dataclass
class LocalProcess:
    """One replica of one service, running here."""

    service: str
    replica: int
    argv: list[str]
    proc: asyncio.subprocess.Process
    stderr: IO[bytes]
    stdout_lines: list[str] = field(default_factory=list)
    ready_line: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:
        return f"{self.service}[{self.replica}]"

    def output_tail(self, lines: int = 25) -> str:
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace").splitlines()[-lines:]
        return "\n".join(
            [f"-- {self.label} stdout:", *self.stdout_lines[-lines:], "-- stderr:", *err]
        )


@dataclass
class LocalDeployment:
    """The compose file's services running as local processes."""

    loopback: Loopback
    processes: list[LocalProcess] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    # (service, replica) -> the localized healthcheck command that passed
    healthy: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    waves: list[list[str]] = field(default_factory=list)
    files: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def of(self, service: str) -> list[LocalProcess]:
        return [p for p in self.processes if p.service == service]

    def diagnostics(self) -> str:
        return "\n".join(p.output_tail() for p in self.processes)


def start_order(svcs: Mapping[str, Service], runnable: set[str]) -> list[list[str]]:
    """Waves of services whose dependencies all come in earlier waves."""
    done: set[str] = set()
    waves: list[list[str]] = []
    pending = sorted(runnable)
    while pending:
        wave = [s for s in pending if set(svcs[s].depends_on) <= done]
        if not wave:
            raise AssertionError(f"depends_on cannot be satisfied for {pending}")
        waves.append(wave)
        done.update(wave)
        pending = [s for s in pending if s not in done]
    return waves


async def _read_stdout(p: LocalProcess) -> None:
    assert p.proc.stdout is not None
    async for raw in p.proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        p.stdout_lines.append(line)
        if re.match(r"^ready\b", line):
            p.ready_line.set()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """PR_SET_PDEATHSIG: a test runner killed outright takes its servers along."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


async def _spawn(dep: LocalDeployment, service: str, replica: int) -> LocalProcess:
    lb = dep.loopback
    for _inside, here in lb.paths(service):
        if not here.exists():
            here.mkdir(parents=True)  # a named volume's directory
    argv = lb.argv(service, replica)
    # A file, not a pipe: a pipe nobody reads could block the child. dep.files
    # closes it when the deployment ends (ruff cannot see that).
    stderr = dep.files.enter_context(tempfile.TemporaryFile())  # noqa: SIM115
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        stdin=asyncio.subprocess.DEVNULL,
        env=lb.environment(service, replica),
        cwd=REPO,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    p = LocalProcess(service, replica, argv, proc, stderr)
    p.reader = asyncio.create_task(_read_stdout(p))
    dep.processes.append(p)
    return p


def _http_ok(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError):
        return False


async def run_healthcheck(lb: Loopback, service: str, replica: int) -> tuple[bool, list[str]]:
    """Run the service's healthcheck here once: (passed, the command as run).

    ``wget``, which the nats image uses, may not be installed on this machine,
    so its URL is fetched here instead; any other program maps like a command.
    """
    svc = lb.services[service]
    test = svc.healthcheck
    assert test is not None
    args = [lb.localize(a, service, replica) for a in test]
    timeout = min(svc.healthcheck_timeout, 10.0)
    if args[0] == "wget":
        url = next(a for a in args if a.startswith(("http://", "https://")))
        return await asyncio.to_thread(_http_ok, url, timeout), args
    program = lb.program(args[0])
    assert program is not None, f"{service}: cannot run healthcheck program {args[0]!r}"
    command = program + args[1:]
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        stdin=asyncio.subprocess.DEVNULL,
        env=lb.environment(service, replica),
        cwd=REPO,
    )
    try:
        code = await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        await terminate(proc)
        return False, command
    return code == 0, command


async def _ready_line(p: LocalProcess, deadline: float) -> None:
    """A Python role is up once it printed its ``ready`` line (actorbus run and
    the registry print one when they serve); other programs at once."""
    if p.argv[0] != sys.executable:
        return
    waiters = [asyncio.ensure_future(p.ready_line.wait()), asyncio.ensure_future(p.proc.wait())]
    try:
        await asyncio.wait(
            waiters, timeout=deadline - time.monotonic(), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for w in waiters:
            w.cancel()
    if not p.ready_line.is_set():
        raise AssertionError(f"{p.label} printed no 'ready' line\n{p.output_tail()}")


async def _until_healthy(dep: LocalDeployment, procs: list[LocalProcess], deadline: float) -> None:
    """Poll the healthcheck these replicas share (the same command, localized)
    until it passes, as Docker does; a replica that exits fails at once."""
    lb = dep.loopback
    first = procs[0]
    while True:
        for p in procs:
            if p.proc.returncode is not None:
                raise AssertionError(f"{p.label} exited ({p.proc.returncode})\n{p.output_tail()}")
        ok, command = await run_healthcheck(lb, first.service, first.replica)
        if ok:
            for p in procs:
                dep.healthy[(p.service, p.replica)] = command
            return
        if time.monotonic() > deadline:
            tails = "\n".join(p.output_tail() for p in procs)
            raise AssertionError(f"{first.service}: healthcheck {command} never passed\n{tails}")
        await asyncio.sleep(0.2)


async def _until_ready(dep: LocalDeployment, procs: list[LocalProcess], deadline: float) -> None:
    """The replicas of one service: each printed ``ready`` (if a Python role),
    then the service's healthcheck passes. Replicas whose localized healthcheck
    is the same command (no per-replica address in it: ``ask echo/1``) share one
    run of it, which saves starting an interpreter per replica."""
    await asyncio.gather(*(_ready_line(p, deadline) for p in procs))
    lb = dep.loopback
    svc = lb.services[procs[0].service]
    if svc.healthcheck is None:
        return
    groups: dict[tuple[str, ...], list[LocalProcess]] = {}
    for p in procs:
        key = tuple(lb.localize(a, p.service, p.replica) for a in svc.healthcheck)
        groups.setdefault(key, []).append(p)
    await asyncio.gather(*(_until_healthy(dep, group, deadline) for group in groups.values()))


@contextlib.asynccontextmanager
async def run_locally(lb: Loopback, timeout: float = 40.0) -> AsyncIterator[LocalDeployment]:
    """Start every runnable service in dependency order (each wave once the one
    before is ready and healthy), yield, then stop them all in reverse order
    (SIGTERM, then SIGKILL)."""
    dep = LocalDeployment(lb)
    runnable: set[str] = set()
    for name in lb.services:
        reason = lb.skip_reason(name)
        if reason is None:
            runnable.add(name)
        else:
            dep.skipped[name] = reason
    for name in runnable:
        missing = set(lb.services[name].depends_on) - runnable
        assert not missing, f"{name} depends on {missing}, which cannot run here"
    dep.waves = start_order(lb.services, runnable)
    deadline = time.monotonic() + timeout
    try:
        for wave in dep.waves:
            started = {
                name: [await _spawn(dep, name, r) for r in range(lb.services[name].replicas)]
                for name in wave
            }
            await asyncio.gather(*(_until_ready(dep, ps, deadline) for ps in started.values()))
        yield dep
    finally:
        for wave in reversed(dep.waves):
            stopping = [p for p in dep.processes if p.service in wave]
            await asyncio.gather(*(terminate(p.proc) for p in stopping))
            for p in stopping:
                if p.reader is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(p.reader, 2.0)
        dep.files.close()
