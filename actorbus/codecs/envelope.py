"""The canonical envelope: the one message shape that travels inside the bus.

Every protocol edge converts to and from this model, so its fields follow the
unified transport envelope of the ProtocolRouter design (docs/architecture.md):
identity and routing at the top, conversation facts in ``context``, transport
and security markers in ``meta``.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Unique ids as NUID makes them: a random per-process prefix plus a counter.
# Far cheaper than a UUID per message; a forked child draws a new prefix so
# parent and child never hand out the same id.
_id_prefix = ""
_id_counter = itertools.count(1)


def _new_id_source() -> None:
    global _id_prefix, _id_counter
    _id_prefix = os.urandom(9).hex()
    _id_counter = itertools.count(1)


_new_id_source()
os.register_at_fork(after_in_child=_new_id_source)


def new_id() -> str:
    """A unique, subject-safe message id (18 hex chars of prefix + a hex counter)."""
    return f"{_id_prefix}{next(_id_counter):x}"


def new_trace_id() -> str:
    """A W3C-compatible trace id (32 lowercase hex digits).

    From ``random``, as the OpenTelemetry SDK does: trace ids must be unique,
    not secret, and ``os.urandom`` is a system call on every root message.
    """
    return f"{random.getrandbits(128):032x}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class EnvelopeContext(BaseModel):
    """Conversation facts that follow a message from hop to hop."""

    model_config = ConfigDict(extra="ignore")

    trace_id: str | None = None
    parent_id: str | None = None
    idempotency_key: str | None = None
    session_id: str | None = None
    priority: int = 0
    ttl_ms: int | None = Field(default=None, ge=0)
    stream: bool = False
    artifact_refs: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)


class EnvelopeMeta(BaseModel):
    """Transport and security markers; codecs carry them across unchanged.

    Frozen, so every envelope without markers can share one empty instance
    (``model_copy(update=...)`` makes a changed one).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    protocol_hint: str | None = None
    retry_count: int = Field(default=0, ge=0)
    signature: str | None = None
    key_id: str | None = None
    cipher: str | None = None


EMPTY_META = EnvelopeMeta()


class Envelope(BaseModel):
    """One message on the bus.

    ``intent`` names what the message means (for typed messages, the model's
    intent name); ``content`` is the payload as plain data (dict, list, str,
    bytes, numbers), never a live Python object.
    """

    model_config = ConfigDict(extra="ignore")

    id: str = Field(default_factory=new_id, min_length=1)
    ts: int = Field(default_factory=now_ms)
    src: str = ""
    dst: str
    intent: str = Field(min_length=1)
    content: Any = None
    context: EnvelopeContext = Field(default_factory=EnvelopeContext)
    meta: EnvelopeMeta = EMPTY_META  # shared: most envelopes carry no markers

    def to_dict(self) -> dict[str, Any]:
        """Compact plain-data form: empty context and meta are left out."""
        out: dict[str, Any] = {
            "id": self.id,
            "ts": self.ts,
            "src": self.src,
            "dst": self.dst,
            "intent": self.intent,
            "content": self.content,
        }
        if self.context.model_fields_set:
            out["context"] = self.context.model_dump(exclude_defaults=True)
        if self.meta.model_fields_set or self.meta.model_extra:
            out["meta"] = self.meta.model_dump(exclude_defaults=True)
        return out
