"""Actors in other OS processes, and replicas of one address sharing its load."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest
from _actors import Whoami, WhoAsk, WhoCount, WhoReply
from _util import barrier, run_host

from actorbus import AskTimeoutError, NoRespondersError, RemoteError

pytestmark = pytest.mark.transports("nats", "local")

TARGET = "_actors:Whoami"


async def ask_who(system, n: int, address: str = "whoami/k") -> WhoReply:
    reply: WhoReply = await system.ask(address, WhoAsk(n=n), timeout=3)
    return reply


async def test_actor_in_another_process_answers(system, nats_server, ns: str) -> None:
    async with run_host(TARGET, nats_server.url, ns, "k") as host:
        reply = await ask_who(system, 1)
        assert isinstance(reply, WhoReply)
        assert reply.n == 1
        assert reply.pid == host.pid != os.getpid()


async def test_remote_process_error_is_typed(system, nats_server, ns: str) -> None:
    async with run_host(TARGET, nats_server.url, ns, "k"):
        with pytest.raises(RemoteError) as info:
            await system.ask("whoami/k", {"why": "x"}, timeout=3)
        assert "remote failure x" in str(info.value)
        assert info.value.remote_type == "ValueError"
        assert (await ask_who(system, 2)).n == 2


async def test_stream_from_another_process(system, nats_server, ns: str) -> None:
    async with run_host(TARGET, nats_server.url, ns, "k") as host:
        items = [x async for x in system.stream("whoami/k", WhoCount(n=25), timeout=3)]
        assert [x.n for x in items] == list(range(25))
        assert {x.pid for x in items} == {host.pid}


async def test_two_processes_with_one_key_share_load(system, nats_server, ns: str) -> None:
    async with (
        run_host(TARGET, nats_server.url, ns, "k") as one,
        run_host(TARGET, nats_server.url, ns, "k") as two,
    ):
        replies = await asyncio.gather(*(ask_who(system, i) for i in range(200)))
        assert sorted(r.n for r in replies) == list(range(200))
        per_pid = Counter(r.pid for r in replies)
        assert set(per_pid) == {one.pid, two.pid}, per_pid
        assert sum(per_pid.values()) == 200


async def test_spawn_replicas_share_load(system) -> None:
    await system.spawn(Whoami, "k", replicas=2)
    assert system.local_actors() == {"whoami/k": 2}
    replies = await asyncio.gather(*(ask_who(system, i) for i in range(200)))
    assert sorted(r.n for r in replies) == list(range(200))
    per_instance = Counter(r.instance for r in replies)
    assert len(per_instance) == 2, per_instance
    assert sum(per_instance.values()) == 200


async def test_replicas_across_process_and_local(system, nats_server, ns: str) -> None:
    await system.spawn(Whoami, "k")
    await barrier(system)
    async with run_host(TARGET, nats_server.url, ns, "k", replicas=2) as host:
        replies = await asyncio.gather(*(ask_who(system, i) for i in range(200)))
        per_pid = Counter(r.pid for r in replies)
        assert set(per_pid) == {os.getpid(), host.pid}, per_pid
        remote_instances = {r.instance for r in replies if r.pid == host.pid}
        assert len(remote_instances) == 2


async def test_surviving_replica_takes_over(system, nats_server, ns: str) -> None:
    async with (
        run_host(TARGET, nats_server.url, ns, "k") as one,
        run_host(TARGET, nats_server.url, ns, "k") as two,
    ):
        one.proc.kill()
        await asyncio.wait_for(one.proc.wait(), 5)
        # the server drops the dead connection's interest as soon as it sees the EOF;
        # an ask routed just before that would time out, so allow a bounded retry
        for attempt in range(10):
            try:
                await system.ask("whoami/k", WhoAsk(n=0), timeout=0.5)
                break
            except AskTimeoutError:
                assert attempt < 9
        replies = await asyncio.gather(*(ask_who(system, i) for i in range(50)))
        assert {r.pid for r in replies} == {two.pid}


async def test_stopped_process_no_longer_answers(system, nats_server, ns: str) -> None:
    async with run_host(TARGET, nats_server.url, ns, "k") as host:
        assert (await ask_who(system, 1)).pid == host.pid
    assert host.proc.returncode == 0, "the host did not shut down cleanly on SIGTERM"
    with pytest.raises(NoRespondersError):
        await ask_who(system, 2)


async def test_spawn_is_reachable_from_another_connection_at_once(system, make_system) -> None:
    """When spawn() returns, the actor must be reachable from anywhere: the server
    has to know its subscriptions.

    ``nc.flush()`` alone does not guarantee it with nats-py 2.16: ``_send_ping``
    writes the PING straight to the socket while the SUBs may still sit in the
    client's pending buffer, so the PONG can return before the server saw them.
    """
    host = await make_system()
    missed = 0
    for i in range(50):
        await host.spawn(Whoami, f"k{i}")
        try:
            await system.ask(f"whoami/k{i}", WhoAsk(n=i), timeout=2)
        except NoRespondersError:
            missed += 1
    assert missed == 0, f"{missed}/50 asks right after spawn() found no responders"


async def test_register_is_reachable_from_another_connection_at_once(system, make_system) -> None:
    missed = 0
    for _ in range(20):
        host = await make_system()
        await host.register(Whoami)
        try:
            await system.ask("whoami/lazy", WhoAsk(n=1), timeout=2)
        except NoRespondersError:
            missed += 1
        await host.close()
    assert missed == 0, f"{missed}/20 asks right after register() found no responders"
