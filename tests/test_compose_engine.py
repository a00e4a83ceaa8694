"""compose/docker-compose.yml on a real container engine: the images built from a
local base (no registry is reachable here), `up`, health, and from the host: the
3-node JetStream cluster, the registry's agents, an A2A call through the
gateway, a durable flow that loses nothing when a NATS node container is killed,
an agent container that its restart policy brings back after a crash; then
`down -v` leaves nothing of the project behind.

Skipped, with the reason, where no engine runs and none can be started.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from _docker import EngineMissing, Project, engine, prepare_offline_build
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, AskTimeoutError, DurableSettings, handler

SERVICES = ("nats-1", "nats-2", "nats-3", "registry", "gateway", "router", "echo", "typist")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    try:
        with engine(log):
            prepare_offline_build()
            p = Project()
            try:
                p.run("build", "--force-rm")
                p.run("up", "-d", *SERVICES)
                yield p
            finally:
                p.run("down", "-v", "--rmi", "all", "--remove-orphans")
                assert p.leftovers() == [], "down -v left these behind"
    except EngineMissing as exc:
        pytest.skip(str(exc))


def healthy(p: Project, container: str) -> bool:
    return p.inspect(container, "{{.State.Health.Status}}") == "healthy"


def wait_healthy(p: Project, containers: list[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(healthy(p, c) for c in containers):
        states = {c: p.inspect(c, "{{.State.Health.Status}}") for c in containers}
        assert time.monotonic() < deadline, f"not healthy in {timeout}s: {states}"
        time.sleep(1)


def containers(p: Project) -> list[str]:
    names = [p.container(s) for s in SERVICES]
    return [*names, p.container("echo", 2)]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def urls(p: Project) -> list[str]:
    return [f"nats://127.0.0.1:{p.ports[f'NATS_{n}_PORT']}" for n in (1, 2, 3)]


class Entry(BaseModel):
    n: int


class Ledger(Actor):
    durable = True
    seen: list[int] = []
    changed = asyncio.Event()

    @handler
    async def add(self, entry: Entry) -> None:
        Ledger.seen.append(entry.n)
        Ledger.changed.set()


@pytest.mark.timeout(300)
def test_the_stack_comes_up_healthy_and_serves_from_the_host(project: Project) -> None:
    p = project
    wait_healthy(p, containers(p))

    async def check() -> None:
        nc = await nats.connect(servers=urls(p), connect_timeout=5)
        try:  # the cluster formed, and the registry's bucket is on all three nodes
            info = await nc.jetstream().stream_info("KV_actorbus-ab-registry")
            assert info.config.num_replicas == 3
            assert info.cluster is not None
            assert len(info.cluster.replicas or []) == 2
            assert all(r.current for r in info.cluster.replicas or [])
        finally:
            await nc.close()

    asyncio.run(check())
    services = get_json(f"http://127.0.0.1:{p.ports['REGISTRY_PORT']}/services")
    names = sorted(s["name"] for s in services)
    assert names.count("echo") == 2, names  # one listing per replica container
    assert "typist" in names

    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "text", "text": "through the gateway"}],
            }
        },
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{p.ports['GATEWAY_PORT']}/a2a/echo",
        data=json.dumps(send).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        task = json.load(response)["result"]
    assert task["status"]["state"] == "completed", task
    answer = task["artifacts"][0]["parts"][0]
    assert "through the gateway" in json.dumps(answer)


@pytest.mark.timeout(300)
def test_a_durable_flow_loses_nothing_when_a_nats_node_container_is_killed(
    project: Project,
) -> None:
    p = project
    ns = f"d{uuid.uuid4().hex[:8]}"

    async def flow() -> None:
        Ledger.seen.clear()
        async with ActorSystem.connect(
            urls(p), namespace=ns, durable=DurableSettings(replicas=3), registry=False
        ) as system:
            await system.spawn(Ledger, "1")
            for n in range(30):
                await system.tell("ledger/1", Entry(n=n), durable=True)
            kill = ["docker", "kill", p.container("nats-2")]
            killed = await asyncio.to_thread(subprocess.run, kill, capture_output=True)
            assert killed.returncode == 0, killed.stderr
            for n in range(30, 60):  # sends go on while the cluster elects new leaders
                await system.tell("ledger/1", Entry(n=n), durable=True, timeout=30)
            async with asyncio.timeout(60):
                while len(Ledger.seen) < 60:
                    Ledger.changed.clear()
                    await Ledger.changed.wait()
        assert sorted(Ledger.seen) == list(range(60)), "lost or repeated"

    asyncio.run(flow())
    subprocess.run(["docker", "start", p.container("nats-2")], check=True, capture_output=True)
    wait_healthy(p, [p.container("nats-2")])


@pytest.mark.timeout(300)
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
                        reply = await system.ask("echo/1", {"text": "?"}, intent="Ping", timeout=3)
                        break
                    except AskTimeoutError:
                        continue
            assert reply["text"] == "?"

    asyncio.run(ask_meanwhile())
    deadline = time.monotonic() + 90
    while int(p.inspect(victim, "{{.RestartCount}}")) == before:
        assert time.monotonic() < deadline, "not restarted"
        time.sleep(0.5)
    wait_healthy(p, [victim])
