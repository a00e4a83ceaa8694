"""A 3-node cluster on loopback with R3 streams: losing a node loses no durable message."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from test_durable import Entry, spawn_ledger

from actorbus import ActorBusError, ActorSystem
from actorbus.bus.cluster import EmbeddedCluster
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings

R3 = DurableSettings(replicas=3, backoff=(0.05, 0.1), ack_wait=5.0)


@pytest.fixture(scope="module")
def cluster() -> Any:
    with EmbeddedCluster(3) as c:
        yield c


async def send_until_stored(system: ActorSystem, n: int, deadline: float) -> None:
    while True:
        try:
            await system.tell("ledger/r3", Entry(n=n), durable=True, timeout=2)
            return
        except (ActorBusError, TimeoutError):
            assert time.monotonic() < deadline, f"entry {n} could not be stored"
            await asyncio.sleep(0.1)  # bounded retry while the cluster elects leaders


async def test_a_node_killed_mid_run_loses_nothing(cluster: EmbeddedCluster, ns: str) -> None:
    system = await ActorSystem.connect(
        cluster.urls,
        namespace=ns,
        durable=R3,
        connect_options=ConnectOptions(reconnect_deadline=30.0),
    )
    try:
        deadline = time.monotonic() + 60
        for n in range(100):
            await send_until_stored(system, n, deadline)
        cluster.kill(0)
        for n in range(100, 200):
            await send_until_stored(system, n, deadline)
        progress = await spawn_ledger(system, "r3")
        await progress.reached(200)
        assert sorted(set(progress.seen)) == list(range(200))
        assert progress.seen == sorted(progress.seen)
    finally:
        await system.close(timeout=2)
        cluster.restart(0)
