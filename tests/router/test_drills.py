"""Failure drills of the router's destination routing, on a real nats-server:
a slow replica avoided, a dead one cut off and probed back, a hedge answered
once, per-session order kept, overload refused cleanly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from _util import WAIT
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.codecs.errors import NoRespondersError, RemoteError
from actorbus.services.router.client import DestinationRouter
from actorbus.services.router.destinations import (
    ConsistentHash,
    FirstMatch,
    LatencyAware,
    Weighted,
)
from actorbus.services.router.resilience import BulkheadFullError, RetryPolicy
from actorbus.testing import eventually

FAST = RetryPolicy(attempts=3, base_s=0.001, max_s=0.005)


class Job(BaseModel):
    n: int
    hold: float = 0.0  # seconds the handler takes, on top of the replica's delay


class Replica(Actor):
    type_name = "replica"
    seen: dict[str, list[tuple[int, str | None]]]  # address -> (job, idempotency key)

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay = delay
        self.fail = fail

    @handler
    async def work(self, job: Job) -> str:
        Replica.seen.setdefault(self.address, []).append(
            (job.n, self.envelope.context.idempotency_key)
        )
        await asyncio.sleep(self.delay + job.hold)
        if self.fail:
            raise ValueError(f"job {job.n} is bad")
        return f"{self.address}:{job.n}"


@pytest.fixture(autouse=True)
def fresh() -> None:
    Replica.seen = {}


async def hosts(system: ActorSystem, **replicas: dict[str, Any]) -> list[str]:
    for key, kwargs in replicas.items():
        await system.spawn(Replica, key, **kwargs)
    return [f"replica/{k}" for k in replicas]


async def test_a_slow_replica_is_avoided_by_the_latency_aware_policy(
    system: ActorSystem,
) -> None:
    to = await hosts(system, slow={"delay": 0.05}, fast={})
    router = DestinationRouter(system, LatencyAware(), retry=FAST)
    for n in range(30):
        await router.ask(Job(n=n), to=to)
    # each is measured once, then the fast one takes the rest
    assert router.stats.decisions["replica/fast"] >= 28
    assert router.stats.decisions["replica/slow"] <= 2


async def test_a_dead_replica_opens_its_circuit_and_is_probed_back(
    system: ActorSystem,
) -> None:
    to = await hosts(system, a={}, b={})
    router = DestinationRouter(system, FirstMatch(), retry=FAST, failures=2, cooldown=0.3)
    assert await router.ask(Job(n=0), to=to) == "replica/a:0"
    await system.stop_actor("replica/a")
    for n in range(1, 4):  # a fails (no responders), b answers: nothing is lost
        assert await router.ask(Job(n=n), to=to) == f"replica/b:{n}"
    breaker = router.circuit("replica/a")
    assert breaker.state == "open"
    attempts = router.stats.attempts
    assert await router.ask(Job(n=4), to=to) == "replica/b:4"
    assert router.stats.attempts == attempts + 1  # the open circuit: a not even tried
    await system.spawn(Replica, "a")  # it comes back; after the cooldown one probe finds it

    async def served_by_a() -> bool:
        return (await router.ask(Job(n=5), to=to)).startswith("replica/a")

    await eventually(served_by_a, what="the probe closing a's circuit")
    assert breaker.state == "closed"
    assert ("open", "half-open") in breaker.transitions
    assert ("half-open", "closed") in breaker.transitions


async def test_a_hedge_returns_the_fast_answer_once(system: ActorSystem) -> None:
    to = await hosts(system, slow={"delay": 0.5}, fast={})
    router = DestinationRouter(system, FirstMatch(), retry=FAST, hedge_after=0.02)
    t0 = time.monotonic()
    assert await router.ask(Job(n=7), to=to, key="session-1") == "replica/fast:7"
    assert time.monotonic() - t0 < 0.4  # not the slow one's time
    assert router.stats.hedges == 1
    assert router.stats.hedge_wins == 1
    assert router.stats.decisions == {"replica/fast": 1}
    # both requests carried one idempotency key: an idempotent handler does the work once
    await eventually(lambda: "replica/slow" in Replica.seen, what="the slow one got it too")
    [(_, slow_key)] = Replica.seen["replica/slow"]
    [(_, fast_key)] = Replica.seen["replica/fast"]
    assert slow_key == fast_key
    assert slow_key is not None
    assert slow_key.startswith("session-1:")


async def test_per_session_queues_keep_order_and_hold_no_other_session(
    system: ActorSystem,
) -> None:
    to = await hosts(system, a={}, b={}, c={})
    router = DestinationRouter(system, ConsistentHash(), retry=FAST)
    holds = [0.03, 0.0, 0.02, 0.0, 0.01, 0.0, 0.02, 0.0]
    s1 = [
        asyncio.create_task(router.ask(Job(n=n, hold=h), to=to, key="s1"))
        for n, h in enumerate(holds)
    ]
    other = asyncio.create_task(router.ask(Job(n=100), to=to, key="s2"))
    await asyncio.wait_for(other, WAIT)
    assert not s1[-1].done()  # s2 went ahead: only s1's own lane waits on s1
    await asyncio.gather(*s1)
    assert router.queues.depth("s1") == 0  # lanes of finished sessions are not kept
    [s1_home] = {a for a, jobs in Replica.seen.items() if any(n < 100 for n, _ in jobs)}
    assert [n for n, _ in Replica.seen[s1_home] if n < 100] == list(range(len(holds)))


async def test_overload_is_refused_cleanly_by_the_bulkhead(system: ActorSystem) -> None:
    to = await hosts(system, only={"delay": 0.3})
    router = DestinationRouter(system, FirstMatch(), retry=FAST, bulkhead=2)
    t0 = time.monotonic()
    results = await asyncio.gather(
        *(router.ask(Job(n=n), to=to) for n in range(5)), return_exceptions=True
    )
    refused = [r for r in results if isinstance(r, BulkheadFullError)]
    answered = [r for r in results if isinstance(r, str)]
    assert len(answered) == 2
    assert len(refused) == 3
    assert "bulkhead" in str(refused[0])
    assert time.monotonic() - t0 < 1.0  # refused at once, not queued behind the two
    assert router.stats.refused >= 3
    assert router.bulkhead is not None
    assert router.bulkhead.in_flight == {}  # every slot given back


async def test_only_failures_worth_retrying_are_retried(system: ActorSystem) -> None:
    to = await hosts(system, bad={"fail": True}, good={})
    router = DestinationRouter(system, FirstMatch(), retry=FAST)
    with pytest.raises(RemoteError, match="is bad"):  # the handler's own error: not retried
        await router.ask(Job(n=1), to=to)
    assert router.stats.attempts == 1
    assert router.circuit("replica/bad").state == "closed"  # it answered: it is up
    with pytest.raises(NoRespondersError):  # nobody anywhere: retried, then the last error
        await router.ask(Job(n=2), to=["replica/ghost"])
    assert router.stats.retries == 2


def test_consistent_hashing_is_sticky_and_moves_only_the_leavers_keys() -> None:
    policy = ConsistentHash()
    nodes = [f"replica/{i}" for i in range(5)]
    keys = [f"session-{i}" for i in range(500)]
    home = {k: policy.order(nodes, k)[0] for k in keys}
    assert home == {k: policy.order(nodes, k)[0] for k in keys}  # sticky
    assert len(set(home.values())) == 5  # and spread
    gone = nodes[2]
    after = {k: policy.order([n for n in nodes if n != gone], k)[0] for k in keys}
    moved = [k for k in keys if after[k] != home[k]]
    assert moved
    assert all(home[k] == gone for k in moved)  # only the keys the leaver held


def test_weighted_round_robin_gives_each_its_share_evenly() -> None:
    policy = Weighted({"a": 3, "b": 1})
    firsts = [policy.order(["a", "b"])[0] for _ in range(8)]
    assert firsts.count("a") == 6
    assert firsts.count("b") == 2
    assert "b" in firsts[:4]  # interleaved, not bunched


async def test_instances_come_from_the_registry_by_type(system: ActorSystem) -> None:
    await hosts(system, a={}, b={})
    await system.directory.announced()
    router = DestinationRouter(system, FirstMatch(), retry=FAST)
    assert await router.candidates(None, None, name="replica") == ["replica"]  # the type
    answer = await router.ask(Job(n=3), name="replica")
    assert answer in ("replica/a:3", "replica/b:3")  # NATS picks the instance
    with pytest.raises(ValueError, match=r"to=.*skill=.*name="):
        await router.ask(Job(n=4))
