"""The edge codec tables: every protocol by name, and bridging between any two."""

from __future__ import annotations

import itertools
import string

import pytest
from _codec_support import contexts, envelopes, fast, field_at, metas, wire
from hypothesis import given, strategies as st

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
    every pair that carries a signature (Agora does, in its request's metadata)."""
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


ALNUM = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=1, max_size=16)
HEX32 = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
UUIDS = st.uuids().map(str)
#: What every protocol can hold: plain ids, RFC 3339 times, UUID sessions, W3C trace
#: ids, and text content (Agora's body is text; the others carry text too).
COMMON = envelopes(
    ids=ALNUM,
    src=ALNUM,
    dst=ALNUM,
    intent=st.sampled_from(["text"]),
    content=st.text(alphabet=string.printable, min_size=1, max_size=40).filter(str.strip),
    context=contexts(ALNUM, trace_id=HEX32, session_id=UUIDS),
    meta=metas(ALNUM),
)


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(sorted(MODULES), 2)))
@given(env=COMMON)
@fast(25)
def test_bridging_keeps_every_field_both_protocols_carry(
    source: str, target: str, env: Envelope
) -> None:
    """envelope -> source -> (JSON) -> target -> (JSON) -> envelope keeps every field
    that both protocols carry, for every ordered pair."""
    s, t = codec(source), codec(target)
    bridged = bridge(wire(s.encode(env)), source, target)
    back = t.decode(wire(bridged))
    for path in sorted(s.carries & t.carries):
        assert field_at(back, path) == field_at(env, path), (source, target, path)
