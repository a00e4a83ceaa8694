"""Test your own agents against a real broker: a pytest plugin and one helper.

Where FastStream gives its users ``TestNatsBroker`` (an in-memory stand-in),
actorbus gives a real ``nats-server`` (JetStream on, temp store) started once per
test session on a free loopback port, and a fresh :class:`~actorbus.ActorSystem`
per test in a namespace of its own, so tests on one server never see each
other's actors, queues or registry entries. What a test proves there holds on
a real deployment: delivery, durability, timeouts, the wire format.

With pytest and pytest-asyncio (``pip install 'actorbus[testing]'``), the
fixtures are there as soon as actorbus is installed (a ``pytest11`` entry
point), in pytest-asyncio's auto and strict modes alike::

    from actorbus import Actor, handler

    class Echo(Actor):
        @handler
        async def shout(self, text: str) -> str:
            return text.upper()

    async def test_echo(actorbus_system):
        await actorbus_system.spawn(Echo, "1")
        assert await actorbus_system.ask("echo/1", "hi") == "HI"

- ``actorbus_system``: a connected system for this test, closed after it.
- ``actorbus_systems``: a factory, ``await actorbus_systems()``, for more systems
  in the same namespace (an agent in one, its caller in another: two processes'
  worth of wiring in one test).
- ``actorbus_server``: the session's server (``.url``), for a client of your own.
- ``scripted_model``: a model server speaking OpenAI's and Anthropic's wire
  formats, scripted by the test (:mod:`actorbus.testing.scripted_model`; needs
  ``actorbus[agents]``): point an agent's model at ``scripted_model.openai_url``.

Outside pytest, :func:`running_system` does the same in one ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from actorbus.actors.system import ActorSystem
from actorbus.bus.server import EmbeddedServer

SystemFactory = Callable[..., Awaitable[ActorSystem]]


def fresh_namespace() -> str:
    """A namespace no other test uses (letters and digits, as subjects want)."""
    return f"t{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def running_system(**connect: Any) -> AsyncIterator[ActorSystem]:
    """An embedded server and a system connected to it, both stopped on exit
    (``connect`` goes to :meth:`ActorSystem.connect`)."""
    async with EmbeddedServer() as server:
        system = await ActorSystem.connect(server.url, **connect)
        try:
            yield system
        finally:
            await asyncio.wait_for(system.close(timeout=2.0), 10.0)


@contextlib.asynccontextmanager
async def systems_on(server_url: str, namespace: str) -> AsyncIterator[SystemFactory]:
    """A factory of systems connected to ``server_url`` in ``namespace`` (unless a
    call gives ``url``/``namespace`` of its own); every one is closed on exit, bounded."""
    made: list[ActorSystem] = []

    async def make(url: str | None = None, **connect: Any) -> ActorSystem:
        connect.setdefault("namespace", namespace)
        system = await ActorSystem.connect(url or server_url, **connect)
        made.append(system)
        return system

    try:
        yield make
    finally:
        for system in reversed(made):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(system.close(timeout=2.0), 10.0)


@pytest.fixture(scope="session")
def actorbus_server() -> Iterator[EmbeddedServer]:
    """A real nats-server for the whole test session (JetStream, temp store)."""
    with EmbeddedServer() as server:
        yield server


@pytest_asyncio.fixture
async def actorbus_systems(actorbus_server: EmbeddedServer) -> AsyncIterator[SystemFactory]:
    """Make systems on the session's server, all in this test's own namespace
    (unless ``namespace=`` says otherwise); every one is closed after the test."""
    async with systems_on(actorbus_server.url, fresh_namespace()) as make:
        yield make


@pytest_asyncio.fixture
async def actorbus_system(actorbus_systems: SystemFactory) -> ActorSystem:
    """A system connected to the session's server, in a namespace of this test's own."""
    return await actorbus_systems()


@pytest_asyncio.fixture
async def scripted_model() -> AsyncIterator[Any]:
    """A :class:`~actorbus.testing.scripted_model.ScriptedModel` for this test, on a
    free loopback port, stopped after it."""
    from actorbus.testing.scripted_model import ScriptedModel

    async with ScriptedModel() as model:
        yield model


__all__ = [
    "SystemFactory",
    "actorbus_server",
    "actorbus_system",
    "actorbus_systems",
    "fresh_namespace",
    "running_system",
    "scripted_model",
    "systems_on",
]
