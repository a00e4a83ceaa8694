"""``actorbus dlq replay|drop`` on a secured broker: deleting a dead letter is the
broker admin's right, which the command takes where this machine holds the
broker's operator keys (as ``actorbus up`` keeps them); a replay is stamped again
with its sender's key, which this machine's home holds for its actor types."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, ClassVar

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.cli.main import main
from actorbus.security.secure_broker import SecureBroker, join_options
from actorbus.testing import eventually

FAST = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=5.0)


class Clerk(Actor):
    """Writes to the ledger from a handler: sealed with the clerk type's key, which
    this machine's home holds (the command stamps a replay with it)."""

    type_name = "cli-clerk"

    @handler
    async def book(self, entry: dict[str, Any]) -> str:
        await self.tell("cli-ledger/1", entry, durable=True)
        return "booked"


class Ledger(Actor):
    """Fails while broken."""

    type_name = "cli-ledger"
    broken: ClassVar[bool] = True
    taken: ClassVar[list[int]] = []
    arrived: ClassVar[asyncio.Event]

    @handler(durable=True)
    async def add(self, entry: dict[str, Any]) -> None:
        if Ledger.broken:
            raise RuntimeError("broken")
        Ledger.taken.append(int(entry["n"]))
        Ledger.arrived.set()


async def dead_letters(host: ActorSystem, count: int) -> list[Any] | None:
    """The ledger's dead letters once there are ``count`` (retried, then
    dead-lettered: no event crosses that stream)."""
    letters: list[Any] = await host.dead_letters("cli-ledger/1")
    return letters if len(letters) >= count else None


async def test_dlq_replay_and_drop_work_as_the_broker_admin(capsys: Any) -> None:
    Ledger.broken, Ledger.taken, Ledger.arrived = True, [], asyncio.Event()
    ns = f"q{uuid.uuid4().hex[:8]}"
    extra = SecureBroker().server_config([ns])  # this session's ACTORBUS_HOME holds its keys
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        joined = await join_options(server.url, ns, "host")
        host = await ActorSystem.connect(server.url, namespace=ns, durable=FAST, **joined)
        try:
            await host.register(Ledger)
            await host.register(Clerk)
            for n in (1, 2):
                assert await host.ask("cli-clerk/1", {"n": n}) == "booked"
            letters = await eventually(lambda: dead_letters(host, 2), 20, "two dead letters")
            Ledger.broken = False
            bus = ("--url", server.url, "--namespace", ns)
            replay = ["dlq", "replay", str(letters[0].seq), *bus]
            assert await asyncio.to_thread(main, replay) == 0, capsys.readouterr().err
            await asyncio.wait_for(Ledger.arrived.wait(), 10)
            assert Ledger.taken == [1]
            drop = ["dlq", "drop", str(letters[1].seq), *bus]
            assert await asyncio.to_thread(main, drop) == 0, capsys.readouterr().err
            assert await host.dead_letters("cli-ledger/1") == []
            # a client's message: its key died with its process; said, not sent
            Ledger.broken = True
            await host.tell("cli-ledger/1", {"n": 3}, durable=True)
            letters = await eventually(lambda: dead_letters(host, 1), 20, "a dead letter")
            replay = ["dlq", "replay", str(letters[0].seq), *bus]
            assert await asyncio.to_thread(main, replay) == 1
            assert "--rerun-to cli-ledger/1" in capsys.readouterr().err
        finally:
            await host.close()
