"""An arrived envelope, checked but not (yet) a pydantic model.

Building an :class:`Envelope` model costs more than everything else actorbus
does for a message, and most handlers never look at it. So the receive path
checks the decoded map against the envelope's rules itself, keeps the few facts
routing needs as plain attributes, and builds the model only when a handler
asks for ``self.envelope``.

The check is strict on purpose: it accepts only maps in the canonical shape
(known keys, exact types) that ``Envelope.model_validate`` is sure to accept.
Anything else takes the full pydantic validation at once, so a bad envelope is
always refused on arrival with a DecodeError, never later.
"""

from __future__ import annotations

from typing import Any

from actorbus.codecs.envelope import Envelope
from actorbus.codecs.wire import DEFAULT_LIMITS, Encoding, SizeLimits, decode_body, envelope_from

_TOP = frozenset(("id", "ts", "src", "dst", "intent", "content", "context"))
_CONTEXT_STR = frozenset(("trace_id", "parent_id", "session_id", "idempotency_key"))
_CONTEXT = _CONTEXT_STR | {"ttl_ms", "stream"}


class Inbound:
    """The routing facts of an arrived message, and its envelope on demand."""

    __slots__ = (
        "_envelope",
        "content",
        "dst",
        "id",
        "intent",
        "raw",
        "session_id",
        "src",
        "stream",
        "trace_id",
        "ts",
        "ttl_ms",
    )

    def __init__(self, raw: dict[str, Any], envelope: Envelope | None = None) -> None:
        self.raw = raw
        self._envelope = envelope
        self.id: str = raw["id"]
        self.ts: int = raw["ts"]
        self.src: str = raw.get("src", "")
        self.dst: str = raw["dst"]
        self.intent: str = raw["intent"]
        self.content: Any = raw.get("content")
        ctx = raw.get("context") or {}
        self.trace_id: str | None = ctx.get("trace_id")
        self.session_id: str | None = ctx.get("session_id")
        self.ttl_ms: int | None = ctx.get("ttl_ms")
        self.stream: bool = ctx.get("stream", False)

    @classmethod
    def of(cls, envelope: Envelope) -> Inbound:
        return cls(envelope.to_dict(), envelope)

    @property
    def envelope(self) -> Envelope:
        if self._envelope is None:
            self._envelope = Envelope.model_validate(self.raw)
        return self._envelope


def decode_inbound(
    body: bytes, encoding: Encoding = Encoding.MSGPACK, limits: SizeLimits = DEFAULT_LIMITS
) -> Inbound:
    """Bytes off the wire -> Inbound, or a typed error saying what was wrong."""
    raw = decode_body(body, encoding, limits)
    return Inbound(raw) if _canonical(raw) else Inbound.of(envelope_from(raw))


def _canonical(raw: Any) -> bool:
    """True only for maps that Envelope.model_validate certainly accepts as they are."""
    if type(raw) is not dict or not raw.keys() <= _TOP:
        return False
    id_, intent = raw.get("id"), raw.get("intent")
    if not (type(id_) is str and id_ and type(intent) is str and intent):
        return False
    if type(raw.get("ts")) is not int or type(raw.get("dst")) is not str:
        return False
    if type(raw.get("src", "")) is not str:
        return False
    ctx = raw.get("context")
    if ctx is None:
        return "context" not in raw
    if type(ctx) is not dict or not ctx.keys() <= _CONTEXT:
        return False
    for key in _CONTEXT_STR & ctx.keys():
        value = ctx[key]
        if value is not None and type(value) is not str:
            return False
    ttl = ctx.get("ttl_ms")
    if ttl is not None and (type(ttl) is not int or ttl < 0):
        return False
    return type(ctx.get("stream", False)) is bool
