"""Leases in a KV bucket and the leader election built on them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest

from actorbus.bus.leases import LeaderElection, LeaseBucket, LeaseLostError, lease_key
from actorbus.bus.server import EmbeddedServer

TTL = 0.6
# For a test whose leader must not miss a renewal: each is given a third of the
# ttl, and under a full test run a synced write on the 2-core machine once took
# longer than 0.2 s (the leader stepped down and took over again).
STEADY_TTL = 2.0


async def bucket(nats_server: EmbeddedServer, ns: str, ttl: float) -> AsyncIterator[LeaseBucket]:
    nc = await nats.connect(nats_server.url)
    try:
        yield await LeaseBucket.open(nc.jetstream(), f"actorbus-{ns}-leases", ttl)
    finally:
        await nc.close()


@pytest.fixture
async def leases(nats_server: EmbeddedServer, ns: str) -> AsyncIterator[LeaseBucket]:
    async for made in bucket(nats_server, ns, TTL):
        yield made


@pytest.fixture
async def steady_leases(nats_server: EmbeddedServer, ns: str) -> AsyncIterator[LeaseBucket]:
    async for made in bucket(nats_server, ns, STEADY_TTL):
        yield made


async def test_one_holder_at_a_time(leases: LeaseBucket) -> None:
    k = lease_key("echo", "user 1")
    a = await leases.acquire(k, "system-a")
    assert a is not None
    assert a.holder == "system-a"
    assert await leases.acquire(k, "system-b") is None
    assert await leases.holder(k) == "system-a"
    renewed = await leases.renew(a)
    assert renewed.revision > a.revision
    # The same holder acquiring again (a restart within ttl) adopts its lease.
    adopted = await leases.acquire(k, "system-a")
    assert adopted is not None
    assert adopted.revision > renewed.revision
    with pytest.raises(LeaseLostError):
        await leases.renew(renewed)  # superseded by the adoption
    assert await leases.release(adopted)
    assert await leases.holder(k) is None
    b = await leases.acquire(k, "system-b")
    assert b is not None
    assert not await leases.release(adopted)  # not ours any more
    assert await leases.holder(k) == "system-b"


async def test_an_unrenewed_lease_expires_and_its_renewal_fails(leases: LeaseBucket) -> None:
    k = lease_key("leader")
    a = await leases.acquire(k, "a")
    assert a is not None
    t = time.monotonic()
    while (b := await leases.acquire(k, "b")) is None:
        assert time.monotonic() - t < TTL + 3.0, "the lease never expired"
        await asyncio.sleep(0.05)
    assert time.monotonic() - t >= TTL * 0.8
    assert b.holder == "b"
    with pytest.raises(LeaseLostError, match="'a' lost"):
        await leases.renew(a)


async def test_renewing_keeps_the_lease(leases: LeaseBucket) -> None:
    k = lease_key("kept")
    lease = await leases.acquire(k, "a")
    assert lease is not None
    for _ in range(6):  # two ttls, renewing every ttl/3
        await asyncio.sleep(TTL / 3)
        lease = await leases.renew(lease)
        assert await leases.acquire(k, "b") is None


async def test_leader_election_fails_over(steady_leases: LeaseBucket) -> None:
    leases, ttl = steady_leases, STEADY_TTL
    events: list[str] = []

    def candidate(name: str) -> LeaderElection:
        async def elected() -> None:
            events.append(f"{name}+")

        async def lost() -> None:
            events.append(f"{name}-")

        return LeaderElection(leases, "leader", name, on_elected=elected, on_lost=lost)

    a, b = candidate("a"), candidate("b")
    await a.start()
    await b.start()
    try:
        assert a.is_leader
        assert not b.is_leader
        assert events == ["a+"]
        await asyncio.sleep(ttl * 1.5)  # a keeps renewing; b stays a follower
        assert a.is_leader
        assert not b.is_leader
        t = time.monotonic()
        await a.stop()  # releases: b need not wait out the ttl
        assert await b.wait_elected(ttl * 2)
        assert time.monotonic() - t < ttl
        assert events == ["a+", "a-", "b+"]
        assert await leases.holder("leader") == "b"
    finally:
        await a.stop()
        await b.stop()
    assert events[-1] == "b-"


async def test_a_leader_that_stops_renewing_is_replaced(leases: LeaseBucket) -> None:
    a = LeaderElection(leases, "leader", "a")
    b = LeaderElection(leases, "leader", "b")
    await a.start()
    await b.start()
    try:
        assert a.is_leader
        assert a._task is not None
        a._task.cancel()  # a freezes: no renewals, no release
        t = time.monotonic()
        assert await b.wait_elected(TTL * 3)
        assert TTL * 0.5 <= time.monotonic() - t <= TTL * 2.5
    finally:
        await a.stop()
        await b.stop()
