"""Delivery defaults per actor and per handler: a sender that knows the type sends
durably without being told; a call's own ``durable=`` wins; idempotency per intent."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from pydantic import BaseModel
from test_durable import FAST, Entry, Progress

from actorbus import Actor, handler
from actorbus.codecs.errors import UnsupportedError
from actorbus.testing import eventually


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


class CoreOnly(Actor):
    """No durable handler: its hosts read no durable queue."""

    type_name = "core-only"

    @handler
    async def add(self, e: Entry) -> None: ...


async def test_a_durable_send_to_a_type_known_to_read_no_queue_is_refused(make_system) -> None:
    """It would be stored and never delivered: the sender says so instead."""
    system = await make_system(durable=FAST)
    system.learn(CoreOnly)
    with pytest.raises(UnsupportedError, match=r"core-only/a would never be delivered.*durable"):
        await system.tell("core-only/a", Entry(n=1), durable=True)
    assert [e async for e in system.history(address="core-only/a")] == []
    await system.tell("core-only/a", Entry(n=1))  # core NATS, as its default says
    system.learn(Mixed)  # a type with a durable handler takes any durable message
    await system.tell("mixed/a", Note(text="queued"), durable=True)


async def test_a_host_names_durable_messages_that_nothing_will_read(
    make_system, caplog: pytest.LogCaptureFixture
) -> None:
    """A sender that does not know the type stores them; the type's host, which
    reads no durable queue, warns of them with the fix."""
    caplog.set_level(logging.WARNING, logger="actorbus.hosting")
    sender = await make_system(durable=FAST)
    for n in range(3):
        await sender.tell("core-only/a", Entry(n=n), durable=True)
    host = await make_system(durable=FAST)
    await host.spawn(CoreOnly, "a")
    await host.spawn(CoreOnly, "b")  # said once per type

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "nothing reads them" in r.getMessage()]

    await eventually(lambda: len(warned()) == 1, timeout=10)
    assert "3 durable message(s) for 'core-only'" in warned()[0]
    assert "@handler(durable=True)" in warned()[0]
