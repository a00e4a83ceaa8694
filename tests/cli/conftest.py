"""What the ``actorbus run`` tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actorbus.bus.server import EmbeddedServer


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    """A real nats-server for the ``run`` tests (started here, in the main thread)."""
    srv = EmbeddedServer()
    srv.start_sync()
    try:
        yield srv
    finally:
        srv.stop_sync()
