"""From decisions to a network: heterogeneous links bridged through the one
envelope, business content and security fields unchanged across every bridge
pair, and a mixed network of actors running on a real nats-server."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from _util import WAIT
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.services.router import read_scenarios, select
from actorbus.services.router.network import PROTOCOL_CODECS, Bridge, Edge, Network, NetworkError

BENCH = Path(__file__).resolve().parent.parent / "fixtures" / "router" / "protocolrouterbench.json"
PROTOCOLS = tuple(PROTOCOL_CODECS)


def business_envelope() -> Envelope:
    return Envelope(
        id="m-1",
        ts=1_795_000_000_000,
        src="records/1",
        dst="billing/1",
        intent="dict",
        content={"claim": "C-77", "amount": 1250.5, "items": [{"code": "X1", "qty": 2}]},
        context=EnvelopeContext(
            trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
            parent_id="m-0",
            session_id="case-9",
            idempotency_key="claim-C-77",
        ),
        meta=EnvelopeMeta(signature="sig-b64url", key_id="did:key:z6Mk#k1", cipher="A256GCM"),
    )


SECURITY = ("signature", "key_id", "cipher")
CONTEXT = ("trace_id", "session_id", "idempotency_key")


@pytest.mark.parametrize(("source", "target"), list(itertools.product(PROTOCOLS, PROTOCOLS)))
def test_content_and_security_fields_cross_every_bridge_unchanged(source: str, target: str) -> None:
    env = business_envelope()
    wire = Edge(source).encode(env)
    if source != target:
        wire = Bridge(source, target)(wire)
    arrived = Edge(target).decode(wire)
    assert arrived.content == env.content
    assert arrived.intent == env.intent
    for name in SECURITY:
        assert getattr(arrived.meta, name) == getattr(env.meta, name), (source, target, name)
    for name in CONTEXT:
        assert getattr(arrived.context, name) == getattr(env.context, name), (source, target, name)


def test_a_plan_bridges_exactly_its_heterogeneous_links() -> None:
    [scenario] = [s for s in read_scenarios(BENCH) if s.id == "L4-Q1"]
    decisions = [select(m, scenario.description) for m in scenario.modules]
    assert [d.selected_protocol for d in decisions] == ["ANP", "A2A", "ACP", "Agora"]
    network = Network.plan(decisions, {m.id: m.name for m in scenario.modules})
    assert len(network.links) == 12  # every ordered pair
    assert all(link.bridge is not None for link in network.links.values())
    same = Network.plan(decisions[:1] * 1, links=[])
    assert same.links == {}
    with pytest.raises(NetworkError, match="names a module"):
        Network.plan(decisions, links=[("1", "9")])


class Hop(BaseModel):
    sender: str | None  # None: from outside, in this module's own protocol
    wire: str  # the sender's protocol JSON


class Member(Actor):
    """A module of the network: takes what its edge decodes, adds itself to the
    path, and forwards in its own protocol."""

    type_name = "member"
    arrived: asyncio.Queue[Envelope]

    def __init__(self, network: Network, me: str, then: str | None) -> None:
        self.network = network
        self.me = me
        self.then = then

    @handler
    async def hop(self, hop: Hop) -> None:
        if hop.sender is None:
            env = self.network.edge(self.me).decode(hop.wire.encode())
        else:
            env = self.network.carry(hop.sender, self.me, hop.wire.encode())
        content = {**env.content, "path": [*env.content.get("path", []), self.me]}
        env = env.model_copy(update={"content": content})
        if self.then is None:
            await Member.arrived.put(env)
            return
        wire = self.network.edge(self.me).encode(env).decode()
        await self.tell(f"member/{self.then}", Hop(sender=self.me, wire=wire))


async def test_a_mixed_network_of_actors_runs(system: ActorSystem) -> None:
    Member.arrived = asyncio.Queue()
    [scenario] = [s for s in read_scenarios(BENCH) if s.id == "L4-Q1"]
    decisions = [select(m, scenario.description) for m in scenario.modules]
    order = [d.module_id for d in decisions]
    chain = list(itertools.pairwise(order))
    network = Network.plan(decisions, links=chain)
    assert all(link.bridge is not None for link in network.links.values())
    for me, then in zip(order, [*order[1:], None], strict=True):
        await system.spawn(Member, me, network=network, me=me, then=then)
    env = business_envelope()
    wire = network.edge(order[0]).encode(env).decode()
    await system.tell(f"member/{order[0]}", Hop(sender=None, wire=wire))
    arrived = await asyncio.wait_for(Member.arrived.get(), WAIT)
    assert arrived.content["path"] == order  # through ANP, A2A, ACP and Agora in turn
    business: dict[str, Any] = {k: v for k, v in arrived.content.items() if k != "path"}
    assert business == env.content
    for name in SECURITY:
        assert getattr(arrived.meta, name) == getattr(env.meta, name)
    for name in CONTEXT:
        assert getattr(arrived.context, name) == getattr(env.context, name)
