"""The edge codecs' tables: each protocol actorbus speaks outside the bus, by name.

Inside the bus one canonical :class:`~actorbus.codecs.envelope.Envelope` travels;
at the edges a codec converts between it and a protocol's own messages. Codecs
are pure and stateless (no I/O, no clocks beyond what a message says), so the
gateway, egress adapters and tests can call them anywhere:

- ``encode(envelope) -> dict``: the protocol's message object (JSON-ready) for an
  envelope: a request when the envelope is one, a reply/result when its intent
  says so (see each codec's docstring for the shapes it produces).
- ``decode(obj) -> Envelope``: the reverse, for an already-parsed JSON object.
  Bad input raises a typed :class:`~actorbus.codecs.errors.ActorBusError`
  (``DecodeError``, ``ValidationFailedError``, ``UnsupportedError``...) naming
  what was wrong, never another exception.
- ``error_to(err) -> dict`` and ``error_from(obj) -> ActorBusError``: the one
  error taxonomy (E_TIMEOUT, E_CONN, E_PROTOCOL, E_ENCODE, E_DECODE,
  E_UNSUPPORTED, E_AUTH, E_RATE_LIMIT, ...) onto the protocol's native error
  form and back.
- ``carries``: the envelope fields the protocol can hold, as dotted paths
  (``"content"``, ``"context.session_id"``, ``"meta.signature"``...). The
  property tests check that envelope -> protocol -> envelope keeps exactly these.

Bridging two protocols is ``decode`` with one and ``encode`` with the other
(:func:`bridge`), which never changes business content or security fields.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError, UnsupportedError


@dataclass(frozen=True)
class Codec:
    name: str  # lowercase: "a2a", "acp", "anp", "agora", "a2acp", "anycast", "synadia"
    encode: Callable[[Envelope], dict[str, Any]]
    decode: Callable[[Any], Envelope]
    error_to: Callable[[ActorBusError], dict[str, Any]]
    error_from: Callable[[Any], ActorBusError]
    carries: frozenset[str]


# The protocol modules register themselves when imported; they are imported on
# first use so that a process speaking only actorbus never loads them.
MODULES = {
    "a2a": "actorbus.codecs.a2a",
    "acp": "actorbus.codecs.acp",
    "anp": "actorbus.codecs.anp",
    "agora": "actorbus.codecs.agora",
    "a2acp": "actorbus.codecs.a2acp",
    "anycast": "actorbus.codecs.anycast",
    "synadia": "actorbus.codecs.synadia",
}

CODECS: dict[str, Codec] = {}
ENCODE: dict[str, Callable[[Envelope], dict[str, Any]]] = {}
DECODE: dict[str, Callable[[Any], Envelope]] = {}


def register(codec: Codec) -> Codec:
    """Add a codec to the tables (each protocol module registers itself on import)."""
    name = codec.name.lower()
    CODECS[name] = codec
    ENCODE[name] = codec.encode
    DECODE[name] = codec.decode
    return codec


def codec(name: str) -> Codec:
    """The codec for ``name`` (any case); UnsupportedError names the known ones."""
    key = name.lower()
    found = CODECS.get(key)
    if found is None and key in MODULES:
        importlib.import_module(MODULES[key])
        found = CODECS.get(key)
    if found is None:
        raise UnsupportedError(
            f"no codec for protocol {name!r} (known: {', '.join(sorted(MODULES))})"
        )
    return found


def load_all() -> dict[str, Codec]:
    """Import every protocol module, so ENCODE/DECODE hold them all."""
    for module in MODULES.values():
        importlib.import_module(module)
    return CODECS


def bridge(obj: Any, source: str, target: str) -> dict[str, Any]:
    """A message of protocol ``source`` as protocol ``target`` (decode, then encode)."""
    return codec(target).encode(codec(source).decode(obj))
