"""A 3-node cluster on loopback with R3 streams: losing a node loses no durable message."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import pytest
from pydantic import BaseModel
from test_durable import Entry, OnceLedger, spawn_ledger

from actorbus import (
    Actor,
    ActorBusError,
    ActorSystem,
    AskTimeoutError,
    StoreUnavailableError,
    handler,
)
from actorbus.bus.cluster import EmbeddedCluster
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.jetstream import DurableSettings, idempotency_bucket, stream_name
from actorbus.testing import eventually

R3 = DurableSettings(replicas=3, backoff=(0.05, 0.1), ack_wait=5.0)


@pytest.fixture(scope="module")
def cluster() -> Any:
    with EmbeddedCluster(3) as c:
        yield c


async def r3_system(cluster: EmbeddedCluster, ns: str) -> ActorSystem:
    """A system on the cluster with R3 durable settings that rides out a node's
    death (reconnecting for up to 30 s)."""
    return await ActorSystem.connect(
        cluster.urls,
        namespace=ns,
        durable=R3,
        connect_options=ConnectOptions(reconnect_deadline=30.0),
    )


def node_named(cluster: EmbeddedCluster, server_name: str) -> int:
    return next(i for i, node in enumerate(cluster.nodes) if node.config.server_name == server_name)


async def send_until_stored(system: ActorSystem, n: int, deadline: float) -> None:
    while True:
        try:
            await system.tell("ledger/r3", Entry(n=n), durable=True, timeout=2)
            return
        except (ActorBusError, TimeoutError):
            assert time.monotonic() < deadline, f"entry {n} could not be stored"
            await asyncio.sleep(0.1)  # bounded retry while the cluster elects leaders


async def test_a_node_killed_mid_run_loses_nothing(cluster: EmbeddedCluster, ns: str) -> None:
    system = await r3_system(cluster, ns)
    try:
        deadline = time.monotonic() + 60
        for n in range(100):
            await send_until_stored(system, n, deadline)
        cluster.kill(0)
        for n in range(100, 200):
            await send_until_stored(system, n, deadline)
        progress = await spawn_ledger(system, "r3")
        # Counted by value: a send retried after its store's answer was lost to the
        # dying node is stored twice (at least once), so 200 handled may not yet be
        # all 200 entries.
        every = set(range(200))
        await eventually(lambda: every <= set(progress.seen), 45, "all 200 entries handled")
        assert sorted(set(progress.seen)) == list(range(200))
        assert progress.seen == sorted(progress.seen)
    finally:
        await system.close(timeout=2)
        cluster.restart(0)


async def stream_leader(system: ActorSystem, ns: str, stream: str = "") -> str:
    """The server leading the ledger type's durable stream, or ``stream`` (asked
    until a node that knows answers)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            info = await system.runtime.js.stream_info(stream or stream_name(ns, "ledger"))
            if info.cluster is not None and info.cluster.leader:
                return info.cluster.leader
        except Exception:
            assert time.monotonic() < deadline, "the stream has no leader"
        await asyncio.sleep(0.1)


async def test_durable_tells_ride_through_a_stream_leader_failover(
    cluster: EmbeddedCluster, ns: str
) -> None:
    """The stream's leader is SIGKILLed while tells keep coming, with no retry in
    the test: each tell rides through the election itself (same message id, so
    stored once) and none fails; every one is handled once, in order."""
    system = await r3_system(cluster, ns)
    killed = None
    try:
        await system.runtime.durable.queue("ledger")
        leader = await stream_leader(system, ns)
        killed = node_named(cluster, leader)
        total = 300
        for n in range(total):
            if n == 100:
                cluster.kill(killed)
                killed_at = time.monotonic()
            await system.tell("ledger/fo", Entry(n=n), durable=True)  # default deadline
            if n == 100:
                print(f"the tell during the election took {time.monotonic() - killed_at:.2f}s")
        progress = await spawn_ledger(system, "fo")
        await progress.reached(total, timeout=45)
        assert progress.seen == list(range(total))
        assert await stream_leader(system, ns) != leader
    finally:
        await system.close(timeout=2)
        if killed is not None:
            cluster.restart(killed)


async def test_a_store_that_never_answers_is_a_store_unavailable_error(
    cluster: EmbeddedCluster, ns: str
) -> None:
    """With no JetStream stream for the subject, and none that can be made (another
    stream holds part of its subjects), the send retries to its deadline and then
    names what happened (not an ask's timeout). A stream that was merely deleted is
    made again by the sender (tests/durable/test_durable_turns.py)."""
    from nats.js.api import StreamConfig

    system = await ActorSystem.connect(cluster.urls, namespace=ns, durable=R3)
    try:
        await system.tell("ledger/first", Entry(n=0), durable=True)  # the stream is made
        await system.runtime.js.delete_stream(stream_name(ns, "ledger"))
        await system.runtime.js.add_stream(
            StreamConfig(name=f"{ns}-squatter", subjects=[f"{ns}.d.ledger.other"], num_replicas=3)
        )
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="no stream leader answered") as info:
            await system.tell("ledger/gone", Entry(n=1), durable=True, timeout=1.5)
        assert not isinstance(info.value, AskTimeoutError)
        assert 1.4 < time.monotonic() - started < 5
        # A stream not made by actorbus that takes a type's subjects gets nothing.
        with pytest.raises(ActorBusError, match="not made by actorbus"):
            await system.tell("ledger/other", Entry(n=2), durable=True, timeout=1.5)
    finally:
        await system.close(timeout=2)


async def test_an_idempotent_reader_handles_each_key_once_through_its_buckets_failover(
    cluster: EmbeddedCluster, ns: str
) -> None:
    """The handled-keys bucket's leader is SIGKILLed while an idempotent reader
    works: its reads and writes of handled keys ride through the election, and an
    ack lost with the node brings back a message the bucket already knows, so no
    key is handled twice and none is lost."""
    system = await r3_system(cluster, ns)
    killed = None
    try:
        await system.durable_ready()
        progress = await spawn_ledger(system, "kv", cls=OnceLedger)
        bucket = f"KV_{idempotency_bucket(ns)}"
        leader = await stream_leader(system, ns, bucket)
        total = 200
        for n in range(total):
            if n == 100:
                await progress.reached(60)  # the reader is busy when the leader dies
                killed = node_named(cluster, leader)
                cluster.kill(killed)
            await system.tell(
                "once-ledger/kv", Entry(n=n), durable=True, idempotency_key=f"entry-{n}"
            )
        # A failover under a loaded machine: an ack lost with the node comes back
        # after ack_wait, and the bucket's election may take seconds of its own.
        await progress.reached(total, timeout=45)
        assert sorted(progress.seen) == list(range(total)), "lost or handled twice"
        assert await stream_leader(system, ns, bucket) != leader
    finally:
        await system.close(timeout=2)
        if killed is not None:
            cluster.restart(killed)


def test_a_cluster_whose_picked_port_was_taken_moves_to_new_ports() -> None:
    """Another process may bind a port between its being picked free and a node
    binding it (an outgoing connection's ephemeral port): the cluster starts on
    new ports rather than failing."""
    cluster = EmbeddedCluster(3)
    taken = cluster.nodes[1].config.cluster_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with cluster:
            assert cluster.running
            assert taken not in [node.config.cluster_port for node in cluster.nodes]
    assert not cluster.dir.exists()


async def test_keyed_actors_claim_in_batches_on_replicated_placement(
    cluster: EmbeddedCluster, ns: str
) -> None:
    """A burst of new keys on the cluster: their claim records go in atomic
    batches to an R3 bucket, and each key is active once, in one of two hosts."""
    from _actors import Bump, Bumped, VCounter

    from actorbus.actors.placement import placement_bucket

    hosts = [await r3_system(cluster, ns) for _ in range(2)]
    try:
        for host in hosts:
            await host.register(VCounter)
        keys = [f"vcounter/k{i}" for i in range(300)]
        first = await asyncio.gather(
            *(hosts[i % 2].ask(k, Bump(), returns=Bumped, timeout=20) for i, k in enumerate(keys))
        )
        assert all(b.total == 1 for b in first)
        again = await asyncio.gather(*(hosts[0].ask(k, Bump(), returns=Bumped) for k in keys))
        assert all(b.total == 2 for b in again)  # the same activation: once per key
        table = await hosts[0].hosting.placement.table()
        assert table.creates.batched
        info = await hosts[0].runtime.js.stream_info(f"KV_{placement_bucket(ns)}")
        assert info.config.allow_atomic
        assert info.config.num_replicas == 3
    finally:
        for host in hosts:
            await host.close()


class Begin(BaseModel):
    pass


class Nudge(BaseModel):
    pass


class Nudged(Actor):
    """A type with a durable handler that sets itself a repeating reminder."""

    keyed = True
    nudges: asyncio.Queue[str] = asyncio.Queue()  # made again by the test, in its loop

    @handler
    async def begin(self, _: Begin) -> str:
        await self.remind("nudge", Nudge(), every=1)
        return "set"

    @handler(durable=True)
    async def nudge(self, _: Nudge) -> None:
        await Nudged.nudges.put(self.key)


async def test_hosts_starting_together_on_a_fresh_namespace_say_no_warnings(
    cluster: EmbeddedCluster, ns: str, caplog: Any
) -> None:
    """Five hosts of a type start at once on new R3 streams: the shared reminder
    relay consumer's leader is elected while their first fetches arrive, which
    are answered 503 for about a second. That is a cluster doing what it should:
    said at debug level, not as the warnings it was, and the reminders fire."""
    caplog.set_level(logging.DEBUG, logger="actorbus")
    Nudged.nudges = asyncio.Queue()
    hosts = await asyncio.gather(
        *(
            ActorSystem.connect(
                cluster.urls[i % 3 :] + cluster.urls[: i % 3], namespace=ns, durable=R3
            )
            for i in range(5)
        )
    )
    try:
        await asyncio.gather(*(host.register(Nudged) for host in hosts))
        assert await hosts[0].ask("nudged/a", Begin(), timeout=20) == "set"
        for _ in range(2):
            assert await asyncio.wait_for(Nudged.nudges.get(), 20) == "a"
    finally:
        for host in hosts:
            await host.close(timeout=2)
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name in ("actorbus.reminders", "actorbus.durable")
    ]
    blinks = [text for level, text in said if level == logging.DEBUG and "fetch failed" in text]
    print(f"{len(blinks)} fetches answered 503 while the cluster settled")
    assert [text for level, text in said if level >= logging.WARNING] == []


async def test_a_process_asking_for_fewer_replicas_uses_the_namespaces_as_they_are(
    cluster: EmbeddedCluster, ns: str, caplog: Any
) -> None:
    """The namespace's hosts run with three replicas; a process started without
    (a shell command, a forgotten ``--js-replicas 3``) asks for one. It sends and
    hosts durably on the streams and buckets as they are, said at info level,
    and scales none of them down (it used to be refused, or to scale them down
    where it could)."""
    caplog.set_level(logging.INFO, logger="actorbus")
    r3 = await r3_system(cluster, ns)
    one = await ActorSystem.connect(cluster.urls, namespace=ns)  # DurableSettings(): one
    try:
        first = await spawn_ledger(r3, "three")
        await r3.tell("ledger/three", Entry(n=0), durable=True, timeout=20)
        await first.reached(1, timeout=20)
        await one.tell("ledger/three", Entry(n=1), durable=True, timeout=20)  # a sender
        second = await spawn_ledger(one, "one")  # a host of the same type
        await one.tell("ledger/one", Entry(n=2), durable=True, timeout=20)
        await first.reached(2, timeout=20)
        await second.reached(1, timeout=20)
        js = r3.runtime.js
        for stream in (
            stream_name(ns, "ledger"),
            f"actorbus-{ns}-dlq",
            f"KV_{idempotency_bucket(ns)}",
        ):
            assert (await js.stream_info(stream)).config.num_replicas == 3, stream
    finally:
        await one.close(timeout=2)
        await r3.close(timeout=2)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert any("asked for 1: it uses it as it is" in text for text in said), said
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
