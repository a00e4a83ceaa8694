"""An arrived envelope, decoded and checked in one pass, not (yet) a pydantic model.

Building an :class:`Envelope` model costs more than everything else actorbus does
for a message, and most handlers never look at it. So the receive path decodes
the body straight into :class:`Inbound`, a msgspec Struct that mirrors the
envelope's canonical shape and checks its types while decoding (in C), and
builds the pydantic model only when a handler asks for ``self.envelope``.

msgspec is strict: a body in any other shape (extra ``meta``, context fields
such as ``tags``, a number sent as a string ...) fails that decode and takes the
full pydantic validation instead, which either accepts it (and the Inbound
carries the validated model) or refuses it with a DecodeError. So pydantic's
``Envelope`` stays the one authority on what a valid envelope is.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from actorbus.codecs.envelope import Envelope
from actorbus.codecs.wire import (
    DEFAULT_LIMITS,
    Encoding,
    SizeLimits,
    check_depth,
    decode_body,
    envelope_from,
    too_deep,
)

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class InboundContext(msgspec.Struct, forbid_unknown_fields=True):
    trace_id: str | None = None
    parent_id: str | None = None
    session_id: str | None = None
    idempotency_key: str | None = None
    ttl_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None
    stream: bool = False


class InboundMeta(msgspec.Struct, forbid_unknown_fields=True):
    cipher: str | None = None  # sealed content: the cipher it is sealed with


class Inbound(msgspec.Struct, forbid_unknown_fields=True, dict=True):
    """The routing facts of an arrived message, and its envelope on demand."""

    id: _NonEmpty
    ts: int
    dst: str
    intent: _NonEmpty
    src: str = ""
    content: Any = None
    context: InboundContext = msgspec.field(default_factory=InboundContext)
    meta: InboundMeta | None = None

    @property
    def envelope(self) -> Envelope:
        cached: Envelope | None = self.__dict__.get("_envelope")
        if cached is None:
            data = msgspec.structs.asdict(self)
            data["context"] = msgspec.structs.asdict(self.context)
            data["meta"] = msgspec.structs.asdict(self.meta) if self.meta else {}
            cached = self.__dict__["_envelope"] = Envelope.model_validate(data)
        return cached

    @property
    def sealed(self) -> bool:
        return self.meta is not None and self.meta.cipher is not None


_FAST_MSGPACK = msgspec.msgpack.Decoder(Inbound)
_FAST_JSON = msgspec.json.Decoder(Inbound)
_CONTEXT_FIELDS = frozenset(InboundContext.__struct_fields__)


def decode_inbound(
    body: bytes, encoding: Encoding = Encoding.MSGPACK, limits: SizeLimits = DEFAULT_LIMITS
) -> Inbound:
    """Bytes off the wire -> Inbound, or a typed error saying what was wrong."""
    if len(body) <= limits.max_message:
        try:
            if encoding is Encoding.MSGPACK:
                inbound = _FAST_MSGPACK.decode(body)
            else:
                inbound = _FAST_JSON.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass  # not the canonical shape (or not valid at all): pydantic decides
        except RecursionError:
            raise too_deep(limits) from None
        else:
            check_depth(body, inbound.content, encoding, limits, above=1)
            return inbound
    envelope = envelope_from(decode_body(body, encoding, limits))
    return inbound_of(envelope)


def inbound_of(envelope: Envelope) -> Inbound:
    ctx = envelope.context
    inbound = Inbound(
        id=envelope.id,
        ts=envelope.ts,
        dst=envelope.dst,
        intent=envelope.intent,
        src=envelope.src,
        content=envelope.content,
        context=InboundContext(**{k: getattr(ctx, k) for k in _CONTEXT_FIELDS}),
        meta=InboundMeta(cipher=envelope.meta.cipher) if envelope.meta.cipher else None,
    )
    inbound.__dict__["_envelope"] = envelope
    return inbound


class _ReplyMeta(msgspec.Struct):
    cipher: str | None = None


class _Reply(msgspec.Struct):
    """What a caller needs of a reply envelope; other fields are skipped unread."""

    intent: _NonEmpty
    content: Any = None
    meta: _ReplyMeta | None = None
    id: str = ""
    ts: int = 0
    src: str = ""
    dst: str = ""
    # Read only when the content is sealed (bound to it): left as bytes otherwise.
    context: msgspec.Raw = msgspec.Raw()


_REPLY_MSGPACK = msgspec.msgpack.Decoder(_Reply)
_REPLY_JSON = msgspec.json.Decoder(_Reply)
_CONTEXT_MSGPACK = msgspec.msgpack.Decoder(InboundContext)
_CONTEXT_JSON = msgspec.json.Decoder(InboundContext)


SealedFacts = tuple[str, str, str, int, str, tuple[Any, ...]]


def decode_reply(
    body: bytes, encoding: Encoding = Encoding.MSGPACK
) -> tuple[str, Any, SealedFacts | None]:
    """A reply's (intent, content, what its sealed content is bound to: id, src,
    dst, ts, intent, context values; None when it is not sealed);
    msgspec.DecodeError if it is not a reply envelope."""
    msgpack = encoding is Encoding.MSGPACK
    r = (_REPLY_MSGPACK if msgpack else _REPLY_JSON).decode(body)
    if r.meta is None or r.meta.cipher is None:
        return r.intent, r.content, None
    if not r.context:
        c = InboundContext()
    else:
        c = (_CONTEXT_MSGPACK if msgpack else _CONTEXT_JSON).decode(r.context)
    context = (c.trace_id, c.parent_id, c.session_id, c.idempotency_key, c.ttl_ms, c.stream)
    return r.intent, r.content, (r.id, r.src, r.dst, r.ts, r.intent, context)
