"""compose/single.yml, the laptop stack (one NATS node, the registry, the gateway
and the user's agents), on a real engine: a user's own agent module, mounted,
answers over the bus and through the gateway; `down -v` leaves nothing.

Skipped, with the reason, where no engine runs and none can be started.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from _docker import (
    SINGLE_FILE,
    SINGLE_PORTS,
    SINK,
    EngineMissing,
    Project,
    a2a_send,
    engine,
    post_json,
    prepare_offline_build,
    wait_health,
)

from actorbus import ActorSystem

AGENTS = SINK / "agents"  # greeter.py: a user's own module


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    try:
        with engine(log):
            prepare_offline_build()
            p = Project(
                (SINGLE_FILE,),
                SINGLE_PORTS,
                AGENTS_DIR=str(AGENTS),
                AGENTS="agents.greeter:Greeter",
            )
            try:
                p.run("build", "--force-rm")
                p.run("up", "-d")
                yield p
            finally:
                p.run("down", "-v", "--rmi", "all", "--remove-orphans")
                assert p.leftovers() == [], "down -v left these behind"
    except EngineMissing as exc:
        pytest.skip(str(exc))


@pytest.mark.timeout(300)
def test_your_own_agents_on_a_single_node(laptop: Project) -> None:
    p = laptop
    wait_health(p, [p.container(n) for n in ("nats", "registry", "gateway", "agents")])

    async def ask() -> str:
        url = f"nats://127.0.0.1:{p.ports['NATS_PORT']}"
        async with ActorSystem.connect(url, registry=False) as system:
            reply: str = await system.ask("greeter/1", "laptop", timeout=10)
            return reply

    assert asyncio.run(ask()) == "hello laptop, from a container"
    task = post_json(p.url("GATEWAY_PORT", "/a2a/greeter"), a2a_send("gateway"))["result"]
    assert task["status"]["state"] == "completed", task
    assert "hello gateway, from a container" in json.dumps(task["artifacts"])
