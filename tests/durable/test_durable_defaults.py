"""Delivery defaults per actor and per handler: a sender that knows the type sends
durably without being told; a call's own ``durable=`` wins; idempotency per intent."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from test_durable import FAST, Entry, Progress

from actorbus import Actor, handler


class Note(BaseModel):
    text: str


class Mixed(Actor):
    """Entries are durable and idempotent; notes are plain fire-and-forget."""

    type_name = "mixed"

    def __init__(self, progress: Progress, notes: asyncio.Queue[str]) -> None:
        self.progress = progress
        self.notes = notes

    @handler(durable=True, idempotent=True)
    async def add(self, e: Entry) -> None:
        self.progress.add(e.n)

    @handler
    async def note(self, n: Note) -> None:
        await self.notes.put(n.text)


class AllDurable(Actor):
    type_name = "all-durable"
    durable = True

    @handler
    async def add(self, e: Entry) -> None: ...

    @handler(durable=False)
    async def ping(self, n: Note) -> None: ...


def test_handler_options_override_the_class_defaults() -> None:
    assert Mixed.has_durable_queue
    assert AllDurable.has_durable_queue
    assert (Mixed.handlers["Entry"].durable, Mixed.handlers["Entry"].idempotent) == (True, True)
    assert (Mixed.handlers["Note"].durable, Mixed.handlers["Note"].idempotent) == (False, False)
    assert AllDurable.handlers["Entry"].durable
    assert not AllDurable.handlers["Note"].durable


async def test_a_sender_that_knows_the_type_follows_its_defaults(make_system) -> None:
    host = await make_system(durable=FAST)
    progress, notes = Progress(), asyncio.Queue[str]()
    await host.spawn(Mixed, "m", progress=progress, notes=notes)
    await host.stop_actor("mixed/m")  # away: only durable sends can wait for it

    sender = await make_system(durable=FAST)
    sender.learn(Mixed)
    await sender.tell("mixed/m", Entry(n=1))  # durable by the handler's default
    await sender.tell("mixed/m", Entry(n=1), idempotency_key="e-1")
    await sender.tell("mixed/m", Entry(n=1), idempotency_key="e-1")  # handled once
    await sender.tell("mixed/m", Entry(n=2), durable=False)  # the call wins: lost
    await sender.tell("mixed/m", Note(text="lost"))  # core NATS, nobody listening
    assert (await sender.queue_stats("mixed/m")).pending == 3

    await host.spawn(Mixed, "m", progress=progress, notes=notes)
    await progress.reached(2)
    await sender.tell("mixed/m", Note(text="live"))
    assert await asyncio.wait_for(notes.get(), 5) == "live"
    assert progress.seen == [1, 1]


async def test_an_unknown_type_gets_core_delivery_unless_asked(make_system) -> None:
    system = await make_system(durable=FAST)
    await system.tell("mixed/unknown", Entry(n=1))  # nobody knows 'mixed' here
    assert [e async for e in system.history(address="mixed/unknown")] == []
    system.learn(AllDurable)
    await system.tell("all-durable/x", Entry(n=1))
    await system.tell("all-durable/x", Note(text="core"))
    await system.tell("all-durable", Entry(n=2))  # anycast has no durable queue: core
    stored = [e.content async for e in system.history(address="all-durable/x")]
    assert stored == [{"n": 1}]


async def test_hosting_a_type_teaches_its_defaults(make_system) -> None:
    system = await make_system(durable=FAST)
    progress: Any = Progress()
    await system.register(Mixed, progress=progress, notes=asyncio.Queue())
    await system.tell("mixed/a", Entry(n=5))  # durable, to a type hosted lazily here
    await progress.reached(1)
    assert progress.seen == [5]
