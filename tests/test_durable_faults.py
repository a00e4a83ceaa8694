"""Durable delivery under failure: a broker killed with SIGKILL and restarted on its
store, and a long queue built up while the actor is away."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from test_durable import FAST, Entry, spawn_ledger

from actorbus import ActorSystem, ConnectionLostError
from actorbus.bus.connection import ConnectOptions
from actorbus.bus.server import EmbeddedServer

WAIT = 60.0


async def test_every_message_whose_send_returned_survives_a_broker_sigkill(
    tmp_path: Any, ns: str
) -> None:
    from actorbus.bus.server import ServerConfig

    server = EmbeddedServer(ServerConfig(store_dir=tmp_path / "store"))
    server.start_sync()
    system = None
    try:
        system = await ActorSystem.connect(
            server.url,
            namespace=ns,
            durable=FAST,
            connect_options=ConnectOptions(reconnect_deadline=30.0),
        )
        confirmed: list[int] = []
        for n in range(200):
            await system.tell("ledger/survivor", Entry(n=n), durable=True)
            confirmed.append(n)
        server.kill()  # SIGKILL: no shutdown, no flush beyond sync_interval: always
        server.start_sync()  # same port, same store
        # the client reconnects on its own; a durable send proves the link is back
        deadline = time.monotonic() + WAIT
        while True:
            try:
                await system.tell("ledger/survivor", Entry(n=200), durable=True, timeout=1)
                break
            except (ConnectionLostError, TimeoutError):
                assert time.monotonic() < deadline, "no reconnect after the broker restart"
                await asyncio.sleep(0.1)  # bounded retry while the client reconnects
        confirmed.append(200)
        progress = await spawn_ledger(system, "survivor")
        await progress.reached(len(confirmed))
        assert progress.seen[: len(confirmed)] == confirmed
    finally:
        if system is not None:
            await system.close(timeout=2)
        server.stop_sync()


async def test_ten_thousand_messages_sent_while_the_actor_is_down_arrive_in_order(
    make_system,
) -> None:
    system = await make_system(durable=FAST)
    for n in range(10_000):
        await system.tell("ledger/backlog", Entry(n=n), durable=True)
    progress = await spawn_ledger(system, "backlog")
    await progress.reached(10_000)
    assert progress.seen == list(range(10_000))
