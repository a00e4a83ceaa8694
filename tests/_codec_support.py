"""Scaffolding the edge-codec tests share: fixture loading, hypothesis strategies
for envelopes and JSON, fuzz helpers, and sample taxonomy errors.

The strategies are builders with keyword arguments, so each codec's tests ask
for exactly the ranges its protocol can hold (a protocol with RFC 3339 times
cannot carry negative timestamps, one with a fixed cipher vocabulary gets those
values only, ...).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st

from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    ActorNotFoundError,
    AskTimeoutError,
    AuthError,
    DecodeError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    UnknownIntentError,
    ValidationFailedError,
)

FIXTURES_ROOT = Path(__file__).parent / "fixtures"

Strategy = st.SearchStrategy


def fixture_loader(protocol: str) -> Callable[[str], Any]:
    """``fixture(name)``: a fresh parse of ``fixtures/<protocol>/<name>`` (JSON)."""
    folder = FIXTURES_ROOT / protocol

    def fixture(name: str) -> Any:
        return json.loads((folder / name).read_text())

    return fixture


def fast(max_examples: int) -> settings:
    """Hypothesis settings for codec properties: no deadline, slow draws allowed."""
    return settings(
        max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


def wire(obj: Any) -> Any:
    """Through real JSON, as over HTTP: catches anything JSON cannot hold."""
    return json.loads(json.dumps(obj))


def field_at(obj: Any, dotted: str) -> Any:
    """The value at a dotted path (``context.session_id``) of an envelope."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


# -- strategies -------------------------------------------------------------------------

TEXT = st.text(max_size=12)
TEXT_20 = st.text(max_size=20)
WORDS = st.text(min_size=1, max_size=24)
SMALL_TAGS = st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)


def json_scalars(
    text: Strategy[str] = TEXT, *, bound: int | None = 2**53, floats: bool = True
) -> Strategy[Any]:
    """JSON scalars: integers within ``bound`` (None: any), finite floats if ``floats``."""
    leaf: Strategy[Any] = (
        st.none()
        | st.booleans()
        | (st.integers() if bound is None else st.integers(-bound, bound))
        | text
    )
    return leaf | st.floats(allow_nan=False, allow_infinity=False) if floats else leaf


def json_values(
    text: Strategy[str] = TEXT,
    *,
    keys: Strategy[str] | None = None,
    bound: int | None = 2**53,
    floats: bool = True,
    max_size: int = 3,
    max_leaves: int = 8,
) -> Strategy[Any]:
    """Plain JSON data: :func:`json_scalars`, lists and objects of them."""
    names = text if keys is None else keys
    return st.recursive(
        json_scalars(text, bound=bound, floats=floats),
        lambda inner: (
            st.lists(inner, max_size=max_size) | st.dictionaries(names, inner, max_size=max_size)
        ),
        max_leaves=max_leaves,
    )


JSON = json_values()


def contexts(
    ids: Strategy[str] = TEXT,
    *,
    trace_id: Strategy[str] | None = None,
    session_id: Strategy[str] | None = None,
    priority: tuple[int, int] = (-5, 5),
    artifact_refs: Strategy[list[str]] | None = None,
    tags: Strategy[dict[str, str]] | None = None,
) -> Strategy[EnvelopeContext]:
    """Envelope contexts with every field drawn; optional ids from ``ids`` unless named."""
    return st.builds(
        EnvelopeContext,
        trace_id=st.none() | (ids if trace_id is None else trace_id),
        parent_id=st.none() | ids,
        idempotency_key=st.none() | ids,
        session_id=st.none() | (ids if session_id is None else session_id),
        priority=st.integers(*priority),
        ttl_ms=st.none() | st.integers(0, 10**9),
        stream=st.booleans(),
        artifact_refs=st.lists(ids, max_size=2) if artifact_refs is None else artifact_refs,
        tags=st.dictionaries(ids, ids, max_size=2) if tags is None else tags,
    )


def metas(
    ids: Strategy[str] = TEXT,
    *,
    protocol_hint: Strategy[str] | None = None,
    max_retries: int = 9,
    cipher: Strategy[str] | None = None,
) -> Strategy[EnvelopeMeta]:
    """Envelope metas; ``protocol_hint`` stays unset unless a strategy is given."""
    hint: dict[str, Any] = {}
    if protocol_hint is not None:
        hint["protocol_hint"] = st.none() | protocol_hint
    return st.builds(
        EnvelopeMeta,
        **hint,
        retry_count=st.integers(0, max_retries),
        signature=st.none() | ids,
        key_id=st.none() | ids,
        cipher=st.none() | (ids if cipher is None else cipher),
    )


IDS = st.text(min_size=1, max_size=20)
#: Milliseconds from 1970 to the end of year 9999 (what RFC 3339 times can say).
RFC3339_MS = st.integers(0, 253_402_300_799_999)
CONTENTS = JSON | st.binary(max_size=16)
NON_EMPTY = st.text(min_size=1, max_size=12)
#: Intents of requests and replies (``$error``, ``$ack``... are control intents).
PLAIN_INTENTS = NON_EMPTY.filter(lambda s: not s.startswith("$"))


def envelopes(
    *,
    ids: Strategy[str] = IDS,
    ts: Strategy[int] = RFC3339_MS,
    src: Strategy[str] = TEXT,
    dst: Strategy[str] = TEXT,
    intent: Strategy[str] = PLAIN_INTENTS,
    content: Strategy[Any] = CONTENTS,
    context: Strategy[EnvelopeContext] | None = None,
    meta: Strategy[EnvelopeMeta] | None = None,
) -> Strategy[Envelope]:
    """Envelopes with every field drawn (defaults: what RFC 3339 times can hold)."""
    return st.builds(
        Envelope,
        id=ids,
        ts=ts,
        src=src,
        dst=dst,
        intent=intent,
        content=content,
        context=contexts() if context is None else context,
        meta=metas() if meta is None else meta,
    )


# -- fuzz --------------------------------------------------------------------------------


def mutated(base: Any, data: st.DataObject, values: Strategy[Any] = JSON) -> Any:
    """A copy of ``base`` with one value somewhere (drawn on a random walk down the
    tree) replaced by one of ``values``, or ``base`` as it is."""
    msg = copy.deepcopy(base)
    node = msg
    while isinstance(node, dict | list) and node:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys))
        if data.draw(st.booleans()):
            node[key] = data.draw(values)
            return msg
        node = node[key]
    return msg


def key_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path inside ``value``, ``()`` (the whole) first."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += key_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += key_paths(v, (*prefix, i))
    return out


def mutations(obj: Any, values: Strategy[Any]) -> Strategy[Any]:
    """``obj`` with one value anywhere in it (or the whole) replaced by one of ``values``."""

    def mutate(path: tuple[Any, ...], junk: Any) -> Any:
        out = json.loads(json.dumps(obj))
        if not path:
            return junk
        target = out
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = junk
        return out

    return st.builds(mutate, st.sampled_from(key_paths(obj)), values)


def top_level_junk(
    messages: Sequence[dict[str, Any]], extra_keys: Sequence[str], values: Strategy[Any]
) -> Strategy[Any]:
    """Arbitrary ``values``, or one of ``messages`` with one top-level member (its own or
    one of ``extra_keys``) set to one of them."""
    return values | st.sampled_from(messages).flatmap(
        lambda f: st.builds(lambda k, v: {**f, k: v}, st.sampled_from([*f, *extra_keys]), values)
    )


def decodes_or_raises_typed(decode: Callable[[Any], Any], obj: Any) -> None:
    """``decode(obj)`` gives an envelope or raises an ActorBusError, nothing else."""
    with contextlib.suppress(ActorBusError):
        assert isinstance(decode(obj), Envelope)


# -- errors ------------------------------------------------------------------------------

#: One of each error the codecs map, as the error round-trip tests raise them.
SAMPLE_ERRORS: tuple[ActorBusError, ...] = (
    AskTimeoutError("echo", "text", 2.0),
    DecodeError("bad json"),
    ValidationFailedError("no field x"),
    UnknownIntentError("no handler"),
    ActorNotFoundError("gone"),
    RateLimitedError("slow down"),
    AuthError("who are you"),
    ProtocolError("out of order"),
    RemoteError("boom", remote_type="KeyError"),
)


def sample_errors(*without: type[ActorBusError]) -> list[ActorBusError]:
    """:data:`SAMPLE_ERRORS` but those of the classes ``without``."""
    return [err for err in SAMPLE_ERRORS if type(err) not in without]
