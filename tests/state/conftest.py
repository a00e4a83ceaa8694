"""The state backends the conformance suite runs against, on real servers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from _postgres import postgres_server, why_not


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the whole session (skipped, saying why, without one)."""
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
async def kv_store(system: Any) -> AsyncIterator[Any]:
    from actorbus.state.kv_store import KeyValueStateStore

    store = KeyValueStateStore.for_namespace(
        system.runtime.js, system.namespace, system.nc.max_payload
    )
    yield store
    await store.close()
