"""compose/single.yml, the laptop stack (one NATS node, the registry, the gateway
and the user's agents), on a real engine: secured as the cluster is (the host
reaches it with the `client` member's home and the CA; the gateway wants a
token); a user's own agent module, mounted, answers over the bus and through the
gateway; `down -v` leaves nothing.

Skipped, with the reason, where no engine runs and none can be started.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
from collections.abc import Iterator

import pytest
from _docker import (
    FIXTURES,
    SINGLE_FILE,
    SINGLE_PORTS,
    Project,
    a2a_send,
    bearer_token,
    post_json,
    running,
    wait_health,
)

from actorbus import ActorSystem

AGENTS = FIXTURES / "agents"  # greeter.py: a user's own module


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    def make() -> Project:
        return Project(
            (SINGLE_FILE,),
            SINGLE_PORTS,
            AGENTS_DIR=str(AGENTS),
            AGENTS="agents.greeter:Greeter",
            AGENT_TYPES="greeter",
        )

    with running(tmp_path_factory, make, phoenix=False) as p:
        yield p


@pytest.mark.timeout(300, func_only=True)
def test_your_own_agents_on_a_single_node(laptop: Project) -> None:
    p = laptop
    wait_health(p, [p.container(n) for n in ("nats", "registry", "gateway", "agents")])

    async def ask() -> str:
        url = f"nats://127.0.0.1:{p.ports['NATS_PORT']}"
        async with ActorSystem.connect(url, registry=False) as system:
            reply: str = await system.ask("greeter/1", "laptop", timeout=10)
            return reply

    assert asyncio.run(ask()) == "hello laptop, from a container"
    url = p.url("GATEWAY_PORT", "/a2a/greeter", "https")
    with pytest.raises(urllib.error.HTTPError) as refused:  # no token: no call
        post_json(url, a2a_send("stranger"), p.ca)
    assert refused.value.code == 401
    token = bearer_token(p, "greeter")
    task = post_json(url, a2a_send("gateway"), p.ca, Authorization=f"Bearer {token}")["result"]
    assert task["status"]["state"] == "completed", task
    assert "hello gateway, from a container" in json.dumps(task["artifacts"])
