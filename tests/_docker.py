"""A real container engine for the compose test: the running one, or a dockerd
this test session starts (as root, where Debian's docker.io is installed) and
stops; and a compose project on it that is taken down with everything it made."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _util import exclusive

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"
OFFLINE_FILE = REPO / "compose" / "offline.yml"  # no registry here: the offline profile
FIXTURES = REPO / "tests" / "fixtures" / "compose"
BASE_IMAGE = "actorbus-base:bookworm"
PHOENIX_IMAGE = "actorbus-phoenix:local"  # kept, like the base image: built once
BUILT_FOR = "org.actorbus.built-for"  # the label on an image build's leftover stage
# The actorbus image the compose tests run, tagged by a digest of what it is built
# from: built once for a source tree and kept, like the base image, so a test
# session with unchanged sources (and CI after a local run) builds nothing.
SOURCE_IMAGE = "actorbus-test"
# What compose/Dockerfile copies (.dockerignore lets in nothing else) besides the
# wheels, which pyproject.toml determines.
IMAGE_SOURCES = (
    "compose/Dockerfile",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "actorbus",
    "examples",
    "compose/healthcheck.py",
)


class EngineMissing(Exception):
    """No engine runs here and none can be started: the reason says why."""


def _answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    done = subprocess.run([docker, "info"], capture_output=True, timeout=30)
    return done.returncode == 0


@contextlib.contextmanager
def engine(log: Path) -> Iterator[None]:
    """A Docker engine that answers, for the duration."""
    if _answers():
        yield
        return
    dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if dockerd is None:
        raise EngineMissing("no Docker engine (apt-get install docker.io docker-compose)")
    if os.geteuid() != 0:
        raise EngineMissing("dockerd is installed but starting it needs root")
    with log.open("wb") as out:
        proc = subprocess.Popen([dockerd], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise EngineMissing(f"dockerd did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def compose_command() -> list[str]:
    """Compose 1.29 (Debian's docker-compose) runs the file as written; the v2
    plugin, where installed, does too."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    raise EngineMissing("no Compose (apt-get install docker-compose)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SINGLE_FILE = REPO / "compose" / "single.yml"
CLUSTER_PORTS = (
    "NATS_1_PORT",
    "NATS_2_PORT",
    "NATS_3_PORT",
    "NATS_MONITOR_PORT",
    "REGISTRY_PORT",
    "GATEWAY_PORT",
    "ROUTER_PORT",
    "PHOENIX_PORT",
)
SINGLE_PORTS = ("NATS_PORT", "REGISTRY_PORT", "GATEWAY_PORT")


class Project:
    """One compose project under test names: ``files`` (docker-compose.yml in
    the offline profile by default), its published ports free ones."""

    def __init__(
        self,
        files: tuple[Path, ...] = (COMPOSE_FILE, OFFLINE_FILE),
        ports: tuple[str, ...] = CLUSTER_PORTS,
        **env: str,
    ) -> None:
        self.name = f"abtest{uuid.uuid4().hex[:8]}"
        self.image = source_image()  # built by running(), shared, kept for the next session
        self.ports = {var: free_port() for var in ports}
        self.env = {
            **os.environ,
            **{var: str(port) for var, port in self.ports.items()},
            "PYTHON_IMAGE": BASE_IMAGE,
            "ACTORBUS_IMAGE": self.image,
            "NATS_IMAGE": self.image,  # single.yml's offline way: nats-server of the image
            "PHOENIX_IMAGE": PHOENIX_IMAGE,
            **env,
        }
        for inherited in ("OTEL_EXPORTER_OTLP_ENDPOINT", "COMPOSE_PROJECT_NAME", "COMPOSE_FILE"):
            self.env.pop(inherited, None)
        self.secrets = Path()  # where a test copied the `secrets` service's output
        self.ca: Path | None = None  # the deployment's CA, once copied out
        named = [arg for f in files for arg in ("-f", str(f))]
        self.base = [*compose_command(), "-p", self.name, *named]

    def run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [*self.base, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )
        assert done.returncode == 0, f"compose {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def url(self, port: str, path: str = "", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[port]}{path}"

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.name}_{service}_{index}"

    def inspect(self, container: str, fmt: str) -> str:
        done = subprocess.run(
            ["docker", "inspect", container, "--format", fmt], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def copy_out(self, container: str, path: str, dest: Path) -> Path:
        """``docker cp`` of ``path`` in ``container`` to ``dest`` (returned)."""
        done = subprocess.run(
            ["docker", "cp", f"{container}:{path}", str(dest)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return dest

    def down(self) -> None:
        """``down -v``. Not ``--rmi all``: the images (the source's, the base and
        Phoenix) are kept for the next run."""
        self.run("down", "-v", "--remove-orphans")

    @contextlib.contextmanager
    def as_client(self, into: Path) -> Iterator[None]:
        """As an operator would: the `secrets` service's output copied out to
        ``into``, its CA trusted, the `client` member's home as ACTORBUS_HOME."""
        self.secrets = self.copy_out(self.container("secrets"), "/secrets", into)
        self.ca = self.secrets / "ca.pem"
        with pytest.MonkeyPatch.context() as env:
            env.setenv("ACTORBUS_HOME", str(self.secrets / "homes" / "client"))
            yield

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes of this project still there."""
        found = []
        named = f"name={self.name}"
        for kind, args in (
            ("container", ["ps", "-a", "--filter", named, "--format", "{{.Names}}"]),
            ("network", ["network", "ls", "--filter", named, "--format", "{{.Name}}"]),
            ("volume", ["volume", "ls", "--filter", named, "--format", "{{.Name}}"]),
        ):
            out = subprocess.run(["docker", *args], capture_output=True, text=True).stdout
            found += [f"{kind} {line}" for line in out.split() if line]
        return found


_PREPARED: set[bool] = set()  # this session's preparations, by phoenix: once is enough


@functools.cache
def source_image() -> str:
    """The tag of the actorbus image built from this checkout's sources: a digest
    of every file the image is built from (the source does not change within a
    test session)."""
    digest = hashlib.sha256()
    for name in IMAGE_SOURCES:
        top = REPO / name
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(str(path.relative_to(REPO)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return f"{SOURCE_IMAGE}:{digest.hexdigest()[:16]}"


def _image_exists(tag: str) -> bool:
    found = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    return found.returncode == 0


def prepare_offline_build(phoenix: bool = True) -> None:
    """The base image from Debian's packages, (``phoenix``) the tracing UI's
    image, and the actorbus image of these sources (compose/offline.py, then
    compose/Dockerfile with the wheels it made), each once: the base and Phoenix
    images are kept across runs, and so is the source's image, until the
    sources change (its older builds are removed then)."""
    if phoenix in _PREPARED or (not phoenix and True in _PREPARED):
        return
    image = source_image()
    built = _image_exists(image)
    options = ["--phoenix", PHOENIX_IMAGE] if phoenix else ["--no-phoenix"]
    if built:
        options.append("--no-wheels")  # the wheels are only for the build
    done = subprocess.run(
        [sys.executable, str(REPO / "compose" / "offline.py"), "--base", BASE_IMAGE, *options],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise EngineMissing(f"offline build preparation failed: {done.stderr[-2000:]}")
    if not built:
        _build_source_image(image)
    _PREPARED.add(phoenix)


def _build_source_image(image: str) -> None:
    """compose/Dockerfile as compose builds it for the offline profile; then the
    build's leftover stage and the images of older sources are removed."""
    args = ["--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}", "--build-arg", f"BUILT_FOR={image}"]
    done = subprocess.run(
        ["docker", "build", "--force-rm", "-f", "compose/Dockerfile", *args, "-t", image, "."],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise EngineMissing(f"the actorbus image did not build: {done.stderr[-2000:]}")
    stage = f"label={BUILT_FOR}={image}"
    subprocess.run(["docker", "image", "prune", "--force", "--filter", stage], check=True)
    listed = ["docker", "images", SOURCE_IMAGE, "--format", "{{.Repository}}:{{.Tag}}"]
    older = subprocess.run(listed, capture_output=True, text=True).stdout.split()
    for tag in older:
        if tag != image:  # one in use by another checkout's run stays (no --force)
            subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)


@contextlib.contextmanager
def running(
    tmp: pytest.TempPathFactory, make: Callable[[], Project], *services: str, phoenix: bool = True
) -> Iterator[Project]:
    """A project on a real engine for a test module: the offline build prepared
    and the images built (once), ``up`` (of ``services``, or all), the host its
    client as an operator would be (``Project.as_client``); then taken down,
    checked to leave nothing behind. Skips, with the reason, where no engine runs
    or starts.

    On a fresh machine the first build (a Debian base image, Phoenix's image, the
    wheels) takes several minutes, each step bounded by its own timeout: the
    tests that use this mark their timeout ``func_only``, so that it times their
    own run, not this."""
    try:
        with (
            exclusive("docker-engine", machine=True),
            engine(tmp.mktemp("dockerd") / "dockerd.log"),
        ):
            with exclusive("source-build"):  # its wheels are built from the source tree
                prepare_offline_build(phoenix=phoenix)
            p = make()
            try:
                p.run("up", "-d", "--no-build", *services)
                with p.as_client(tmp.mktemp("s") / "secrets"):
                    yield p
            finally:
                p.down()
                assert p.leftovers() == [], "down -v left these behind"
    except EngineMissing as exc:
        pytest.skip(str(exc))


# -- what the compose tests ask of a running project ---------------------------------


def health(p: Project, container: str) -> str:
    return p.inspect(container, "{{.State.Health.Status}}")


def wait_health(
    p: Project, containers: list[str], want: str = "healthy", timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while not all(health(p, c) == want for c in containers):
        states = {c: health(p, c) for c in containers}
        assert time.monotonic() < deadline, f"not all {want} in {timeout}s: {states}"
        time.sleep(1)


def get_json(url: str, cafile: Path | None = None) -> Any:
    """GET JSON (over HTTPS trusting ``cafile`` when given)."""
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        return json.load(response)


def post_json(url: str, body: Any, cafile: Path | None = None, **headers: str) -> Any:
    """POST JSON (over HTTPS trusting ``cafile`` when given)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        return json.load(response)


def bearer_token(p: Project, agent: str) -> str:
    """An OAuth access token for ``agent`` from the gateway's ``POST /oauth/token``
    (the client-credentials grant), as the operator: the token client the
    `secrets` service made a secret for."""
    secret = json.loads((p.secrets / "token-clients.json").read_text())["operator"]
    basic = base64.b64encode(f"operator:{secret}".encode()).decode()
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "scope": f"agent:{agent}"})
    request = urllib.request.Request(
        p.url("GATEWAY_PORT", "/oauth/token", "https"),
        data=form.encode(),
        headers={"Authorization": f"Basic {basic}"},
    )
    context = ssl.create_default_context(cafile=str(p.ca))
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        return str(json.load(response)["access_token"])


def capability_token(p: Project, target: str, capabilities: list[str]) -> str:
    """An A2ACP capability token for ``target`` (a service: ``router``,
    ``registry``) from the gateway's ``POST /auth/token``, as the operator."""
    secret = json.loads((p.secrets / "token-clients.json").read_text())["operator"]
    basic = base64.b64encode(f"operator:{secret}".encode()).decode()
    body = {"target_agent_id": target, "requested_capabilities": capabilities}
    url = p.url("GATEWAY_PORT", "/auth/token", "https")
    return str(post_json(url, body, p.ca, Authorization=f"Basic {basic}")["token"])


def a2a_send(text: str) -> dict[str, Any]:
    """An A2A 0.3 ``message/send`` of one text part, as any A2A client sends it."""
    message = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
