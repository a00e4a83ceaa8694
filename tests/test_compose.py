"""compose/: the Dockerfile and docker-compose.yml, read without a container engine.

What a container run depends on, checked statically: the compose file is valid
under the Compose specification's JSON schema (before and after variable
interpolation), every variable has a default, every service has a restart
policy and (but Jaeger) a healthcheck, the NATS nodes form a JetStream cluster
with file storage on named volumes, the actorbus services send spans to Jaeger,
the Dockerfile builds a slim non-root image from exactly what the
``.dockerignore`` lets in; and the healthcheck script fails where it should.

The stack itself runs on a real engine in ``test_compose_engine.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _compose import (
    COMPOSE_DIR,
    COMPOSE_FILE,
    DOCKERFILE,
    DOCKERIGNORE,
    REPO,
    SCHEMA_FILE,
    Service,
    load,
    load_raw,
    references,
    schema_errors,
    services,
)

from actorbus.services.trace_ui import PHOENIX_REQUIREMENT

NATS_NODES = ("nats-1", "nats-2", "nats-3")
ACTORBUS_ROLES = ("registry", "gateway", "router", "echo", "typist")
JAEGER = "jaeger"
SECRETS = "secrets"  # the one-shot init service: the deployment's credentials


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
    """Every service restarts by itself but the one-shot `secrets`; every one
    but `secrets` has a healthcheck; every service_healthy dependency has one to
    wait for."""
    assert set(svcs) >= {*NATS_NODES, *ACTORBUS_ROLES, JAEGER, SECRETS}
    for name, svc in svcs.items():
        if name == SECRETS:
            assert svc.spec.get("restart") == "no"
            continue
        assert svc.spec.get("restart") in ("unless-stopped", "always"), name
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
    """Three nodes, one config file (secured by default: it includes the
    shared settings and what the `secrets` service made), each with its own
    name and named volume at the JetStream store, routes to all three, fsync on
    every write."""
    conf = COMPOSE_DIR / "nats-cluster.conf"
    secured = (COMPOSE_DIR / "nats-secured.conf").read_text()
    assert "include ./nats-cluster.conf" in secured
    assert "include ../../secrets/nats.conf" in secured  # /etc/nats/../../secrets
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
        assert (COMPOSE_DIR / conf_mount.source).resolve() == COMPOSE_DIR / "nats-secured.conf"
        assert (COMPOSE_DIR / mounts["/etc/nats/nats-cluster.conf"].source).resolve() == conf
        assert (mounts["/secrets"].source, mounts["/secrets"].read_only) == (SECRETS, True)
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
        cmd = svc.command
        namespaces.add(cmd[cmd.index("--namespace") + 1])
        if role == SECRETS:  # makes the deployment; runs nothing that traces
            continue
        env = svc.environment
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318", role
        assert env["OTEL_SERVICE_NAME"] == role
        # its own home, from the secrets volume, read-only
        assert env["ACTORBUS_HOME"] == f"/secrets/homes/{role}"
        mounts = {m.target: m for m in svc.mounts}
        assert (mounts["/secrets"].source, mounts["/secrets"].read_only) == (SECRETS, True)
        assert svc.depends_on.get(SECRETS) is None  # after the nodes, which wait for it
    assert namespaces == {"ab"}
    assert svcs["registry"].depends_on == dict.fromkeys(NATS_NODES, "service_healthy")
    for agent in ("gateway", "router", "echo", "typist"):
        # after the registry, which creates the registry buckets with --replicas
        assert svcs[agent].depends_on == {"registry": "service_healthy"}


def test_jaeger_receives_otlp_and_serves_its_ui(svcs: dict[str, Service]) -> None:
    """Jaeger v2 (v1 reached its end of life), OTLP in, its UI and healthcheck."""
    jaeger = svcs[JAEGER]
    assert str(jaeger.spec["image"]).startswith("jaegertracing/jaeger:2.")
    assert {p for _, p in jaeger.published} == {16686, 4317, 4318}
    assert {host.rsplit(":", 1)[1] for host, _ in jaeger.published} == {"16686", "4317", "4318"}
    assert "http://127.0.0.1:13133/status" in (jaeger.healthcheck or [])


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


# -- the healthcheck script (the real run of the stack: test_compose_engine.py) ---


async def _healthcheck_exit(*args: str) -> int:
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


async def test_the_healthcheck_fails_where_it_should(nats_server: Any, tmp_path: Path) -> None:
    """Nobody serves nobody/1; a health file touched lately passes, a stale or
    missing one fails (a wedged `actorbus run` stops touching it)."""
    assert await _healthcheck_exit("ask", "nobody/1", "--url", nats_server.url) == 1
    fresh = tmp_path / "health"
    fresh.touch()
    assert await _healthcheck_exit("file", str(fresh)) == 0
    old = time.time() - 60
    os.utime(fresh, (old, old))
    assert await _healthcheck_exit("file", str(fresh), "--max-age", "10") == 1
    assert await _healthcheck_exit("file", str(tmp_path / "missing")) == 1


def test_compose_path_is_the_documented_one() -> None:
    """The README and the issue say ``docker compose -f compose/docker-compose.yml up``."""
    assert COMPOSE_FILE.relative_to(REPO).as_posix() == "compose/docker-compose.yml"


def test_the_laptop_stack_is_valid_and_needs_no_variables() -> None:
    """compose/single.yml: valid under the Compose specification, every variable
    with a default, four services and the one-shot `secrets`, secured by default,
    the agents checking their own process."""
    single = COMPOSE_DIR / "single.yml"
    assert schema_errors(load_raw(single)) == []
    assert schema_errors(load(path=single)) == []
    missing = sorted({r.name for r in references(load_raw(single)) if r.default is None})
    assert missing == [], f"variables without a default: {missing}"
    svcs = services(load(path=single))
    assert sorted(svcs) == ["agents", "gateway", "nats", "registry", "secrets"]
    # secured by default, as docker-compose.yml is: every role has its own home
    for role in ("agents", "gateway", "registry"):
        assert svcs[role].environment["ACTORBUS_HOME"] == f"/secrets/homes/{role}"
    assert "--token-clients" in svcs["gateway"].command
    assert any("nats-single-secured.conf" in m.source for m in svcs["nats"].mounts)
    assert "--health-file" in " ".join(svcs["agents"].command)


def test_the_offline_profile_is_valid_and_holds_the_phoenix_the_ui_expects() -> None:
    """compose/offline.yml: valid, every variable with a default; every role that
    sends spans sends them to Phoenix (not to the Jaeger it switches off), and
    compose/offline.py builds the Phoenix that actorbus's trace UI installs."""
    offline = COMPOSE_DIR / "offline.yml"
    raw = load_raw(offline)
    assert schema_errors(raw) == []
    missing = sorted({r.name for r in references(raw) if r.default is None})
    assert missing == [], f"variables without a default: {missing}"
    base = services(load())
    senders = {name for name, s in base.items() if "OTEL_EXPORTER_OTLP_ENDPOINT" in s.environment}
    overrides = raw["services"]
    redirected = {
        name
        for name, s in overrides.items()
        if s.get("environment", {}).get("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://phoenix:6006"
    }
    assert senders
    assert redirected == senders
    assert overrides["jaeger"]["profiles"] == ["jaeger"]
    assert "6006" in overrides["phoenix"]["expose"]
    nodes = [name for name in base if name.startswith("nats-")]
    assert all(overrides[n]["image"] == "${ACTORBUS_IMAGE:-actorbus:local}" for n in nodes)
    spec = importlib.util.spec_from_file_location("offline", COMPOSE_DIR / "offline.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.PHOENIX_REQUIREMENT == PHOENIX_REQUIREMENT
