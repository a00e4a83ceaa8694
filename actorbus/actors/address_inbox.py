"""The durable messages of one spawned actor address: its own consumer, one
message in flight (or the class's ``concurrency``), so a retry, a NAK with a
delay, keeps the order. The steps of one message are the shared ones of
:class:`~actorbus.actors.durable.DurableReader`; a lazily hosted type reads
through :class:`~actorbus.actors.type_inbox.TypeInbox` instead.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import nats.js.errors

from actorbus.actors.durable import DurableReader
from actorbus.actors.in_hand import Held
from actorbus.actors.outbox import Outbox
from actorbus.bus.jetstream import (
    consumer_config,
    consumer_name,
    stream_name,
    type_consumer_name,
)
from actorbus.bus.subjects import Address
from actorbus.bus.tasks import spawn
from actorbus.codecs.errors import ActorBusError

if TYPE_CHECKING:
    from actorbus.actors.cell import ActorCell
    from actorbus.actors.runtime import Runtime


class DurableInbox(DurableReader):
    """One spawned cell's reader of its address's durable messages."""

    def __init__(self, rt: Runtime, cell: ActorCell) -> None:
        self.cell = cell
        self.addr = Address(cell.cls.type_name, cell.key)
        super().__init__(rt, cell.cls, consumer_name(self.addr), cell.address)

    async def start(self) -> None:
        rt = self.rt
        lazy = await self._patiently(lambda: _consumer_exists(rt, self.cls.type_name))
        if lazy:
            raise ActorBusError(
                f"{self.cls.type_name!r} is hosted lazily (register()) elsewhere in this "
                f"namespace; spawning {self.what} too would deliver its durable messages twice"
            )
        config = consumer_config(rt.subjects, self.addr, rt.durable_settings, self.cls.concurrency)
        await self._subscribe(rt.subjects.durable(self.addr), config)

    async def _run(self) -> None:
        if self.cls.concurrency > 1:
            await self._run_concurrently(self.cls.concurrency)
            return
        while not self._stopping:
            batch = await self._fetch(1)
            if batch is None:
                return
            for msg in batch:
                held = self._in_hand.take(msg)
                if held is not None:
                    await self._guarded(held, self.what, self._one(held))

    async def _run_concurrently(self, width: int) -> None:
        """Up to ``width`` messages at once (the actor opted out of strict order)."""
        slots = asyncio.Semaphore(width)
        running: set[asyncio.Task[None]] = set()

        async def one(held: Held) -> None:
            try:
                await self._guarded(held, self.what, self._one(held))
            finally:
                slots.release()

        try:
            while not self._stopping:
                batch = await self._fetch_free(slots)
                if batch is None:
                    return
                for msg in batch:
                    held = self._in_hand.take(msg)
                    if held is None:
                        slots.release()
                    else:
                        spawn(one(held), f"durable message of {self.what}", running)
        finally:
            if running:
                await asyncio.wait(set(running))

    async def _one(self, held: Held) -> None:
        opened = await self._open(held, self.what)
        if opened is None:
            return
        plain, env = opened
        attempt = held.attempts_before + 1
        failed = await self._turn(
            held, self.what, lambda: self._attempt(self.cell, plain, env, attempt)
        )
        if isinstance(failed, Outbox):
            await self._succeeded(held, self.what, env, failed)
            return
        if self._gives_up(failed, attempt):
            await self._dead_letter(held, self.what, env, failed, attempt)
        else:
            await held.msg.nak(delay=self._delay(attempt))


async def _consumer_exists(rt: Runtime, type_: str) -> bool:
    """Does the lazily hosted type's shared consumer exist?"""
    try:
        await rt.js.consumer_info(stream_name(rt.namespace, type_), type_consumer_name(type_))
    except nats.js.errors.NotFoundError:
        return False
    return True
