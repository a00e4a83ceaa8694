"""The durable messages of a lazily hosted type: one consumer for all its keys.

Many messages are in flight (``type_window``), and a queue per key keeps each
key's messages in order; every one of them is kept in progress while it waits
(``actors/in_hand.py``), and a retry waits in place so only its own key waits.
The host processes of the type take turns reading, chosen by a lease; the steps
of one message are the shared ones of :class:`~actorbus.actors.durable.DurableReader`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from nats.aio.msg import Msg

from actorbus.actors.durable import DurableReader
from actorbus.actors.in_hand import Held
from actorbus.actors.outbox import Outbox
from actorbus.bus.jetstream import type_consumer_config, type_consumer_name
from actorbus.bus.leases import LeaderElection, lease_key
from actorbus.bus.tasks import spawn, stop_task
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.inbound import Inbound

# Runs a durable message where its key is hosted (another system): the outcome, or
# None when the key turned out to be hosted here after all.
Forward = Callable[[str, str, Msg, Inbound], Awaitable["Outbox | Exception | None"]]

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor
    from actorbus.actors.cell import ActorCell
    from actorbus.actors.runtime import Runtime


class TypeInbox(DurableReader):
    """The durable messages of a lazily hosted type, for every key, in order per key.

    The host processes of the type take turns: one of them (the holder of the
    type's reader lease) reads the queue, so that a key's messages are never
    handled in two processes at once, and another takes over within the lease's
    ttl when it dies. Each message activates its key's actor in the reading
    process (``cell_for``) the way a direct message does.
    """

    def __init__(
        self,
        rt: Runtime,
        cls: type[Actor],
        place: Callable[[str], Awaitable[ActorCell | str]],
        forward: Forward,
    ) -> None:
        super().__init__(rt, cls, type_consumer_name(cls.type_name), f"{cls.type_name}/*")
        self.place = place  # a key's local instance, or the system hosting it elsewhere
        self.forward = forward  # runs a message at the system hosting its key
        self._slots = asyncio.Semaphore(rt.durable_settings.type_window)
        self._keys: dict[str, deque[Held]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._election: LeaderElection | None = None
        self._stop_timeout = 10.0

    async def start(self) -> None:
        rt = self.rt
        infos = await self._patiently(lambda: rt.js.consumers_info(self.stream))
        # Durable ones only: history reads through throwaway consumers.
        spawned = [i.name for i in infos if i.name != self.consumer and i.config.durable_name]
        if spawned:
            raise ActorBusError(
                f"{self.cls.type_name!r} has spawned durable instances in this namespace "
                f"(consumers {', '.join(spawned[:3])}); hosting it lazily too would deliver "
                "their durable messages twice (delete those consumers or keep to spawn())"
            )
        self._election = LeaderElection(
            await rt.durable.reader_leases(),
            lease_key("durable-reader", self.cls.type_name),
            rt.system_id,
            on_elected=self._begin,
            on_lost=self._halt,
        )
        await self._election.start()

    async def stop(self, timeout: float = 10.0) -> None:
        self._stop_timeout = timeout
        if self._election is not None:
            await self._election.stop()  # a reader halts (on_lost) and lets go

    @property
    def reading(self) -> bool:
        return self._election is not None and self._election.is_leader

    async def _begin(self) -> None:
        self._stopping = False
        self._stop.clear()
        s = self.rt.durable_settings
        self._slots = asyncio.Semaphore(s.type_window)  # workers cut short kept theirs
        await self._subscribe(
            self.rt.subjects.durable_type(self.cls.type_name),
            type_consumer_config(self.rt.subjects, self.cls.type_name, s),
        )

    async def _halt(self) -> None:
        await super().stop(self._stop_timeout)

    async def _run(self) -> None:
        while not self._stopping:
            batch = await self._fetch_free(self._slots)
            if batch is None:
                return
            for msg in batch:
                held = self._in_hand.take(msg)
                if held is None:  # delivered again while held: handled once, by the holder
                    self._slots.release()
                else:
                    self._enqueue(held)

    def _enqueue(self, held: Held) -> None:
        key = self.rt.subjects.key_of(held.msg.subject)
        queued = self._keys.get(key)
        if queued is not None:
            queued.append(held)  # its worker is running and takes it in order
            return
        self._keys[key] = deque([held])
        spawn(self._work(key), f"durable {self.cls.type_name}/{key}", self._workers)

    async def _work(self, key: str) -> None:
        queued = self._keys[key]
        try:
            while queued:
                held = queued[0]
                if self._stopping:  # hand the rest back at once: another host takes them
                    await self._pulls_withdrawn.wait()
                    await self._hand_back(held)
                else:
                    await self._one(held, key)
                queued.popleft()
                self._slots.release()
        finally:
            del self._keys[key]

    async def _drained(self, timeout: float) -> None:
        if self._workers:
            await asyncio.wait(set(self._workers), timeout=timeout)
            for worker in list(self._workers):
                await stop_task(worker, what=f"durable worker of {self.what}")

    async def _one(self, held: Held, key: str) -> None:
        address = f"{self.cls.type_name}/{key}"
        await self._guarded(held, address, self._one_of(held, key, address))

    async def _one_of(self, held: Held, key: str, address: str) -> None:
        opened = await self._open(held, address)
        if opened is None:
            return
        plain, env = opened
        while True:
            attempt = held.attempts_before + 1
            failed = await self._turn(
                held, address, partial(self._attempt_at, key, address, plain, env, attempt)
            )
            if isinstance(failed, Outbox):
                await self._succeeded(held, address, env, failed)
                return
            if self._gives_up(failed, attempt):
                await self._dead_letter(held, address, env, failed, attempt)
                return
            if not self._stopping:
                await self._pause(self._delay(attempt))
            if self._stopping:
                # Handed back at once, not after its backoff: the messages queued
                # behind it on this key are handed back now too, and a delayed one
                # would come back after them, out of order.
                await self._pulls_withdrawn.wait()
                await self._hand_back(held)
                return

    async def _attempt_at(
        self, key: str, address: str, msg: Msg, env: Inbound, attempt: int
    ) -> Outbox | Exception:
        """Run the handler where the key lives: here, or (a keyed actor hosted by
        another process) there, with the outcome brought back."""
        while True:
            where = await self.place(key)
            if not isinstance(where, str):
                return await self._attempt(where, msg, env, attempt)
            try:
                outcome = await self.forward(where, address, msg, env)
            except ActorBusError as err:
                return err
            if outcome is not None:
                return outcome

    async def _pause(self, delay: float) -> None:
        """Wait before a retry (the message is kept in progress meanwhile); a stop
        ends the wait at once, so the message is handed back now rather than after
        ``ack_wait``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay)
