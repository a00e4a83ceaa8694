"""Test your own agents against a real broker: a pytest plugin
(:mod:`actorbus.testing.plugin`), these helpers, and a scripted model server
(:mod:`actorbus.testing.scripted_model`).

Two ways to run, as FastStream offers ``TestNatsBroker`` beside a real broker:

- a real ``nats-server`` (JetStream on, temp store) started once per test
  session on a free loopback port, secured as production is
  (:class:`TestBroker`; pytest's ``--actorbus-open`` for an open one), and a
  fresh :class:`~actorbus.ActorSystem` per test in a namespace of its own, so
  tests on one server never see each other's actors, queues or registry
  entries. What a test proves there holds on a real deployment: delivery,
  durability, timeouts, the wire format, authentication and sealing;
- the in-process bus (:meth:`ActorSystem.in_process`): no server, a system
  opens in a millisecond, for the many tests of what actors do with their
  messages (handlers, ordering, mailboxes, supervision, streams, keyed actors).
  ``--actorbus-broker`` runs the same tests on the real broker.

With pytest and pytest-asyncio (``pip install 'actorbus[testing]'``), the
fixtures are there as soon as actorbus is installed (a ``pytest11`` entry
point, :mod:`actorbus.testing.plugin`), in pytest-asyncio's auto and strict
modes alike::

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
- ``actorbus_in_process_system`` and ``actorbus_in_process_systems``: the same,
  on an in-process bus of this test's own (on the session's broker with
  ``--actorbus-broker``).
- ``actorbus_server``: the session's :class:`TestBroker` (``.url``;
  ``await actorbus_server.client(namespace)`` for a member's own nats-py client).
- ``scripted_model``: a model server speaking OpenAI's and Anthropic's wire
  formats, scripted by the test (:mod:`actorbus.testing.scripted_model`; needs
  ``actorbus[agents]``): point an agent's model at ``scripted_model.openai_url``.

Outside pytest, :func:`running_system` does the same in one ``async with``.
Two waits that tests of actors need, bounded and never a bare sleep:
:func:`eventually` (until a condition holds) and :func:`queue_drained` (until a
durable queue has nothing stored or in flight).
This module needs no pytest: a program (a demo, a container standing in for a
model) imports it without the test tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from actorbus.actors.system import ActorSystem
from actorbus.bus.local import LocalBus
from actorbus.testing.broker import TestBroker

SystemFactory = Callable[..., Awaitable[ActorSystem]]


def fresh_namespace() -> str:
    """A namespace no other test uses (letters and digits, as subjects want)."""
    return f"t{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def running_system(*, secure: bool = True, **connect: Any) -> AsyncIterator[ActorSystem]:
    """A broker of its own (a :class:`TestBroker`: secured unless ``secure=False``)
    and a system connected to it, both stopped on exit (``connect`` goes to
    :meth:`ActorSystem.connect`)."""
    broker = TestBroker(secure=secure)
    await asyncio.to_thread(broker.start_sync)
    try:
        namespace = connect.setdefault("namespace", "ab")
        joined = await broker.join(namespace, connect.get("name", "actorbus"))
        system = await ActorSystem.connect(broker.url, **{**joined, **connect})
        try:
            yield system
        finally:
            await asyncio.wait_for(system.close(timeout=2.0), 10.0)
    finally:
        await asyncio.to_thread(broker.stop_sync)


@contextlib.asynccontextmanager
async def _closed_after(made: list[ActorSystem]) -> AsyncIterator[None]:
    """Close every system in ``made`` on the way out, newest first, each bounded."""
    try:
        yield
    finally:
        for system in reversed(made):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(system.close(timeout=2.0), 10.0)


@contextlib.asynccontextmanager
async def systems_on(server: str | TestBroker, namespace: str) -> AsyncIterator[SystemFactory]:
    """A factory of systems connected to ``server`` (a URL, or a
    :class:`TestBroker`, whose namespaces it joins as members) in ``namespace``
    (unless a call gives ``url``/``namespace`` of its own); every one is closed on
    exit, bounded."""
    made: list[ActorSystem] = []
    broker = server if isinstance(server, TestBroker) else None
    server_url = server.url if isinstance(server, TestBroker) else server

    async def make(url: str | None = None, **connect: Any) -> ActorSystem:
        connect.setdefault("namespace", namespace)
        if broker is not None and url is None:  # what it gives, unless the test says
            joined = await broker.join(connect["namespace"], connect.get("name", "actorbus"))
            connect = {**joined, **connect}
        system = await ActorSystem.connect(url or server_url, **connect)
        made.append(system)
        return system

    async with _closed_after(made):
        yield make


@contextlib.asynccontextmanager
async def in_process_systems(namespace: str = "ab") -> AsyncIterator[SystemFactory]:
    """A factory of systems on one in-process bus (:meth:`ActorSystem.in_process`,
    no server; they see each other as processes on one server do), in
    ``namespace`` unless a call gives its own; every one is closed on exit."""
    bus = LocalBus()
    made: list[ActorSystem] = []

    async def make(**options: Any) -> ActorSystem:
        options.setdefault("namespace", namespace)
        system = await ActorSystem.in_process(bus, **options)
        made.append(system)
        return system

    async with _closed_after(made):
        yield make


async def eventually(
    check: Callable[[], Any], timeout: float = 10.0, what: str = "", interval: float = 0.05
) -> Any:
    """The first truthy result of ``check()`` (awaited when it returns an awaitable),
    asked every ``interval`` seconds for at most ``timeout``: for state that has no
    event to wait on (a broker's counters, another process). AssertionError naming
    ``what`` and the last result when it never comes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what or check} (last: {result!r})")
        await asyncio.sleep(interval)


async def queue_drained(system: ActorSystem, address: str, timeout: float = 30.0) -> None:
    """Until every durable message stored for ``address`` so far is acked: what its
    turns sent was stored before that, so once the receivers' queues are drained
    too, nothing more can arrive (the bound a test of "exactly once" waits for)."""

    async def empty() -> bool:
        stats = await system.queue_stats(address)
        return bool(stats.pending == 0 and stats.in_flight == 0)

    await eventually(empty, timeout, f"{address}'s queue drained")


__all__ = [
    "SystemFactory",
    "TestBroker",
    "eventually",
    "fresh_namespace",
    "in_process_systems",
    "queue_drained",
    "running_system",
    "systems_on",
]
