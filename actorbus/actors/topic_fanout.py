"""One subscription per topic and type for the actors that exist only here.

A topic message goes to every subscribed address once. An address that may
have replicas in other processes (one its spawner named) is delivered once
among them only through a NATS queue group of its own, so it keeps a
subscription of its own (``hosting.py``). But with a subscription each, 1,000
subscribed actors cost the server 1,000 copies of every message, and each
process 1,000 reads, decodes and checks of the same bytes: a third of what
raw nats-py delivered with the same subscriptions.

An address that cannot exist anywhere else needs no queue group: a keyed actor
(its claim makes it the only activation) or one spawned under a key generated
for it. Those share one plain subscription per topic pattern and actor type in
the process. What arrives is decoded and checked once and handed to each
member's mailbox (``ActorCell.deliver_later``: bounded, in arrival order, a
slow member never holding up the others).

The members see one decoded message: its content is not copied for each, as
in AutoGen's and Akka's in-process publish. A handler that changes what it was
given (a ``dict`` argument) must copy it first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actorbus.actors.actor import Actor
from actorbus.actors.cell import ActorCell
from actorbus.actors.mailbox import ENTRANCE
from actorbus.actors.residents import Residents
from actorbus.actors.runtime import Runtime
from actorbus.bus.tasks import YieldEvery

log = logging.getLogger("actorbus.hosting")


@dataclasses.dataclass
class _Group:
    """The members of one type listening to one topic pattern here."""

    cls: type[Actor]
    sub: Subscription
    members: set[str] = dataclasses.field(default_factory=set)  # addresses
    reading: YieldEvery = dataclasses.field(default_factory=YieldEvery)


class TopicFanout:
    """The shared topic subscriptions of one process."""

    def __init__(self, rt: Runtime, residents: Residents) -> None:
        self.rt = rt
        self.residents = residents
        self._groups: dict[tuple[str, str], _Group] = {}  # (pattern, type) -> group
        self._joining: dict[tuple[str, str], asyncio.Lock] = {}

    def members(self, pattern: str, type_name: str) -> frozenset[str]:
        """The addresses sharing ``pattern``'s subscription for ``type_name``."""
        group = self._groups.get((pattern, type_name))
        return frozenset(group.members) if group is not None else frozenset()

    async def join(self, pattern: str, cell: ActorCell) -> None:
        """Deliver what is published on ``pattern`` to ``cell``'s address too."""
        key = (pattern, cell.cls.type_name)
        async with self._joining.setdefault(key, asyncio.Lock()):  # one subscription each
            group = self._groups.get(key)
            if group is None:
                group = await self._open(pattern, cell.cls)
                self._groups[key] = group
            group.members.add(cell.address)

    async def leave(self, cell: ActorCell) -> None:
        """``cell``'s address no longer listens here (its last replica stops);
        a subscription left without members is given back."""
        if self.residents.cells.get(cell.address):
            return  # another replica of it is still here
        for spec in cell.cls.topics:
            key = (spec.topic or "", cell.cls.type_name)
            group = self._groups.get(key)
            if group is None:
                continue
            group.members.discard(cell.address)
            if not group.members:
                del self._groups[key]
                self._joining.pop(key, None)
                await self._close(group)

    async def close(self, timeout: float) -> None:
        """Stop every shared subscription, letting what it holds reach its members
        first (bounded by ``timeout``)."""
        groups, self._groups = list(self._groups.values()), {}
        self._joining.clear()

        async def drain(group: _Group) -> None:
            try:
                async with asyncio.timeout(timeout):
                    await group.sub.drain()  # type: ignore[no-untyped-call]
            except Exception:
                await self._close(group)

        await asyncio.gather(*(drain(group) for group in groups))

    async def _open(self, pattern: str, cls: type[Actor]) -> _Group:
        rt = self.rt
        everyone = f"{cls.type_name}/*"  # the group answers for each of its members
        cells = self.residents.cells
        group: _Group | None = None

        async def on_topic(msg: Msg) -> None:
            started = time.monotonic()
            if msg.reply:  # a kept topic's message carries its store's ack inbox:
                msg = dataclasses.replace(msg, reply="")  # a topic is never answered
            env = await rt.intake.decode_or_answer(msg, everyone, cls.security)
            if env is None or group is None:
                return
            for address in group.members:  # (deliver_later never waits: no change meanwhile)
                replicas = cells.get(address)
                if not replicas:
                    continue
                cell = replicas[0] if len(replicas) == 1 else min(replicas, key=ActorCell.load)
                cell.deliver_later(msg, env, eager=False)
            if group.reading.due(started):  # a burst: the loop reads on meanwhile
                await asyncio.sleep(0)

        subject = rt.subjects.topic(pattern, wildcards=True)
        sub = await rt.nc.subscribe(subject, cb=on_topic, **ENTRANCE)
        group = _Group(cls, rt.mailboxes.watch(sub, everyone, cls))
        return group

    async def _close(self, group: _Group) -> None:
        self.rt.mailboxes.forget(group.sub)
        try:
            await group.sub.unsubscribe()
        except Exception as exc:  # the connection is closing: nothing left to give back
            log.debug("shared topic subscription on %s: %r", group.sub.subject, exc)
