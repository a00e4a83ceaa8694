"""compose/: the Dockerfile and docker-compose.yml, tested without a Docker engine.

CI machines run no Docker engine, so a broken compose file would otherwise only
show when someone runs ``docker compose up``. These tests check what a container
run depends on, in two ways:

- statically: the compose file is valid under the Compose specification's JSON
  schema (before and after variable interpolation), every variable has a
  default, every service has a restart policy and (but Jaeger) a healthcheck,
  the NATS nodes form a JetStream cluster with file storage on named volumes,
  the actorbus services send spans to Jaeger, the Dockerfile builds a slim
  non-root image from exactly what its ``.dockerignore`` lets in;
- live: every service whose command this machine can run is started as a local
  process with the compose file's own arguments, environment and NATS config
  file, changed only where a container and loopback must differ (addresses,
  ports, mount paths; see ``tests/_compose.py``), in ``depends_on`` order, each
  wave once its healthchecks (the compose file's, run here) pass. Then an
  ActorSystem on the three-node cluster asks the example agents, the
  registry's HTTP API lists them, and JetStream places a 3-replica stream.

Jaeger all-in-one cannot run without Docker: its block is checked statically,
and in the live run a small OTLP/HTTP receiver stands in at its address, which
also shows that the services' tracing variables reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from _compose import (
    COMPOSE_DIR,
    COMPOSE_FILE,
    DOCKERFILE,
    DOCKERIGNORE,
    REPO,
    SCHEMA_FILE,
    LocalDeployment,
    Loopback,
    Service,
    load,
    load_raw,
    references,
    run_locally,
    schema_errors,
    services,
)
from aiohttp import web
from nats.js.api import StorageType, StreamConfig

from actorbus import ActorSystem

NATS_NODES = ("nats-1", "nats-2", "nats-3")
ACTORBUS_ROLES = ("registry", "gateway", "router", "echo", "typist")
JAEGER = "jaeger"


def actorbus_roles(svcs: dict[str, Service]) -> list[str]:
    """Every service running the actorbus image, so a service added later (the
    gateway) gets the same checks without editing this file."""
    roles = [name for name, svc in svcs.items() if svc.builds_actorbus_image]
    assert set(roles) >= set(ACTORBUS_ROLES), roles
    return roles


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    """The compose model with every variable at its default."""
    return load()


@pytest.fixture(scope="module")
def svcs(doc: dict[str, Any]) -> dict[str, Service]:
    return services(doc)


# -- the file itself -----------------------------------------------------------


def test_schema_is_the_draft7_compose_spec() -> None:
    """The copy in compose/ is what a clean clone validates against: make sure it
    is the Compose spec's schema and that jsonschema picks Draft 7 for it."""
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["$id"] == "compose_spec.json"
    assert "draft-07" in schema["$schema"]


def test_compose_file_is_valid_under_the_compose_spec() -> None:
    """Docker Compose validates after interpolation; the file as written must be
    valid too (a reference may not stand where the schema wants a number)."""
    assert schema_errors(load_raw()) == []
    assert schema_errors(load()) == []
    overridden = load({"ECHO_REPLICAS": "5", "ACTORBUS_NAMESPACE": "team-a"})
    assert schema_errors(overridden) == []


def test_every_variable_has_a_default() -> None:
    """``docker compose up`` must work with no .env file and no variables set."""
    missing = sorted({r.name for r in references(load_raw()) if r.default is None})
    assert missing == [], f"variables without a default: {missing}"


def test_variables_configure_the_services() -> None:
    """Env-var configuration: the documented variables reach the commands."""
    custom = services(
        load(
            {
                "ACTORBUS_NAMESPACE": "team-a",
                "ACTORBUS_NATS_URLS": "nats://broker:4222",
                "ACTORBUS_JS_REPLICAS": "5",
                "ECHO_REPLICAS": "4",
                "REGISTRY_PORT": "9000",
            }
        )
    )
    for role in actorbus_roles(custom):
        cmd = custom[role].command
        assert cmd[cmd.index("--namespace") + 1] == "team-a", role
    assert "nats://broker:4222" in custom["echo"].command
    echo = custom["echo"].command
    assert echo[echo.index("--js-replicas") + 1] == "5"
    assert custom["echo"].replicas == 4
    assert custom["registry"].published == [("127.0.0.1:9000", 8470)]


def test_services_restart_and_check_their_health(svcs: dict[str, Service]) -> None:
    """Every service restarts by itself; every one but Jaeger (no HTTP client in
    its image, nothing waits for it) has a healthcheck; every service_healthy
    dependency has one to wait for."""
    assert set(svcs) >= {*NATS_NODES, *ACTORBUS_ROLES, JAEGER}
    for name, svc in svcs.items():
        assert svc.spec.get("restart") in ("unless-stopped", "always"), name
        if name != JAEGER:
            assert svc.healthcheck is not None, name
        for dep, condition in svc.depends_on.items():
            assert dep in svcs, (name, dep)
            if condition == "service_healthy":
                assert svcs[dep].healthcheck is not None, (name, dep)


def test_ports_are_declared_and_replicas_publish_none(svcs: dict[str, Service]) -> None:
    """``expose:`` lists every port a service listens on (the live test assigns
    loopback ports from it); published ports bind to loopback by default; a
    replicated service publishes nothing (its replicas would collide)."""
    for name, svc in svcs.items():
        for host, container in svc.published:
            assert container in svc.expose, (name, container)
            assert host.startswith("127.0.0.1:"), (name, host)
        if svc.replicas > 1:
            assert svc.published == [], name
    assert svcs["echo"].replicas >= 2  # the example agent runs replicated


def test_nats_nodes_form_a_jetstream_cluster(svcs: dict[str, Service]) -> None:
    """Three nodes, one config file, each with its own name and named volume at
    the JetStream store, routes to all three, fsync on every write."""
    conf = COMPOSE_DIR / "nats-cluster.conf"
    text = conf.read_text()
    assert re.search(r"^\s*sync_interval:\s*always\s*$", text, re.M)
    assert re.search(r"^\s*store_dir:\s*\$NATS_STORE_DIR\b", text, re.M)
    names, volumes = set(), set()
    for node in NATS_NODES:
        svc = svcs[node]
        env = svc.environment
        assert svc.command == ["nats-server", "--config", "/etc/nats/actorbus.conf"]
        mounts = {m.target: m for m in svc.mounts}
        conf_mount = mounts["/etc/nats/actorbus.conf"]
        assert (conf_mount.kind, conf_mount.read_only) == ("bind", True)
        assert (COMPOSE_DIR / conf_mount.source).resolve() == conf
        store = mounts[env["NATS_STORE_DIR"]]
        assert store.kind == "volume"
        names.add(env["NATS_SERVER_NAME"])
        volumes.add(store.source)
        routes = re.findall(r"nats-route://([\w-]+):6222", env["NATS_ROUTES"])
        assert sorted(routes) == list(NATS_NODES), node
        assert svc.expose == [4222, 6222, 8222]
        assert "/healthz" in " ".join(svc.healthcheck or [])
        image = str(svc.spec["image"])
        m = re.fullmatch(r"nats:2\.(\d+)-alpine", image)
        assert m is not None, image
        assert int(m[1]) >= 10, image
    assert names == set(NATS_NODES)
    assert len(volumes) == 3


def test_named_volumes_are_declared_and_used(doc: dict[str, Any]) -> None:
    used = {m.source for svc in services(doc).values() for m in svc.mounts if m.kind == "volume"}
    assert used == set(doc.get("volumes") or {})


def test_actorbus_services_share_one_image_and_send_spans_to_jaeger(
    svcs: dict[str, Service],
) -> None:
    """One image for every role, built from the repository root; each role names
    itself for tracing and exports OTLP/HTTP to Jaeger; all share a namespace."""
    namespaces = set()
    for role in actorbus_roles(svcs):
        svc = svcs[role]
        assert svc.builds_actorbus_image, role
        assert svc.spec["build"]["context"] == ".."
        assert svc.spec["image"] == svcs["registry"].spec["image"]
        env = svc.environment
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318", role
        assert env["OTEL_SERVICE_NAME"] == role
        cmd = svc.command
        namespaces.add(cmd[cmd.index("--namespace") + 1])
    assert namespaces == {"ab"}
    assert svcs["registry"].depends_on == dict.fromkeys(NATS_NODES, "service_healthy")
    for agent in ("gateway", "router", "echo", "typist"):
        # after the registry, which creates the registry buckets with --replicas
        assert svcs[agent].depends_on == {"registry": "service_healthy"}


def test_jaeger_receives_otlp_and_serves_its_ui(svcs: dict[str, Service]) -> None:
    """Not run by the live test (no Docker): its block is checked here."""
    jaeger = svcs[JAEGER]
    assert str(jaeger.spec["image"]).startswith("jaegertracing/all-in-one:")
    assert jaeger.environment["COLLECTOR_OTLP_ENABLED"] == "true"
    assert {p for _, p in jaeger.published} == {16686, 4317, 4318}
    assert {host.rsplit(":", 1)[1] for host, _ in jaeger.published} == {"16686", "4317", "4318"}


def test_dockerfile_is_slim_non_root_and_sees_only_what_it_copies() -> None:
    """Its base image a build argument (python:3.11-slim by default), runtime
    dependencies only, a numeric non-root user, and a build context (the
    repository's .dockerignore) holding exactly the copied paths, each of which
    exists, under the same relative path below WORKDIR /app."""
    lines = [ln.strip() for ln in DOCKERFILE.read_text().splitlines()]
    instructions = [ln for ln in lines if ln and not ln.startswith("#")]
    froms = [ln.split()[1] for ln in instructions if ln.startswith("FROM ")]
    assert froms, "no FROM"
    assert all(f == "${PYTHON_IMAGE}" for f in froms), froms
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in instructions
    users = [ln.split()[1].split(":")[0] for ln in instructions if ln.startswith("USER ")]
    assert users, "no USER: the image would run as root"
    assert users[-1].isdigit(), users  # numeric, so runAsNonRoot can verify it
    assert int(users[-1]) != 0, users
    assert "WORKDIR /app" in instructions
    text = DOCKERFILE.read_text()
    assert 'pip install --no-cache-dir ".[${EXTRAS}]"' in text
    assert "--no-index --find-links wheels" in text  # the offline build
    assert not re.search(r"\.\[(dev|bench)", text)
    copied = []
    for ln in instructions:
        words = ln.split()
        if words[0] == "COPY" and not any(w.startswith("--from") for w in words):
            sources, dest = words[1:-1], words[-1]
            copied += sources
            for src in sources:
                assert (REPO / src).exists(), src
                if dest not in ("./", ".") and src != "compose/wheels":  # build stage only
                    assert dest in (f"./{src}", src), (src, dest)
    ignore = [
        ln.strip()
        for ln in DOCKERIGNORE.read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert ignore[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    assert allowed == set(copied)


# -- the live run ------------------------------------------------------------------


class OtlpReceiver:
    """Stands in for Jaeger's OTLP/HTTP port: keeps the service names of the
    resources in every trace export it receives."""

    def __init__(self) -> None:
        self.service_names: set[str] = set()

    async def handle(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        body = await request.read()
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for spans in export.resource_spans:
            for attr in spans.resource.attributes:
                if attr.key == "service.name":
                    self.service_names.add(attr.value.string_value)
        return web.Response(body=b"", content_type="application/x-protobuf")


@contextlib.asynccontextmanager
async def otlp_receiver(port: int) -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.handle)
    app.router.add_post("/v1/metrics", _accepted)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield receiver
    finally:
        await runner.cleanup()


async def _accepted(_request: web.Request) -> web.Response:
    return web.Response(body=b"", content_type="application/x-protobuf")


def _get_json(url: str) -> tuple[Any, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read()), dict(resp.headers)


async def registered(registry: str, want: dict[str, int], timeout: float) -> dict[str, int]:
    """Follow the registry's blocking queries until each name in ``want`` has at
    least that many healthy instances (or the time is up); returns the counts."""
    index = "0"
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while True:
        url = f"{registry}/services?index={index}&wait=2s"
        body, headers = await asyncio.to_thread(_get_json, url)
        counts = {}
        for record in body:
            if record.get("health_status", "healthy") == "healthy":
                counts[record["name"]] = counts.get(record["name"], 0) + 1
        if all(counts.get(n, 0) >= k for n, k in want.items()) or time.monotonic() > deadline:
            return counts
        index = headers.get("X-Registry-Index", index)


def _delivered_per_connection(monitor_urls: list[str], subject: str) -> list[int]:
    """For each client connection (over every node) subscribed to ``subject``:
    how many messages its subscriptions to it were given."""
    out = []
    for url in monitor_urls:
        body, _ = _get_json(f"{url}/connz?subs=detail&limit=1024")
        for conn in body.get("connections") or []:
            subs = conn.get("subscriptions_list_detail") or []
            mine = [s for s in subs if s.get("subject") == subject]
            if mine:
                out.append(sum(int(s.get("msgs", 0)) for s in mine))
    return out


async def test_compose_services_run_as_local_processes(tmp_path: Path) -> None:
    """The compose file's commands, run here, make a working deployment.

    Started in depends_on order, each as compose has it, changed only for
    loopback: three nats-servers with compose/nats-cluster.conf (the compose
    environment with loopback addresses and a temp store), the registry, the
    example agents with their replicas. Readiness is the ``ready`` line of the
    actorbus processes and each service's own healthcheck, run here. Jaeger is
    skipped (it needs Docker); an OTLP/HTTP receiver listens at its port.
    Then, over the cluster: (a) the agents answer, the echo address served by
    both replicas; (b) the registry's HTTP API lists them; (c) JetStream is a
    3-node cluster that places a 3-replica stream, and the registry's bucket
    has the replicas the compose file asks for. Finally every process stops
    cleanly on SIGTERM, and the agents' spans reached the Jaeger address under
    their OTEL_SERVICE_NAME.
    """
    lb = Loopback(load(), tmp_path)
    svcs = lb.services
    ns = svcs["echo"].command[svcs["echo"].command.index("--namespace") + 1]
    echo_replicas = svcs["echo"].replicas
    async with otlp_receiver(lb.port(JAEGER, 4318)) as otlp:
        async with run_locally(lb) as dep:
            await _check_deployment(dep, ns, echo_replicas)
        # SIGTERM, which `docker compose stop` sends, stops every process cleanly
        # (exit 0, not the SIGKILL that follows 5 s later)
        codes = {p.label: p.proc.returncode for p in dep.processes}
        assert codes == dict.fromkeys(codes, 0), codes
        # spans are flushed when the processes exit, which they now did
        assert {"echo", "typist"} <= otlp.service_names, otlp.service_names


async def _check_deployment(dep: LocalDeployment, ns: str, echo_replicas: int) -> None:
    lb = dep.loopback
    assert dep.skipped.keys() == {JAEGER}, dep.skipped
    assert dep.waves[0] == list(NATS_NODES)
    assert dep.waves[1] == ["registry"]
    assert len(dep.of("echo")) == echo_replicas
    # every service's healthcheck passed here, for every replica
    expected = {(p.service, p.replica) for p in dep.processes}
    assert set(dep.healthy) == expected
    # the nats nodes really run the compose config file
    conf = str(COMPOSE_DIR / "nats-cluster.conf")
    for node in NATS_NODES:
        assert dep.of(node)[0].argv[1:] == ["--config", conf]

    urls = [lb.url(node, 4222, "nats") for node in NATS_NODES]
    monitors = [lb.url(node, 8222, "http") for node in NATS_NODES]
    # the agents' healthcheck can fail too: nobody serves nobody/1
    assert await _healthcheck_exit(["ask", "nobody/1", "--url", urls[0], "--namespace", ns]) == 1
    system = await ActorSystem.connect(urls, namespace=ns, registry=False)
    try:
        # (a) the example agents answer; echo/1 is served by every echo replica
        # (one queue group: 40 asks all landing on one of two replicas would be
        # a 1 in 2^39 chance)
        for i in range(40):
            reply = await system.ask(
                "echo/1", {"text": f"hi {i}"}, intent="Ping", timeout=5, returns=dict
            )  # (plain data: examples.echo's models may be known in this process)
            assert reply == {"text": f"hi {i}", "by": "echo/1"}
        words = [
            w["text"]
            async for w in system.stream(
                "typist/1",
                {"text": "one two three", "delay_s": 0},
                intent="Dictate",
                timeout=5,
                returns=dict,
            )
        ]
        assert words == ["one", "two", "three"]
        delivered = await asyncio.to_thread(_delivered_per_connection, monitors, f"{ns}.a.echo.1")
        assert len(delivered) == echo_replicas, delivered  # one connection per process
        assert all(n > 0 for n in delivered), delivered  # each replica handled asks

        # (b) the registry's HTTP API lists the agents (announced by each process)
        registry = lb.url("registry", 8470, "http")
        want = {"echo": echo_replicas, "typist": 1}
        counts = await registered(registry, want, timeout=10)
        assert {n: counts.get(n, 0) for n in want} == want, counts

        # (d) the gateway serves the agents to outside A2A clients
        gateway = lb.url("gateway", 8080, "http")
        card, _ = await asyncio.to_thread(
            _get_json, f"{gateway}/a2a/typist/.well-known/agent-card.json"
        )
        assert card["name"] == "typist"
        reply = await asyncio.to_thread(_a2a_send, f"{gateway}/a2a/echo", "hello")
        assert reply["result"]["status"]["state"] == "completed", reply

        # (e) the router picks among the echo agents the registry lists, over HTTP
        router = lb.url("router", 8490, "http")
        decision = await asyncio.to_thread(
            _post_json, f"{router}/route", {"skill": "Ping", "policy": "first-match"}
        )
        assert decision["destination"] == "echo", decision  # the type: NATS picks a replica
        pong = await system.ask(decision["destination"], {"text": "routed"}, intent="Ping")
        assert getattr(pong, "text", None) == "routed" or pong["text"] == "routed"

        # (c) JetStream is one 3-node cluster and places replicated streams
        for url in monitors:
            jsz, _ = await asyncio.to_thread(_get_json, f"{url}/jsz")
            assert jsz["meta_cluster"]["cluster_size"] == 3
        await _check_replicated_stream(urls, ns)
    finally:
        await system.close(timeout=2.0)


def _a2a_send(url: str, text: str) -> Any:
    """One A2A 0.3 message/send (no A2A-Version header), answered in full."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "m-1",
                "role": "user",
                "parts": [{"kind": "text", "text": text}],
            }
        },
    }
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def _post_json(url: str, body: Any) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


async def _healthcheck_exit(args: list[str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(COMPOSE_DIR / "healthcheck.py"),
        "--timeout",
        "2",
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(proc.wait(), 15)


async def _check_replicated_stream(urls: list[str], ns: str) -> None:
    nc = await nats.connect(servers=urls, connect_timeout=2, allow_reconnect=False)
    try:
        js = nc.jetstream()
        bucket = await js.stream_info(f"KV_actorbus-{ns}-registry")
        assert bucket.config.num_replicas == 3  # --replicas ${ACTORBUS_JS_REPLICAS:-3}
        info = await js.add_stream(
            StreamConfig(
                name="COMPOSE_R3",
                subjects=["compose.r3"],
                num_replicas=3,
                storage=StorageType.FILE,
            )
        )
        try:
            assert info.cluster is not None
            assert info.cluster.leader
            assert len(info.cluster.replicas or []) == 2
            ack = await js.publish("compose.r3", b"stored on three nodes")
            assert ack.seq == 1
        finally:
            await js.delete_stream("COMPOSE_R3")
    finally:
        await nc.close()


def test_compose_path_is_the_documented_one() -> None:
    """The README and the issue say ``docker compose -f compose/docker-compose.yml up``."""
    assert COMPOSE_FILE.relative_to(REPO).as_posix() == "compose/docker-compose.yml"
