"""The pytest plugin of :mod:`actorbus.testing` (its ``pytest11`` entry point):
the fixtures a user's tests get as soon as actorbus and pytest-asyncio are
installed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from actorbus.actors.system import ActorSystem
from actorbus.testing import (
    SystemFactory,
    TestBroker,
    fresh_namespace,
    in_process_systems,
    systems_on,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--actorbus-open",
        action="store_true",
        help="run actorbus's fixtures on an open broker (no authentication, TLS or "
        "end-to-end security) instead of one secured as production is",
    )
    parser.addoption(
        "--actorbus-broker",
        action="store_true",
        help="run actorbus's in-process fixtures on the session's real broker instead",
    )


@pytest.fixture(scope="session")
def actorbus_server(request: pytest.FixtureRequest) -> Iterator[TestBroker]:
    """A real nats-server for the whole test session (JetStream, temp store),
    secured as production is unless pytest runs with ``--actorbus-open``."""
    with TestBroker(secure=not request.config.getoption("--actorbus-open")) as broker:
        yield broker


@pytest_asyncio.fixture
async def actorbus_systems(actorbus_server: TestBroker) -> AsyncIterator[SystemFactory]:
    """Make systems on the session's server, all in this test's own namespace
    (unless ``namespace=`` says otherwise), joined as members of it; every one
    is closed after the test."""
    async with systems_on(actorbus_server, fresh_namespace()) as make:
        yield make


@pytest_asyncio.fixture
async def actorbus_system(actorbus_systems: SystemFactory) -> ActorSystem:
    """A system connected to the session's server, in a namespace of this test's own."""
    return await actorbus_systems()


@pytest_asyncio.fixture
async def actorbus_in_process_systems(
    request: pytest.FixtureRequest,
) -> AsyncIterator[SystemFactory]:
    """Make systems on an in-process bus of this test's own (no server: each opens
    in about a millisecond); on the session's real broker instead when pytest
    runs with ``--actorbus-broker``. Every one is closed after the test."""
    if request.config.getoption("--actorbus-broker"):
        server: TestBroker = request.getfixturevalue("actorbus_server")
        async with systems_on(server, fresh_namespace()) as make:
            yield make
        return
    async with in_process_systems() as make:
        yield make


@pytest_asyncio.fixture
async def actorbus_in_process_system(actorbus_in_process_systems: SystemFactory) -> ActorSystem:
    """A system on an in-process bus (``--actorbus-broker``: on the real broker)."""
    return await actorbus_in_process_systems()


@pytest_asyncio.fixture
async def scripted_model() -> AsyncIterator[Any]:
    """A :class:`~actorbus.testing.scripted_model.ScriptedModel` for this test, on a
    free loopback port, stopped after it."""
    from actorbus.testing.scripted_model import ScriptedModel

    async with ScriptedModel() as model:
        yield model


__all__ = [
    "actorbus_in_process_system",
    "actorbus_in_process_systems",
    "actorbus_server",
    "actorbus_system",
    "actorbus_systems",
    "scripted_model",
]
