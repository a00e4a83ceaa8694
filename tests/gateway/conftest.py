"""The fixtures every gateway test shares: the agents (hosted in a system of their
own), one gateway in front of them, and an HTTP client. A test module says what
its gateway serves with a module-level ``GATEWAY = GatewayUnderTest(...)``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import GatewayUnderTest, Probe, running_gateway

from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService


def _under_test(request: pytest.FixtureRequest) -> GatewayUnderTest:
    spec: GatewayUnderTest = getattr(request.module, "GATEWAY", GatewayUnderTest())
    return spec


@pytest.fixture
async def probe(request: pytest.FixtureRequest, make_system: Any) -> AsyncIterator[Probe]:
    p = Probe()
    await _under_test(request).host(await make_system(), p)
    yield p
    p.release.set()  # lets "hang" asks finish


@pytest.fixture
async def gw(
    request: pytest.FixtureRequest,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    probe: Probe,
) -> AsyncIterator[GatewayService]:
    spec = _under_test(request)
    overrides: dict[str, Any] = dict(spec.settings)
    if spec.ask_timeout is not None:
        overrides["ask_timeout"] = spec.ask_timeout
    if spec.edges is not None:
        overrides["edges"] = spec.edges
    async with running_gateway(
        nats_server.url, ns, tmp_path / "gw.db", *spec.agents, **overrides
    ) as g:
        yield g


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s
