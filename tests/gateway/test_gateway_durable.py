"""A durable handler through the gateway: the request is stored, then handled once,
also when the actor's host is down as it arrives (it was asked, unstored, before)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
from _cli import cli
from _gateway import GatewayUnderTest, Probe, message, rpc, running_gateway
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService
from actorbus.testing import eventually


class Order(BaseModel):
    item: str


class GwOrders(Actor):
    """Takes orders for the kitchen."""

    type_name = "gw-orders"
    taken: ClassVar[list[tuple[str, str]]] = []
    arrived: ClassVar[asyncio.Event]

    @handler(durable=True)
    async def take(self, order: Order) -> None:
        """Take one order."""
        GwOrders.taken.append((self.address, order.item))
        GwOrders.arrived.set()


class GwTable(GwOrders):
    """One table's orders: an actor per conversation."""

    type_name = "gw-table"
    key_by_session = True


async def host_orders(system: ActorSystem, probe: Probe) -> None:
    GwOrders.taken, GwOrders.arrived = [], asyncio.Event()
    await system.register(GwOrders)
    await system.register(GwTable)


GATEWAY = GatewayUnderTest(agents=("gw-orders", "gw-table"), host=host_orders, ask_timeout=None)


async def send(http: aiohttp.ClientSession, gw: GatewayService, agent: str, **kw: Any) -> Any:
    msg = message(data={"item": "soup"}, **kw)
    resp = await rpc(http, f"{gw.http_url}/a2a/{agent}", "SendMessage", {"message": msg})
    assert "error" not in resp, resp
    return resp["result"]["task"]


async def taken(n: int) -> list[tuple[str, str]]:
    while len(GwOrders.taken) < n:
        GwOrders.arrived.clear()
        await asyncio.wait_for(GwOrders.arrived.wait(), 10)
    return GwOrders.taken


async def test_a_durable_intent_is_stored_and_handled_once(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    task = await send(http, gw, "gw-orders")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    text = task["artifacts"][0]["parts"][0]["text"]
    assert text.startswith("accepted: gw-orders/default handles it once (key ")
    assert await taken(1) == [("gw-orders/default", "soup")]
    # a conversation's actor, for a type keyed by session
    task = await send(http, gw, "gw-table", context_id="table-7")
    assert "accepted: gw-table/table-7 handles it once" in task["artifacts"][0]["parts"][0]["text"]
    assert (await taken(2))[1] == ("gw-table/table-7", "soup")


KITCHEN = """
from pathlib import Path

from pydantic import BaseModel

from actorbus import Actor, handler


class Order(BaseModel):
    item: str


class Kitchen(Actor):
    @handler(durable=True)
    async def take(self, order: Order) -> None:
        with Path("taken.txt").open("a") as f:
            f.write(f"{self.address} {order.item}\\n")
"""


async def test_a_durable_intent_waits_for_a_host_that_was_killed(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """Asked, as it was before, the request failed while the host was down; told
    durably, it is stored and handled once when a host is back."""
    (tmp_path / "kitchen_agent.py").write_text(KITCHEN)
    env = {"ACTORBUS_URL": nats_server.url}
    run = ("run", "kitchen_agent:Kitchen", "--namespace", ns)
    async with cli(*run, env=env, cwd=tmp_path) as host:
        await host.wait_for_line("ready")
        async with running_gateway(nats_server.url, ns, tmp_path / "gw.db", "kitchen") as gw:
            host.proc.send_signal(signal.SIGKILL)
            assert await host.proc.wait() == -signal.SIGKILL
            task = await send(http, gw, "kitchen")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            assert not (tmp_path / "taken.txt").exists()
            async with cli(*run, env=env, cwd=tmp_path) as again:
                await again.wait_for_line("ready")
                taken = tmp_path / "taken.txt"  # another process's file: no event to wait on
                await eventually(taken.exists, what="the stored order handled")
                assert await again.terminate() == 0, again.stderr
            assert taken.read_text() == "kitchen/default soup\n"
