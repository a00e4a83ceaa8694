"""Looking after durable queues: dead letters (list, inspect, replay, drop) and depth.

Dead letters live in the namespace's dead-letter stream, one record per message
that ran out of attempts or could never succeed: the address, the reason, the
error code, the attempt count and the original message as it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.js.errors

from actorbus.bus.jetstream import (
    consumer_name,
    dlq_stream_name,
    expired_entry,
    stream_name,
    type_consumer_name,
)
from actorbus.bus.subjects import Address
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.wire import H_MSG_ID, decode_envelope, unpack

if TYPE_CHECKING:
    from actorbus.actors.system import ActorSystem


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

    def envelope(self) -> Envelope:
        """The message as it was sent."""
        return decode_envelope(self.original)


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


async def list_dead_letters(
    system: ActorSystem, address: str | None = None, limit: int = 100
) -> list[DeadLetter]:
    await system.durable_ready()
    stream = dlq_stream_name(system.namespace)
    subject = (
        system.subjects.dead_letter(Address.parse(address))
        if address
        else system.subjects.dead_letter_all()
    )
    out: list[DeadLetter] = []
    seq = 1
    while len(out) < limit:
        try:
            raw = await system.js.get_msg(stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.APIError as exc:
            if not _missing(exc):
                raise
            break
        assert raw.seq is not None
        out.append(_record(raw.seq, raw.data or b""))
        seq = raw.seq + 1
    return out


async def get_dead_letter(system: ActorSystem, seq: int) -> DeadLetter:
    await system.durable_ready()
    try:
        raw = await system.js.get_msg(dlq_stream_name(system.namespace), seq=seq)
    except nats.js.errors.APIError as exc:
        if not _missing(exc):
            raise
        raise ActorBusError(f"no dead letter #{seq}") from None
    return _record(seq, raw.data or b"")


async def replay_dead_letter(system: ActorSystem, seq: int) -> None:
    """Send the original message to its actor again, then drop the dead letter."""
    letter = await get_dead_letter(system, seq)
    addr = Address.parse(letter.address)
    headers = dict(letter.original_headers)
    # A new id for JetStream's duplicate window: the original id was stored already.
    headers[H_MSG_ID] = f"{letter.envelope_id or 'dead'}~replay~{seq}"
    ack = await system.js.publish(system.subjects.durable(addr), letter.original, headers=headers)
    if ack.seq is None:
        raise ActorBusError(f"replay of dead letter #{seq} was not stored")
    await drop_dead_letter(system, seq)


async def drop_dead_letter(system: ActorSystem, seq: int) -> None:
    await system.durable_ready()
    try:
        await system.js.delete_msg(dlq_stream_name(system.namespace), seq)
    except nats.js.errors.APIError as exc:
        if not _missing(exc):
            raise
        raise ActorBusError(f"no dead letter #{seq}") from None


async def queue_stats(system: ActorSystem, address: str) -> QueueStats:
    """Depth and lag of an address's durable queue (zeros if it never had a reader).

    A lazily hosted type has one queue for all its keys: ``type``, ``type/*`` or
    any ``type/key`` without a queue of its own report that one (``shared``).
    """
    await system.durable_ready()
    addr = Address.parse(address)
    stream = stream_name(system.namespace)
    names = [] if addr.key in (None, "*") else [consumer_name(addr)]
    names.append(type_consumer_name(addr.type))
    for name in names:
        try:
            info = await system.js.consumer_info(stream, name)
        except nats.js.errors.NotFoundError:
            continue
        shared = name == names[-1]
        return QueueStats(
            address=f"{addr.type}/*" if shared else address,
            pending=info.num_pending or 0,
            in_flight=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
            delivered=(info.delivered.consumer_seq or 0) if info.delivered else 0,
            expired=await _expired(system, name),
            shared=shared,
        )
    return QueueStats(address, 0, 0, 0, 0)


async def _expired(system: ActorSystem, consumer: str) -> int:
    assert system.stats is not None
    try:
        entry = await system.stats.get(expired_entry(consumer))
    except nats.js.errors.KeyNotFoundError:
        return 0
    return int(entry.value or b"0")


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
    )
