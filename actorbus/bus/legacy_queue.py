"""Moving a namespace's durable messages from the one stream of earlier versions
(``actorbus-{ns}-durable``) to a stream per actor type.

The two layouts cannot live side by side: the old stream takes every durable
subject (``{ns}.d.>``), so no per-type stream can be made while it exists, and
only an admin may delete it. The move:

1. reads every message the old stream holds that no consumer has settled (a
   message is settled when a consumer whose filter takes its subject has its
   ack floor at or past it), and writes them to a spool file first;
2. deletes the old stream;
3. stores each spooled message again, in order, in its type's new stream, with
   its own headers: its ``Nats-Msg-Id`` makes a repeat within the duplicate
   window a no-op, so a move cut short is simply run again (the spool is read
   back instead of the stream that is gone);
4. removes the spool.

The per-type streams of the version before this one were made to take message
schedules (for reminders), which lets anyone who may send a type durable
messages purge a key's with one schedule message, and the server cannot turn
that off: each such stream is rebuilt the same way (its unsettled messages
spooled, the stream deleted, made anew, the messages stored again).

A message acked out of order just before the move (above its consumer's ack
floor) is stored again and may run a second time: at-least-once, as after any
crash. Dead letters that only reference an original too large to copy (near
``max_payload``) lose that original with the old stream; their count is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy

from actorbus.bus.jetstream import (
    DurableSettings,
    dlq_stream_name,
    ensure_queue,
    legacy_stream_name,
    stream_name,
)
from actorbus.bus.subjects import Subjects
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.wire import pack, unpack

_BATCH = 256


@dataclass
class Moved:
    """What a move did."""

    moved: int = 0  # messages stored again in their type's stream
    settled: int = 0  # already handled: left behind
    types: dict[str, int] = field(default_factory=dict)  # moved, per actor type
    lost_originals: int = 0  # dead letters whose referenced original went with the stream
    resumed: bool = False  # a move cut short was finished from its spool


async def migrate_legacy_queue(
    js: JetStreamContext,
    subjects: Subjects,
    settings: DurableSettings,
    spool: Path,
    report: Callable[[str], None] = lambda _: None,
) -> Moved | None:
    """Move the namespace's legacy durable stream, and rebuild each type's stream
    made to take message schedules (module docstring); None when there is
    nothing to move and no spool of a move cut short. ``js`` must be allowed to
    delete streams (the broker's admin, or an open server)."""
    result = Moved()
    ns = subjects.ns
    moved = await _move(js, subjects, settings, legacy_stream_name(ns), spool, report, result)
    rebuilt = {p.suffixes[-2].lstrip("."): p for p in spool.parent.glob(f"{spool.stem}.*.spool")}
    offset = 0
    while page := await js.streams_info(offset):  # a page at a time: a server may hold many
        offset += len(page)
        for info in page:
            name = info.config.name or ""
            type_ = name.removeprefix(f"actorbus-{ns}-d-")
            if type_ != name and info.config.allow_msg_schedules:
                rebuilt.setdefault(type_, spool.with_suffix(f".{type_}.spool"))
    for type_, its_spool in sorted(rebuilt.items()):
        source = stream_name(ns, type_)
        moved |= await _move(js, subjects, settings, source, its_spool, report, result)
    return result if moved else None


async def _move(
    js: JetStreamContext,
    subjects: Subjects,
    settings: DurableSettings,
    source: str,
    spool: Path,
    report: Callable[[str], None],
    result: Moved,
) -> bool:
    """Move ``source``'s unsettled messages (through ``spool``) to the streams
    actorbus makes now; False when it is gone and nothing is spooled."""
    spooled = await asyncio.to_thread(_read_spool, spool)
    if spooled is not None:
        result.resumed = True
        messages = spooled
        report(f"finishing a move cut short: {len(messages)} message(s) in {spool}")
    else:
        try:
            info = await js.stream_info(source)
        except nats.js.errors.NotFoundError:
            return False
        # The new streams keep the old one's replicas (R3 on a cluster).
        settings = dataclasses.replace(settings, replicas=info.config.num_replicas or 1)
        report(f"{source}: {info.state.messages} message(s) stored; reading what is unsettled")
        messages, settled = await _unsettled(js, source, subjects.ns)
        result.settled += settled
        result.lost_originals = await _referenced_originals(js, subjects.ns)
        await asyncio.to_thread(_write_spool, spool, messages)
        report(f"{len(messages)} unsettled message(s) spooled to {spool}; deleting {source}")
    with contextlib.suppress(nats.js.errors.NotFoundError):  # gone already if resumed
        await js.delete_stream(source)
    made: set[str] = set()
    for subject, headers, data in messages:
        type_ = subjects.durable_type_of(subject)
        if type_ is None:
            continue
        if type_ not in made:
            await ensure_queue(js, subjects, type_, settings, host=True)
            made.add(type_)
            result.types.setdefault(type_, 0)
        ack = await js.publish(subject, data, headers=headers or None)
        if ack.stream != stream_name(subjects.ns, type_):
            raise ActorBusError(f"a moved message went to stream {ack.stream!r}")
        result.types[type_] += 1
        result.moved += 1
    await asyncio.to_thread(spool.unlink)
    return True


async def _unsettled(
    js: JetStreamContext, legacy: str, ns: str
) -> tuple[list[tuple[str, dict[str, str], bytes]], int]:
    """A stream's durable messages that no consumer settled, in order, and how
    many it settled."""
    floors = [
        (c.config.filter_subject or f"{ns}.d.>", _floor(c)) for c in await js.consumers_info(legacy)
    ]
    info = await js.stream_info(legacy)
    last = info.state.last_seq
    out: list[tuple[str, dict[str, str], bytes]] = []
    settled = 0
    if not info.state.messages:
        return out, settled
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0
    )
    psub = await js.pull_subscribe(f"{ns}.d.>", stream=legacy, config=config)
    try:
        while True:
            try:
                batch = await psub.fetch(_BATCH, timeout=1.0)
            except TimeoutError:  # nats' own, or asyncio's when a pull expires at its deadline
                return out, settled
            for msg in batch:
                seq = msg.metadata.sequence.stream
                if any(_takes(f, msg.subject) and floor >= seq for f, floor in floors):
                    settled += 1
                else:
                    out.append((msg.subject, dict(msg.headers or {}), msg.data))
                if seq >= last:
                    return out, settled
    finally:
        await psub.unsubscribe()


def _floor(consumer: ConsumerInfo) -> int:
    return (consumer.ack_floor.stream_seq or 0) if consumer.ack_floor else 0


def _takes(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or token not in ("*", have[i]):
            return False
    return len(want) == len(have)


async def _referenced_originals(js: JetStreamContext, ns: str) -> int:
    """Dead letters that keep only a reference to their original (in the legacy
    stream)."""
    count, seq = 0, 1
    while True:
        try:
            raw = await js.get_msg(dlq_stream_name(ns), seq=seq, next=True)
        except nats.js.errors.NotFoundError:
            return count
        record = unpack(raw.data or b"")
        if isinstance(record, dict) and record.get("original_kept") is False:
            count += 1
        seq = (raw.seq or seq) + 1


def _write_spool(spool: Path, messages: list[tuple[str, dict[str, str], bytes]]) -> None:
    """Written whole and synced before the legacy stream is deleted."""
    spool.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = spool.with_suffix(".partial")
    with open(partial, "wb") as f:
        f.write(pack([list(m) for m in messages]))
        f.flush()
        os.fsync(f.fileno())
    partial.replace(spool)


def _read_spool(spool: Path) -> list[tuple[str, dict[str, str], bytes]] | None:
    """The messages of a move cut short, or None when there is none."""
    if not spool.exists():
        return None
    return [(str(s), dict(h), bytes(d)) for s, h, d in unpack(spool.read_bytes())]
