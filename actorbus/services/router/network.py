"""From decisions to a network: each module speaks the protocol the router chose
for it, and a link between modules that speak different protocols is bridged.

A bridge is stateless: the sender's protocol payload is decoded with the
sender's codec into the one envelope and encoded with the receiver's (appendix
G.9: "bridged through the same UTE using stateless encode/decode only"). The
business content and the security fields (the envelope's ``meta``: signature,
key id, cipher; its context: trace, session, idempotency key) go through
unchanged; nothing is held between messages.

    network = Network.plan(decisions, names, links=[("1", "2"), ("2", "3")])
    wire = network.edge("1").encode(envelope)          # module 1 speaks its protocol
    arrived = network.carry("1", "2", wire)            # bridged if 2 speaks another
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from actorbus.codecs.edge import load_all
from actorbus.codecs.envelope import Envelope
from actorbus.services.router.selection import Decision

PROTOCOL_CODECS = {"A2A": "a2a", "ACP": "acp", "ANP": "anp", "Agora": "agora"}
_json = msgspec.json.Encoder()
_unjson = msgspec.json.Decoder()


class NetworkError(ValueError):
    """A plan that cannot be built (it names what is wrong)."""


@dataclass(frozen=True)
class Edge:
    """A module's protocol edge: envelopes to that protocol's JSON and back."""

    protocol: str

    @property
    def codec(self) -> Any:
        return load_all()[PROTOCOL_CODECS[self.protocol]]

    def encode(self, env: Envelope) -> bytes:
        return _json.encode(self.codec.encode(env))

    def decode(self, wire: bytes) -> Envelope:
        decoded: Envelope = self.codec.decode(_unjson.decode(wire))
        return decoded


@dataclass(frozen=True)
class Bridge:
    """Stateless translation of one protocol's payload into another's."""

    source: str
    target: str

    def __call__(self, wire: bytes) -> bytes:
        return Edge(self.target).encode(Edge(self.source).decode(wire))


@dataclass(frozen=True)
class Node:
    module_id: str
    name: str
    protocol: str


@dataclass(frozen=True)
class Link:
    source: str
    target: str
    bridge: Bridge | None  # None: both ends speak the same protocol


class Network:
    def __init__(self, nodes: Mapping[str, Node], links: Iterable[Link]) -> None:
        self.nodes = dict(nodes)
        self.links = {(link.source, link.target): link for link in links}

    @classmethod
    def plan(
        cls,
        decisions: Sequence[Decision],
        names: Mapping[str, str] | None = None,
        links: Iterable[tuple[str, str]] | None = None,
    ) -> Network:
        """Nodes from the decisions, and the links (every ordered pair when none
        are given), each heterogeneous one with its bridge."""
        nodes = {}
        for d in decisions:
            if d.selected_protocol not in PROTOCOL_CODECS:
                raise NetworkError(f"module {d.module_id}: no codec for {d.selected_protocol!r}")
            name = (names or {}).get(d.module_id, d.module_id)
            nodes[d.module_id] = Node(d.module_id, name, d.selected_protocol)
        pairs = (
            list(links) if links is not None else [(a, b) for a in nodes for b in nodes if a != b]
        )
        built = []
        for a, b in pairs:
            if a not in nodes or b not in nodes:
                raise NetworkError(f"link {a} -> {b} names a module the plan does not have")
            pa, pb = nodes[a].protocol, nodes[b].protocol
            built.append(Link(a, b, None if pa == pb else Bridge(pa, pb)))
        return cls(nodes, built)

    def edge(self, module_id: str) -> Edge:
        return Edge(self.nodes[module_id].protocol)

    def carry(self, source: str, target: str, wire: bytes) -> Envelope:
        """What ``target`` receives when ``source`` sends ``wire`` (in its own
        protocol) over their link: bridged if needed, decoded by the target's edge."""
        link = self.links.get((source, target))
        if link is None:
            raise NetworkError(f"no link {source} -> {target}")
        if link.bridge is not None:
            wire = link.bridge(wire)
        return self.edge(target).decode(wire)

    def describe(self) -> dict[str, Any]:
        return {
            "nodes": {i: {"name": n.name, "protocol": n.protocol} for i, n in self.nodes.items()},
            "links": [
                {
                    "from": link.source,
                    "to": link.target,
                    "bridge": None
                    if link.bridge is None
                    else f"{link.bridge.source}->{link.bridge.target}",
                }
                for link in self.links.values()
            ],
        }
