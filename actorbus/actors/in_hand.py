"""The durable messages a reader holds: kept in progress, and their real attempts.

JetStream delivers a message again when ``ack_wait`` passes without word from
the reader, and counts every delivery. Neither fits a reader that holds messages
for a while: a model call of a minute is not a crash, and a message that waited
in a lazily hosted type's queue behind its key's earlier ones, or was handed
back by a reader that stopped, never reached a handler. So:

- Every message between fetch and settlement is *held* here, and one loop per
  reader tells JetStream it is still in progress every third of ``ack_wait``.
  Only a reader that died (or a loop blocked for ``ack_wait``) lets a message
  go back, which is why ``ack_wait`` can be seconds.
- Attempts are handler starts, not deliveries. The first delivery's start is
  taken for granted (writing it would cost every message a write); every later
  start is recorded in the namespace's attempts bucket before the handler runs,
  and a first delivery handed back before its handler started says so there.
  Only redelivered messages read the bucket, so the common path pays nothing.
  A reader SIGKILLed while a message waited counts it at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import msgpack
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from actorbus.bus.jetstream import attempts_entry, patiently
from actorbus.codecs.errors import ActorBusError

log = logging.getLogger("actorbus.durable")


@dataclass(eq=False)
class Held:
    """One stored message in a reader's hands (one delivery of it)."""

    msg: Msg
    seq: int  # its stream sequence: the same across deliveries
    delivery: int  # JetStream's count of deliveries, this one included
    implied_first: bool = False  # the first delivery's start, counted without a record
    recorded_starts: int = 0  # every other start, as recorded in the bucket
    started: int = 0  # handler starts in this delivery
    recorded: bool = False  # an entry in the attempts bucket exists for it
    settled: bool = False  # acked or terminated: JetStream will not deliver it again

    @property
    def attempts_before(self) -> int:
        """Handler starts before the one about to begin."""
        return int(self.implied_first) + self.recorded_starts


class InHand:
    """The messages one reader holds, kept in progress until each is settled."""

    def __init__(
        self, type_: str, consumer: str, what: str, ack_wait: float, patience: float
    ) -> None:
        self.type = type_
        self.consumer = consumer
        self.what = what  # for logs: an address or 'type/*'
        self.beat = max(0.1, ack_wait / 3)
        self.patience = patience  # seconds a bucket call rides through an election
        self._held: dict[int, Held] = {}
        self._loose: set[int] = set()  # let go unsettled: JetStream delivers them again
        self._settled_max = 0

    def take(self, msg: Msg) -> Held | None:
        """Hold a fetched message; None when it is another delivery of one held
        already (JetStream sent it again while it was held: the holder answers for
        it from now on, so it is not handled twice)."""
        meta = msg.metadata
        seq = meta.sequence.stream
        held = self._held.get(seq)
        if held is not None:
            held.msg, held.delivery = msg, meta.num_delivered
            return None
        held = Held(msg, seq, meta.num_delivered)
        self._held[seq] = held
        self._loose.discard(seq)
        return held

    def let_go(self, held: Held) -> None:
        """It is settled (acked, terminated, handed back) or left to JetStream."""
        if self._held.get(held.seq) is held:
            del self._held[held.seq]
            if held.settled:
                self._settled_max = max(self._settled_max, held.seq)
            else:
                self._loose.add(held.seq)

    def forget_sequences(self) -> None:
        """The stream is a new one (the broker lost its store): what was held or
        settled in the old one says nothing about where to start in it."""
        self._held.clear()
        self._loose.clear()
        self._settled_max = 0

    @property
    def floor(self) -> int:
        """The stream sequence up to which this reader settled everything it took
        (0: it took nothing): where a consumer made again must start."""
        open_ = [*self._held, *self._loose]
        return min(open_) - 1 if open_ else self._settled_max

    def __iter__(self) -> Iterator[Held]:
        return iter(list(self._held.values()))

    def __len__(self) -> int:
        return len(self._held)

    async def keep_in_progress(self) -> None:
        """Forever: tell JetStream every held message is still being worked on."""
        while True:
            await asyncio.sleep(self.beat)
            for held in self:
                try:
                    await held.msg.in_progress()
                except Exception as exc:  # the connection away: ack_wait decides
                    log.debug("%s: in-progress of #%d: %r", self.what, held.seq, exc)

    # -- attempts across deliveries --------------------------------------------
    async def recall(self, held: Held, bucket: KeyValue) -> None:
        """Read what earlier deliveries of a redelivered message recorded."""
        if held.delivery == 1:
            return
        held.implied_first = True  # unless its record says it went back unstarted
        try:
            entry = await patiently(
                lambda: bucket.get(self._entry(held)),
                self.patience,
                f"{self.what}: the attempts bucket",
            )
            record = msgpack.unpackb(entry.value or b"\x80")
            held.recorded_starts = int(record.get("starts", 0))
            held.implied_first = not record.get("first_free", False)
            held.recorded = True
        except nats.js.errors.KeyNotFoundError:
            pass
        except Exception as exc:  # unreadable: count generously, the handler still runs
            log.warning("%s: could not read the attempts of #%d: %r", self.what, held.seq, exc)

    async def starting(self, held: Held, bucket: KeyValue) -> None:
        """Record a handler start before it runs (the first delivery's first start
        is taken for granted and costs nothing)."""
        held.started += 1
        if held.delivery == 1 and held.started == 1:
            held.implied_first = True
            return
        held.recorded_starts += 1
        await self._record(held, bucket, held.recorded_starts, not held.implied_first)

    async def handed_back(self, held: Held, bucket: KeyValue) -> None:
        """A first delivery goes back unstarted: its next delivery must not count it."""
        if held.delivery == 1 and held.started == 0:
            await self._record(held, bucket, 0, True)

    async def settled(self, held: Held, bucket: KeyValue) -> None:
        """The message is done with: its record is no longer needed (best effort;
        the bucket's ttl removes what is left)."""
        held.settled = True
        if held.recorded:
            with contextlib.suppress(Exception):
                await bucket.delete(self._entry(held))

    def _entry(self, held: Held) -> str:
        return attempts_entry(self.type, self.consumer, held.seq)

    async def _record(self, held: Held, bucket: KeyValue, starts: int, first_free: bool) -> None:
        record = msgpack.packb({"starts": starts, "first_free": first_free})
        try:
            await patiently(
                lambda: bucket.put(self._entry(held), record),
                self.patience,
                f"{self.what}: the attempts bucket",
            )
            held.recorded = True
        except (nats.errors.Error, TimeoutError, ConnectionError, ActorBusError) as exc:
            # Counting errs on the generous side: the handler still runs.
            log.warning("%s: could not record an attempt of #%d: %r", self.what, held.seq, exc)
