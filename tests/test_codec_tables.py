"""The edge codec tables: every protocol by name, and bridging between any two."""

from __future__ import annotations

import itertools

import pytest

from actorbus.codecs.edge import DECODE, ENCODE, MODULES, bridge, codec, load_all
from actorbus.codecs.envelope import Envelope, EnvelopeContext
from actorbus.codecs.errors import UnsupportedError


def test_every_protocol_is_in_the_tables() -> None:
    loaded = load_all()
    assert set(loaded) == set(MODULES) == set(ENCODE) == set(DECODE)
    assert codec("A2A") is loaded["a2a"]


def test_an_unknown_protocol_is_a_typed_error_naming_the_known_ones() -> None:
    with pytest.raises(UnsupportedError, match="known: a2a, a2acp"):
        codec("smoke-signals")


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(sorted(MODULES), 2)))
def test_bridging_keeps_business_content_and_security_fields(source: str, target: str) -> None:
    """decode with one, encode with the other: the text and the signature survive
    every pair (Agora carries content only, so security there is out of scope)."""
    env = Envelope(
        id="m-1",
        src="client/1",
        dst="echo/1",
        intent="text",
        content="hello",
        context=EnvelopeContext(session_id="s-1"),
        meta={"signature": "c2ln", "key_id": "did:key:z1#k"},  # type: ignore[arg-type]
    )
    wire = codec(source).encode(env)
    bridged = bridge(wire, source, target)
    back = codec(target).decode(bridged)
    assert back.content == "hello"
    if "meta.signature" in codec(source).carries and "meta.signature" in codec(target).carries:
        assert back.meta.signature == "c2ln"
        assert back.meta.key_id == "did:key:z1#k"
