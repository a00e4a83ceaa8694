"""Looking after durable queues: dead letters (list, inspect, replay, drop) and depth.

Dead letters live in the namespace's dead-letter stream, one record per message
that ran out of attempts or could never succeed: the address, the reason, the
error code, the attempt count and the original message as it was sent. A record
that would not fit in one NATS message (the original was near ``max_payload``)
keeps a reference to the original in the durable stream instead of a copy;
reading or replaying the dead letter fetches it from there.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import ConsumerInfo

from actorbus.actors.outbox import fresh_resend_stamp
from actorbus.actors.pipeline import decode_stored
from actorbus.bus.client import BadHeaders
from actorbus.bus.jetstream import (
    consumer_name,
    dlq_stream_name,
    expired_entry,
    stream_name,
    type_consumer_name,
)
from actorbus.bus.subjects import Address
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError, AuthError
from actorbus.codecs.wire import H_MSG_ID, pack, unpack
from actorbus.security.resent import RESENT_HEADER
from actorbus.security.sessions import SESSION_HEADER

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime


@dataclass(frozen=True)
class DeadLetter:
    seq: int  # its sequence in the dead-letter stream: what replay/drop take
    address: str
    reason: str
    code: str
    attempts: int
    envelope_id: str | None
    original: bytes
    original_headers: dict[str, str]
    original_seq: int | None = None  # where the original is in the durable stream
    original_kept: bool = True  # False: too large to copy; read from original_seq

    def envelope(self) -> Envelope:
        """The message as it was sent (in the encoding its headers name)."""
        return decode_stored(self.original, self.original_headers).envelope


_REASON_MAX = 2_000  # characters of the reason kept (an exception may quote a whole payload)
_HEADERS_MAX = 4_096  # bytes of an unparsable header block kept
_HEADROOM = 4_096  # bytes left in max_payload for the record's own fields


def dead_letter_record(
    msg: Msg,
    address: str,
    reason: str,
    code: str,
    attempts: int,
    envelope_id: str | None,
    max_payload: int,
) -> bytes:
    """The dead-letter record of a stored message, never larger than ``max_payload``:
    the original is copied when it fits, else referenced by its stream sequence."""
    headers: Mapping[str, str] | None = msg.headers  # nats-py says dict; ours may not be
    record: dict[str, Any] = {
        "address": address,
        "reason": reason if len(reason) <= _REASON_MAX else reason[:_REASON_MAX] + " ...",
        "code": code,
        "attempts": attempts,
        "envelope_id": envelope_id,
        "original_seq": _stream_seq(msg),
        "original_headers": {} if headers is None else dict(headers),
    }
    if type(headers) is BadHeaders:
        record["original_header_block"] = headers.raw[:_HEADERS_MAX]
    if len(msg.data) + sum(len(k) + len(v) for k, v in record["original_headers"].items()) < (
        max_payload - _HEADROOM - len(record["reason"])
    ):
        record["original"] = msg.data
        return pack(record)
    record["original"] = b""
    record["original_size"] = len(msg.data)
    record["original_kept"] = False
    body = pack(record)
    if len(body) > max_payload - _HEADROOM:  # the headers alone were too large
        record["original_headers"] = {}
        body = pack(record)
    return body


def _stream_seq(msg: Msg) -> int | None:
    try:
        return int(msg.metadata.sequence.stream)
    except Exception:  # not a JetStream delivery
        return None


@dataclass(frozen=True)
class QueueStats:
    """A durable queue at one moment."""

    address: str
    pending: int  # stored, not yet handed to the actor
    in_flight: int  # handed over, not acked yet
    redelivered: int  # handed over more than once, now in flight
    delivered: int  # consumer sequence: deliveries so far, retries included
    expired: int = 0  # dropped unhandled because their ttl passed (all readers, ever)
    shared: bool = False  # the queue of a lazily hosted type: every key's messages
    # False while no reader ever started: ``pending`` then counts what is stored for
    # the address (its messages wait for the actor's first start)
    started: bool = True
    # A reader is alive: it is waiting for messages or holds some (one that died
    # less than ack_wait ago may still count, by the messages it held)
    reading: bool = False
    # Deliveries beyond each message's first since the queue's reader started:
    # retries, and messages a reader died with (those ``redelivered`` now in flight
    # included)
    redeliveries: int = 0


async def list_dead_letters(
    rt: Runtime, address: str | None = None, limit: int = 100
) -> list[DeadLetter]:
    await rt.durable.ready()
    stream = dlq_stream_name(rt.namespace)
    subject = (
        rt.subjects.dead_letter(Address.parse(address))
        if address
        else rt.subjects.dead_letter_all()
    )
    out: list[DeadLetter] = []
    seq = 1
    while len(out) < limit:
        try:
            raw = await rt.js.get_msg(stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.APIError as exc:
            if not _missing(exc):
                raise
            break
        assert raw.seq is not None
        out.append(_record(raw.seq, raw.data or b""))
        seq = raw.seq + 1
    return out


async def get_dead_letter(rt: Runtime, seq: int) -> DeadLetter:
    """One dead letter, with its original (fetched from the durable stream when the
    record only references it)."""
    await rt.durable.ready()
    try:
        raw = await rt.js.get_msg(dlq_stream_name(rt.namespace), seq=seq)
    except nats.js.errors.APIError as exc:
        if not _missing(exc):
            raise
        raise ActorBusError(f"no dead letter #{seq}") from None
    letter = _record(seq, raw.data or b"")
    if letter.original_kept or letter.original_seq is None:
        return letter
    try:
        original = stream_name(rt.namespace, Address.parse(letter.address).type)
        stored = await rt.js.get_msg(original, seq=letter.original_seq)
    except nats.js.errors.APIError as exc:
        if not _missing(exc):
            raise
        raise ActorBusError(
            f"dead letter #{seq}: its original (durable stream #{letter.original_seq}) is no "
            "longer stored (older than max_age + retention_grace)"
        ) from None
    return dataclasses.replace(
        letter,
        original=stored.data or b"",
        original_headers={str(k): str(v) for k, v in (stored.headers or {}).items()},
    )


async def replay_dead_letter(rt: Runtime, seq: int) -> None:
    """Send the original message to its actor again, then drop the dead letter."""
    letter = await get_dead_letter(rt, seq)
    addr = Address.parse(letter.address)
    headers = dict(letter.original_headers)
    # A new id for JetStream's duplicate window: the original id was stored already.
    headers[H_MSG_ID] = f"{letter.envelope_id or 'dead'}~replay~{seq}"
    # Sealed: stamped again (its sender's key), or its receiver takes it for a
    # captured message played back (its id taken, or its stamp too old).
    stamp = None
    if letter.envelope_id:
        stamp = fresh_resend_stamp(rt, headers, letter.envelope_id, _sender_type(letter))
    if stamp is not None:
        headers[RESENT_HEADER] = stamp
    elif SESSION_HEADER in headers:
        raise AuthError(
            f"dead letter #{seq} is sealed by a sender whose key this system does not hold: "
            "sent again as it is, its receiver would take it for a captured message played "
            "back (its id taken, or its stamp over the clock-skew allowance), so it cannot "
            "be replayed from here. Replay it where that key is (the sending type's hosts), "
            f"or send it anew (`actorbus history {letter.address}{_since(letter)} --rerun-to "
            f"{letter.address}`, then drop it)"
        )
    await rt.durable.queue(addr.type)
    ack = await rt.js.publish(rt.subjects.durable(addr), letter.original, headers=headers)
    if ack.seq is None or ack.stream != stream_name(rt.namespace, addr.type):
        raise ActorBusError(f"replay of dead letter #{seq} was not stored")
    try:
        await drop_dead_letter(rt, seq)
    except AuthError as err:  # sent again all the same: say so, or it is sent twice
        raise AuthError(f"dead letter #{seq} was sent again but is still listed: {err}") from None


def _sender_type(letter: DeadLetter) -> str | None:
    """The actor type that sent the dead letter's message (None: a client, or
    unreadable)."""
    try:
        kind = letter.envelope().src.partition("/")[0]
    except Exception:
        return None
    return None if kind in ("", "client") else kind


def _since(letter: DeadLetter) -> str:
    return "" if letter.original_seq is None else f" --since-seq {letter.original_seq}"


async def drop_dead_letter(rt: Runtime, seq: int) -> None:
    """Delete a dead letter for good. AuthError when the broker does not let this
    system delete a stream's messages (on a secured broker only its admin may)."""
    await rt.durable.ready()
    try:
        await rt.js.delete_msg(dlq_stream_name(rt.namespace), seq)
    except nats.js.errors.APIError as exc:
        if not _missing(exc):
            raise
        raise ActorBusError(f"no dead letter #{seq}") from None
    except nats.errors.TimeoutError:
        # a publish the broker's permissions refuse gets no answer at all
        raise AuthError(
            f"the broker did not answer deleting dead letter #{seq}: on a secured broker a "
            "member may not delete a stream's messages, its admin may (`actorbus dlq` is "
            "the admin where the broker's operator keys are, as `actorbus up` keeps them)"
        ) from None


async def queue_stats(rt: Runtime, address: str) -> QueueStats:
    """Depth and lag of an address's durable queue.

    A lazily hosted type has one queue for all its keys: ``type``, ``type/*`` or
    any ``type/key`` without a queue of its own report that one (``shared``).
    Before any reader started (``reading`` false) the stored messages waiting for
    the address are counted as ``pending``; zeros then mean nothing was ever sent.
    """
    await rt.durable.ready()
    addr = Address.parse(address)
    stream = stream_name(rt.namespace, addr.type)
    names = [] if addr.key in (None, "*") else [consumer_name(addr)]
    names.append(type_consumer_name(addr.type))
    for name in names:
        try:
            info = await rt.js.consumer_info(stream, name)
        except nats.js.errors.NotFoundError:
            continue
        shared = name == names[-1]
        pending, in_flight = info.num_pending or 0, info.num_ack_pending or 0
        delivered = (info.delivered.consumer_seq or 0) if info.delivered else 0
        stored = await _stored(rt, stream, info.config.filter_subject or "")
        return QueueStats(
            address=f"{addr.type}/*" if shared else address,
            pending=pending,
            in_flight=in_flight,
            redelivered=info.num_redelivered or 0,
            delivered=delivered,
            expired=await _expired(rt, name),
            shared=shared,
            reading=await _reading(rt, stream, name, info),
            # Every stored message not pending was delivered at least once; any
            # delivery beyond that count was a second one of some message.
            redeliveries=max(0, delivered - (stored - pending)),
        )
    subject = (
        rt.subjects.durable_type(addr.type)
        if addr.key in (None, "*")
        else rt.subjects.durable(addr)
    )
    waiting = await _stored(rt, stream, subject)
    return QueueStats(address, waiting, 0, 0, 0, started=False)


async def _reading(rt: Runtime, stream: str, name: str, info: ConsumerInfo) -> bool:
    """Is a reader alive? It waits on a pull or holds messages, except for the
    moment between settling one and pulling the next: looked at again after it."""
    for _ in range(2):
        if info.num_waiting or info.num_ack_pending:
            return True
        await asyncio.sleep(_BETWEEN_PULLS)
        info = await rt.js.consumer_info(stream, name)
    return False


async def _stored(rt: Runtime, stream: str, subject: str) -> int:
    """Messages stored in a type's durable stream on ``subject`` (a filter)."""
    try:
        info = await rt.js.stream_info(stream, subjects_filter=subject)
    except nats.js.errors.NotFoundError:
        return 0  # nothing was ever sent to the type
    return sum((info.state.subjects or {}).values())


async def _expired(rt: Runtime, consumer: str) -> int:
    try:
        entry = await rt.durable.stores.stats.get(expired_entry(consumer))
    except nats.js.errors.KeyNotFoundError:
        return 0
    return int(entry.value or b"0")


_BETWEEN_PULLS = 0.2  # seconds: longer than a reader's pause between two pulls
_NO_MESSAGE = 10037, 10057  # JetStream error codes for "no message found"


def _missing(exc: nats.js.errors.APIError) -> bool:
    return isinstance(exc, nats.js.errors.NotFoundError) or exc.err_code in _NO_MESSAGE


def _record(seq: int, data: bytes) -> DeadLetter:
    body: dict[str, Any] = unpack(data)
    return DeadLetter(
        seq=seq,
        address=str(body.get("address", "")),
        reason=str(body.get("reason", "")),
        code=str(body.get("code", "")),
        attempts=int(body.get("attempts", 0)),
        envelope_id=body.get("envelope_id"),
        original=bytes(body.get("original", b"")),
        original_headers={str(k): str(v) for k, v in (body.get("original_headers") or {}).items()},
        original_seq=body.get("original_seq"),
        original_kept=bool(body.get("original_kept", True)),
    )
