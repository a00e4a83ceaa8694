"""A message crossing a protocol's edge, as the benchmarks charge for it: as is
(``native``), or encoded to the protocol's JSON by its codec on the way out and
decoded on the way in, as an adapter at each end of a hop would."""

from __future__ import annotations

from typing import Any

import msgspec

from actorbus.codecs.edge import load_all
from actorbus.codecs.envelope import Envelope, EnvelopeContext

_json = msgspec.json.Encoder()
_unjson = msgspec.json.Decoder()


def to_edge(protocol: str, content: Any, src: str, dst: str, n: int) -> Any:
    """``content`` (message ``n`` from ``src`` to ``dst``) as it crosses an edge."""
    if protocol == "native":
        return content
    env = Envelope(
        id=f"m{n}-{src}",
        ts=1_795_000_000_000 + n,
        src=src,
        dst=dst,
        intent="text",
        content=content,
        context=EnvelopeContext(session_id=src, trace_id=f"{n:032x}"),
    )
    return _json.encode(load_all()[protocol].encode(env)).decode()


def from_edge(protocol: str, wire: Any) -> Any:
    """What the receiving side reads from ``wire``."""
    if protocol == "native":
        return wire
    return load_all()[protocol].decode(_unjson.decode(wire)).content
