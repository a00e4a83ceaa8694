"""compose/docker-compose.yml on a real container engine, in the offline profile
(compose/offline.yml: no registry is reachable here): the images built from a
local base, `up`, health, and from the host: the broker secured by default (TLS
and JWT users from the `secrets` service; an outsider is refused), the 3-node
JetStream cluster, the agents in the registry, over the bus, through the gateway
(HTTPS, a capability token) and the router, their spans in Phoenix; durable flows
that lose and repeat nothing when a NATS node container is killed and when a
durable agent's container is SIGKILLed and restarted by its policy; agent
containers that check their own process, and come back after a crash; a
graceful stop; then `down -v` leaves nothing of the project behind.

Skipped, with the reason, where no engine runs and none can be started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from _docker import (
    FIXTURES,
    Project,
    a2a_send,
    bearer_token,
    capability_token,
    get_json,
    health,
    post_json,
    running,
    wait_health,
)
from pydantic import BaseModel

from actorbus import (
    Actor,
    ActorSystem,
    AskTimeoutError,
    ConnectionLostError,
    ConnectOptions,
    DurableSettings,
    handler,
)
from actorbus.cli import main as cli
from actorbus.security.secure_broker import issued_connect_options
from actorbus.services.trace_ui import PhoenixClient

AGENTS = ("registry", "gateway", "router", "echo", "typist")
SERVICES = ("secrets", "nats-1", "nats-2", "nats-3", *AGENTS, "phoenix")
RUNNING = [s for s in SERVICES if s != "secrets"]  # it ran once and exited


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    # The host holds what an operator copies out to reach the secured broker:
    # the deployment's CA, the `client` member's home, the gateway's token
    # clients, and the authority to issue more.
    with running(tmp_path_factory, Project, *SERVICES) as p:
        yield p


def all_containers(p: Project) -> list[str]:
    return [*(p.container(s) for s in RUNNING), p.container("echo", 2)]


def urls(p: Project) -> list[str]:
    return [f"nats://127.0.0.1:{p.ports[f'NATS_{n}_PORT']}" for n in (1, 2, 3)]


def eventually(what: str, check: Any, timeout: float = 30) -> Any:
    """``check()``'s first truthy value, polled for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.5)
    return value


@pytest.mark.timeout(300, func_only=True)
def test_the_stack_comes_up_healthy_and_serves_from_the_host(project: Project) -> None:
    p = project
    wait_health(p, all_containers(p))

    async def over_the_bus() -> None:
        with pytest.raises(ConnectionLostError):  # no credentials, no CA: refused at once
            await ActorSystem.connect(urls(p), connect_options=ConnectOptions(servers=urls(p)))
        member = issued_connect_options(p.secrets / "homes" / "client" / "ab", "test")
        assert member is not None
        nc = await nats.connect(
            servers=urls(p),
            connect_timeout=5,
            user_credentials=member.credentials_file,
            tls=member.tls,
            inbox_prefix=member.inbox_prefix,
        )
        try:  # one cluster of three, and the registry's bucket is on every node
            info = await nc.jetstream().stream_info("KV_actorbus-ab-registry")
            assert info.config.num_replicas == 3
            assert info.cluster is not None
            assert len(info.cluster.replicas or []) == 2
            assert all(r.current for r in info.cluster.replicas or [])
        finally:
            await nc.close()
        async with ActorSystem.connect(urls(p), registry=False) as system:
            for i in range(10):
                ping = {"text": f"hi {i}"}  # plain data back: the examples' models may
                pong = await system.ask(  # be known in this process (imported by others)
                    "echo/1", ping, intent="Ping", timeout=10, returns=dict
                )
                assert pong == {"text": f"hi {i}", "by": "echo/1"}
            dictate = {"text": "one two three", "delay_s": 0}
            items = system.stream("typist/1", dictate, intent="Dictate", timeout=10, returns=dict)
            async with contextlib.aclosing(items):
                assert [w["text"] async for w in items] == ["one", "two", "three"]

    asyncio.run(over_the_bus())

    def listed() -> list[str] | None:
        services = get_json(p.url("REGISTRY_PORT", "/services", "https"), p.ca)  # secured: HTTPS
        names = sorted(s["name"] for s in services)
        return names if names.count("echo") == 2 and "typist" in names else None

    eventually("the registry lists both echo replicas and the typist", listed)

    gateway = p.url("GATEWAY_PORT", scheme="https")  # secured: HTTPS
    card = get_json(f"{gateway}/a2a/typist/.well-known/agent-card.json", p.ca)
    assert card["name"] == "typist"
    with pytest.raises(urllib.error.HTTPError) as no_token:  # refused without a token
        post_json(f"{gateway}/a2a/echo", a2a_send("through the gateway"), p.ca)
    assert no_token.value.code == 401
    assert json.load(no_token.value)["error"]["data"]["actorbusCode"] == "E_AUTH"
    token = bearer_token(p, "echo")
    send = a2a_send("through the gateway")
    task = post_json(f"{gateway}/a2a/echo", send, p.ca, Authorization=f"Bearer {token}")["result"]
    assert task["status"]["state"] == "completed", task
    assert "through the gateway" in json.dumps(task["artifacts"])

    route = {"skill": "Ping", "policy": "first-match"}
    router = p.url("ROUTER_PORT", "/route", "https")
    with pytest.raises(urllib.error.HTTPError) as no_token:  # it names the actors: a token
        post_json(router, route, p.ca)
    assert no_token.value.code == 401
    router_token = capability_token(p, "router", ["router:route"])
    decision = post_json(router, route, p.ca, Authorization=f"Bearer {router_token}")
    assert decision["destination"] == "echo", decision  # the type: NATS picks a replica

    phoenix = PhoenixClient(p.url("PHOENIX_PORT"))

    def flow_traced() -> bool:  # the A2A call's trace: the gateway's span and the actor's
        for trace in phoenix.trace_ids("actorbus"):
            services = {span.service for span in phoenix.spans(trace, "actorbus")}
            if {"gateway", "echo"} <= services:
                return True
        return False

    eventually("the A2A call's spans from the gateway and echo in Phoenix", flow_traced)


class Entry(BaseModel):
    n: int


class Ledger(Actor):
    """Durable delivery is at least once: an ack that dies with its node brings the
    message back. An idempotent handler with idempotency keys turns that into
    exactly once, which is what this ledger proves through the kill."""

    durable = True
    idempotent = True
    seen: list[int] = []
    changed = asyncio.Event()

    @handler
    async def add(self, entry: Entry) -> None:
        Ledger.seen.append(entry.n)
        Ledger.changed.set()

    @classmethod
    def reset(cls) -> None:
        """Nothing seen; an event of the running loop (each test runs its own)."""
        cls.seen.clear()
        cls.changed = asyncio.Event()

    @classmethod
    async def holds(cls, count: int, timeout: float) -> None:
        """Wait until ``count`` different entries arrived."""
        async with asyncio.timeout(timeout):
            while len(set(cls.seen)) < count:
                cls.changed.clear()
                await cls.changed.wait()

    @classmethod
    def repeated(cls) -> list[int]:
        return sorted({n for n in cls.seen if cls.seen.count(n) > 1})


async def tell_entries(
    system: ActorSystem, address: str, numbers: range, timeout: float | None = None
) -> None:
    """Durable tells of ``Entry(n)``, each under its own idempotency key."""
    for n in numbers:
        await system.tell(
            address, Entry(n=n), durable=True, idempotency_key=f"entry-{n}", timeout=timeout
        )


def issue_member(p: Project, home: Path, actor_type: str) -> Path:
    """A member hosting ``actor_type``, issued from the deployment's authority as
    an operator adding one would (its files readable by the image's user)."""
    issue = [
        *("security", "issue", "--authority", str(p.secrets / "authority")),
        *("--out", str(home / "ab"), "--type", actor_type),
        *("--broker", str(p.secrets / "broker")),
    ]
    assert cli(issue) == 0
    return home


@pytest.mark.timeout(300, func_only=True)
def test_a_durable_flow_loses_nothing_when_a_nats_node_container_is_killed(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = project
    key = uuid.uuid4().hex[:8]
    monkeypatch.setenv("ACTORBUS_HOME", str(issue_member(p, tmp_path / "ledger-home", "ledger")))

    async def flow() -> None:
        Ledger.reset()
        async with ActorSystem.connect(
            urls(p), durable=DurableSettings(replicas=3), registry=False
        ) as system:
            await system.spawn(Ledger, key)
            await tell_entries(system, f"ledger/{key}", range(30))
            kill = ["docker", "kill", p.container("nats-2")]
            killed = await asyncio.to_thread(subprocess.run, kill, capture_output=True)
            assert killed.returncode == 0, killed.stderr
            # sends go on while the cluster elects new leaders
            await tell_entries(system, f"ledger/{key}", range(30, 60), timeout=30)
            await Ledger.holds(60, timeout=60)
        assert not Ledger.repeated(), f"handled twice: {Ledger.repeated()}"

    asyncio.run(flow())
    subprocess.run(["docker", "start", p.container("nats-2")], check=True, capture_output=True)
    wait_health(p, [p.container("nats-2")])


@pytest.mark.timeout(300, func_only=True)
def test_a_durable_agent_container_killed_mid_flow_loses_and_repeats_nothing(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable, idempotent agent in a container of its own (restart: unless-
    stopped), relaying entries to a ledger on the host, is SIGKILLed in the
    middle of 60: its restart policy brings it back, its queue hands it the
    rest, and the ledger gets every entry once."""
    p = project
    key = uuid.uuid4().hex[:8]
    relay_home = issue_member(p, tmp_path / "relay-home", "relay")
    subprocess.run(["chown", "-R", "10001:10001", str(relay_home)], check=True)
    monkeypatch.setenv("ACTORBUS_HOME", str(issue_member(p, tmp_path / "ledger-home", "ledger")))
    relay = p.container("relay")  # named like the project's, so leftovers() sees it
    nodes = ",".join(f"nats://nats-{n}:4222" for n in (1, 2, 3))
    started = subprocess.run(
        [
            *("docker", "run", "-d", "--name", relay, "--network", f"{p.name}_default"),
            *("--restart", "unless-stopped", "-e", "ACTORBUS_HOME=/relay-home"),
            *("-v", f"{relay_home}:/relay-home:ro", "-v", f"{FIXTURES / 'agents'}:/app/agents:ro"),
            p.image,
            *("actorbus", "run", "agents.relay:Relay", "--url", nodes, "--key", key),
            *("--js-replicas", "3"),
        ],
        capture_output=True,
        text=True,
    )
    assert started.returncode == 0, started.stderr
    try:
        eventually("the relay ready", lambda: "ready" in logs(relay), timeout=60)

        async def flow() -> None:
            Ledger.reset()
            async with ActorSystem.connect(
                urls(p), durable=DurableSettings(replicas=3), registry=False
            ) as system:
                await system.spawn(Ledger, key)
                await tell_entries(system, f"relay/{key}", range(60))
                await Ledger.holds(20, timeout=60)
                restarts = int(p.inspect(relay, "{{.RestartCount}}"))
                os.kill(int(p.inspect(relay, "{{.State.Pid}}")), signal.SIGKILL)
                await Ledger.holds(60, timeout=120)
                assert int(p.inspect(relay, "{{.RestartCount}}")) > restarts, "not restarted"
            assert not Ledger.repeated(), f"handled twice: {Ledger.repeated()}"

        asyncio.run(flow())
    finally:
        subprocess.run(["docker", "rm", "-f", relay], capture_output=True)


def logs(container: str) -> str:
    done = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
    return done.stdout + done.stderr


@pytest.mark.timeout(300, func_only=True)
def test_each_agent_container_checks_its_own_process(project: Project) -> None:
    """A wedged replica (its process stopped: no event loop turns) turns
    unhealthy while its sibling, which answers the same address, stays healthy;
    a check that asked the shared address passed for both."""
    p = project
    wedged, sibling = p.container("echo", 1), p.container("echo", 2)
    pid = int(p.inspect(wedged, "{{.State.Pid}}"))
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_health(p, [wedged], "unhealthy", timeout=60)
        assert health(p, sibling) == "healthy"
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_health(p, [wedged], timeout=60)


@pytest.mark.timeout(300, func_only=True)
def test_a_crashed_agent_container_is_restarted_by_its_policy(project: Project) -> None:
    """SIGKILL of the agent's process from the host (a crash, not `docker stop`):
    `restart: unless-stopped` brings the container back, healthy, while its
    sibling replica keeps answering."""
    p = project
    victim = p.container("echo", 1)
    before = int(p.inspect(victim, "{{.RestartCount}}"))
    os.kill(int(p.inspect(victim, "{{.State.Pid}}")), signal.SIGKILL)

    async def ask_meanwhile() -> None:
        """The sibling answers; an ask the server handed to the dead process
        before it saw the connection close is lost (core NATS, at most once)
        and asked again."""
        async with ActorSystem.connect(urls(p), registry=False) as system:
            async with asyncio.timeout(30):
                while True:
                    try:
                        reply = await system.ask(
                            "echo/1", {"text": "?"}, intent="Ping", timeout=3, returns=dict
                        )
                        break
                    except AskTimeoutError:
                        continue
            assert reply["text"] == "?"

    asyncio.run(ask_meanwhile())
    eventually(
        "a restart", lambda: int(p.inspect(victim, "{{.RestartCount}}")) > before, timeout=90
    )
    wait_health(p, [victim], timeout=90)


@pytest.mark.timeout(300, func_only=True)
def test_stop_is_graceful(project: Project) -> None:
    """`stop` sends SIGTERM: every actorbus process finishes and exits 0."""
    p = project
    p.run("stop", *AGENTS, timeout=120)
    names = [*(p.container(s) for s in AGENTS), p.container("echo", 2)]
    codes = {name: p.inspect(name, "{{.State.ExitCode}}") for name in names}
    assert codes == dict.fromkeys(names, "0"), codes
