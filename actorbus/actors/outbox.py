"""The sends of an idempotent durable handler, held until it has succeeded.

A durable message may be redelivered after a crash, and a handler with an
idempotency key then must not act twice. For effects that go through actorbus
(durable ``tell``s, kept ``publish``es) that is made exact here, the way Kafka
makes consume-transform-produce exact: while the handler runs, those sends are
collected instead of sent; after it returns, they are recorded together with the
handled key in one key-value write, then sent, then the message is acked. A
crash before the write loses the collected sends with the attempt that made them
(the rerun makes them again); a crash after it finds the key on redelivery and
sends the recorded messages again, which the stream drops as duplicates by
their ids. Effects outside actorbus (a database write) stay the handler's to make
idempotent; the key is in ``self.envelope.context.idempotency_key``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

import nats.errors

from actorbus.actors.pipeline import Outgoing
from actorbus.bus.client import EncodedHeaders, LazyHeaders, with_header
from actorbus.bus.jetstream import store_message
from actorbus.codecs.envelope import now_ms
from actorbus.codecs.wire import pack, unpack
from actorbus.security.resent import RESENT_HEADER, resent_stamp
from actorbus.security.sessions import SESSION_HEADER, session_signer
from actorbus.security.topic_keys import TOPIC_HEADER, parse_topic_header

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.durable")

# A record larger than this is not kept with the key (a key-value entry must fit
# in one NATS message); its sends then go out before the key is written.
_MAX_RECORD = 512 * 1024


class Held(NamedTuple):
    subject: str
    out: Outgoing
    what: str  # the destination, for errors


class Outbox:
    """Collects one handler attempt's durable sends."""

    def __init__(self) -> None:
        self.held: list[Held] = []
        self.open = True  # a task the handler left running sends directly afterwards

    def hold(self, subject: str, out: Outgoing, what: str) -> None:
        self.held.append(Held(subject, out, what))

    def rows(self) -> list[list[Any]]:
        """The held sends as plain data (for the record, or to travel back to the
        reader when a forwarded durable message was handled in another process)."""
        return [
            [h.subject, h.out.body, _raw(h.out.headers), h.out.intent, h.out.id, h.what]
            for h in self.held
        ]

    @classmethod
    def of_rows(cls, rows: Any) -> Outbox:
        box = cls()
        box.open = False
        box.held = [
            Held(str(s), Outgoing(bytes(b), EncodedHeaders(bytes(h)), str(i), str(n)), str(w))
            for s, b, h, i, n, w in rows
        ]
        return box

    def record(self, envelope_id: str) -> bytes | None:
        """The key's value: the handled id and the sends; None when too large to keep."""
        self.open = False
        data = pack({"id": envelope_id, "out": self.rows()})
        return data if len(data) <= _MAX_RECORD else None


def _raw(headers: EncodedHeaders) -> bytes:
    return headers if type(headers) is bytes else bytes(headers)


def recorded_sends(value: bytes | None) -> list[Held]:
    """The sends recorded with a handled key (none for keys written without them)."""
    if not value:
        return []
    try:
        data: Any = unpack(value)
        return Outbox.of_rows(data["out"] if isinstance(data, dict) else []).held
    except Exception as exc:
        log.warning("a handled key's record is unreadable (%r); nothing resent", exc)
        return []


def resent(rt: Runtime, held: list[Held]) -> list[Held]:
    """Recorded sends as they go out again, ``ack_wait`` or more after they were
    sealed: each with a fresh stamp signed by its session's (or topic's) sender
    key (``Ab-Resent``), so the receiver's clock-skew check does not refuse it as
    a replay."""
    again = []
    for h in held:
        stamp = fresh_resend_stamp(rt, LazyHeaders(h.out.headers), h.out.id)
        if stamp is not None:
            h = h._replace(
                out=h.out._replace(headers=with_header(h.out.headers, RESENT_HEADER, stamp))
            )
        again.append(h)
    return again


def fresh_resend_stamp(
    rt: Runtime, headers: Mapping[str, str], envelope_id: str, sender_type: str | None = None
) -> str | None:
    """``Ab-Resent`` for a sealed message sent again now, signed by its session's
    (or topic's) sender key; None when it travels unsealed, or when this system
    does not hold that key (the receiver then checks the envelope's own stamp).
    ``sender_type``: the actor type that sent it, whose key this machine's home
    may hold (an operator replaying a dead letter where its hosts run)."""
    session, topic = headers.get(SESSION_HEADER), headers.get(TOPIC_HEADER)
    kid: str | None = None
    if session is not None:
        kid = session_signer(session)
    elif topic is not None:
        kid = parse_topic_header(topic)[0]
    if kid is None:
        return None
    signer = rt.security.held_key(kid)
    if signer is None and sender_type is not None:
        signer = rt.security.reading_key(sender_type, kid)
    return None if signer is None else resent_stamp(signer, envelope_id, now_ms())


async def release(rt: Runtime, held: list[Held]) -> None:
    """Send held messages, each stored before the next (repeats are dropped by id)."""
    for h in held:
        await store(rt, h.subject, h.out, h.what, rt.durable_settings.store_timeout)


async def store_or_hold(
    rt: Runtime, subject: str, out: Outgoing, what: str, timeout: float
) -> None:
    """A durable send: held in the running turn's outbox when a durable turn is
    running (``current_outbox``: sent once the turn has committed), else stored
    now (:func:`store`)."""
    box = current_outbox.get()
    if box is not None and box.open:
        box.hold(subject, out, what)
        return
    await store(rt, subject, out, what, timeout)


async def store(rt: Runtime, subject: str, out: Outgoing, what: str, timeout: float) -> None:
    """Publish into JetStream and wait for the publish-ack: stored, or an error
    (``StoreUnavailableError`` when no stream leader confirmed it in time)."""
    try:
        await store_message(
            rt.mux,
            subject,
            out.body,
            out.headers,
            what,
            timeout,
            functools.partial(rt.durable.restore_store_of, subject),
            rt.durable.stream_of(subject),
        )
    except nats.errors.Error as exc:
        raise rt.conn.translate(exc) from exc


# The outbox of the durable turn running in this task (set by the durable reader
# and the virtual actor around a turn; read by store_or_hold and the state keeper).
current_outbox: ContextVar[Outbox | None] = ContextVar("actorbus_outbox", default=None)
