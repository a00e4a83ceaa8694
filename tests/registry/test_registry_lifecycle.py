"""Lifecycles run by the leader: ephemeral expiry, persistent health checks, agent cards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from _registry import Target, running_registry, target, wait_for_service

from actorbus.bus.server import EmbeddedServer
from actorbus.codecs.uap import ServiceResponse, UapNotFoundError
from actorbus.services.registry import RegistryService
from actorbus.testing import eventually

CARD = {"name": "Route Planner", "url": "http://127.0.0.1/a2a", "skills": [{"id": "plan"}]}


@pytest.fixture
async def reg(nats_server: EmbeddedServer, ns: str) -> AsyncIterator[RegistryService]:
    async with running_registry(nats_server.url, ns) as r:
        assert r.is_leader
        yield r


@pytest.fixture
async def svc_target() -> AsyncIterator[Target]:
    async with target() as t:
        yield t


async def post(reg: RegistryService, body: dict[str, Any]) -> dict[str, Any]:
    assert reg.http_url is not None
    async with (
        aiohttp.ClientSession() as http,
        http.post(reg.http_url + "/services", json=body) as resp,
    ):
        data: dict[str, Any] = await resp.json()
        assert resp.status == 201, data
        return data


def ephemeral(**check: str) -> dict[str, Any]:
    return {
        "name": "worker",
        "host": "127.0.0.1",
        "port": 9,
        "protocol": "http",
        "ephemeral_check": {"check_type": "TTL", "renewal_interval": "100ms", **check},
    }


def persistent(port: int, **check: str) -> dict[str, Any]:
    return {
        "name": "billing",
        "ephemeral": False,
        "host": "127.0.0.1",
        "port": port,
        "protocol": "http",
        "persistent_check": {
            "check_type": "HTTP",
            "check_http_url": "/health",
            "check_interval": "100ms",
            "check_timeout": "500ms",
            "check_unhealthy_timeout": "300ms",
            **check,
        },
    }


def healthy(svc: ServiceResponse | None) -> bool:
    return svc is not None and svc.healthy


def unhealthy(svc: ServiceResponse | None) -> bool:
    return svc is not None and not svc.healthy


def gone(svc: ServiceResponse | None) -> bool:
    return svc is None


# -- ephemeral ---------------------------------------------------------------------


async def test_silent_ephemeral_service_goes_unhealthy_then_away(reg: RegistryService) -> None:
    body = ephemeral(renewal_unhealthy_timeout="400ms", renewal_delete_timeout="900ms")
    t = time.monotonic()
    sid = (await post(reg, body))["id"]
    sick = await wait_for_service(reg.store, sid, unhealthy)
    assert sick is not None
    assert "no renewal" in (sick.health_output or "")
    assert 0.35 <= time.monotonic() - t < 2.0
    await wait_for_service(reg.store, sid, gone)
    assert 0.85 <= time.monotonic() - t < 3.0

    async def renewal_forgotten() -> bool:
        return reg.store.renewed_at(sid) is None

    await eventually(renewal_forgotten, 2.0, "the renewal state goes with the service")


async def test_renewals_keep_it_alive_and_heal_it(reg: RegistryService) -> None:
    body = ephemeral(renewal_unhealthy_timeout="300ms", renewal_delete_timeout="5s")
    sid = (await post(reg, body))["id"]
    for _ in range(8):  # 0.8 s of renewals, each well within the 300 ms
        await reg.registry.renew(sid)
        await asyncio.sleep(0.1)
        svc = reg.store.get_service(sid)
        assert svc is not None
        assert svc.healthy
    await wait_for_service(reg.store, sid, unhealthy)
    healed = await reg.registry.renew(sid)
    assert healed.healthy
    assert healed.health_output == "renewed"
    assert healthy(reg.store.get_service(sid))


async def test_a_deleted_service_must_register_again(reg: RegistryService) -> None:
    body = ephemeral(renewal_unhealthy_timeout="100ms", renewal_delete_timeout="200ms")
    svc = await post(reg, {**body, "id": "stable-id"})
    await wait_for_service(reg.store, svc["id"], gone)
    with pytest.raises(UapNotFoundError, match="register it again"):
        await reg.registry.renew("stable-id")
    again = await post(reg, {**body, "id": "stable-id"})  # the same id is free again
    assert again["index"] > svc["index"]


# -- persistent ---------------------------------------------------------------------


async def test_persistent_service_health_follows_its_check(
    reg: RegistryService, svc_target: Target
) -> None:
    sid = (await post(reg, persistent(svc_target.port)))["id"]
    await asyncio.sleep(0.3)
    assert svc_target.health_hits >= 2  # checked every 100 ms
    assert healthy(reg.store.get_service(sid))
    svc_target.healthy = False
    t = time.monotonic()
    sick = await wait_for_service(reg.store, sid, unhealthy)
    assert sick is not None
    assert "HTTP 503" in (sick.health_output or "")
    # 300 ms without a passing check, counted from the last one (up to 100 ms before t)
    assert 0.15 <= time.monotonic() - t < 2.0
    svc_target.healthy = True
    back = await wait_for_service(reg.store, sid, healthy)
    assert back is not None
    assert "HTTP 200" in (back.health_output or "")
    svc_target.healthy = False
    await wait_for_service(reg.store, sid, unhealthy)
    hits = svc_target.health_hits
    await asyncio.sleep(1.0)  # far past any ephemeral timeout: never deleted
    assert unhealthy(reg.store.get_service(sid))
    assert svc_target.health_hits > hits


async def test_unreachable_persistent_service_is_marked_unhealthy(
    reg: RegistryService, svc_target: Target
) -> None:
    port = svc_target.port
    await svc_target.stop()  # nothing listens there now
    sid = (await post(reg, persistent(port, check_http_method="HEAD")))["id"]
    sick = await wait_for_service(reg.store, sid, unhealthy)
    assert sick is not None
    assert f"HEAD http://127.0.0.1:{port}/health" in (sick.health_output or "")


async def test_persistent_service_without_check_is_left_alone(reg: RegistryService) -> None:
    body = persistent(9)
    del body["persistent_check"]
    posted = await post(reg, body)
    await asyncio.sleep(0.5)  # ten sweeps
    stored = await reg.store.fetch_service(posted["id"])
    assert stored is not None
    assert stored.healthy
    assert stored.index == posted["index"]


# -- agent cards ---------------------------------------------------------------------


def a2a(port: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": "planner",
        "ephemeral": False,
        "host": "127.0.0.1",
        "port": port,
        "protocol": "http",
        "agent_protocol": "a2a",
        **extra,
    }


async def test_agent_card_fetched_from_the_well_known_path(
    reg: RegistryService, svc_target: Target
) -> None:
    svc_target.documents["/.well-known/agent-card.json"] = CARD
    svc = await post(reg, a2a(svc_target.port))
    assert svc["agent_info"] == {"a2a_agent_card": CARD}
    assert "agent_info_error" not in svc


async def test_agent_card_falls_back_to_agent_json(
    reg: RegistryService, svc_target: Target
) -> None:
    svc_target.documents["/.well-known/agent.json"] = CARD
    svc = await post(reg, a2a(svc_target.port))
    assert svc["agent_info"] == {"a2a_agent_card": CARD}


async def test_agent_info_url(reg: RegistryService, svc_target: Target) -> None:
    manifest = {"name": "chat", "metadata": {"capabilities": []}}
    svc_target.documents["/agents/chat"] = manifest
    svc = await post(
        reg, {**a2a(svc_target.port, agent_protocol="acp"), "agent_info_url": "/agents/chat"}
    )
    assert svc["agent_info"] == {"acp_agent_manifest": manifest}


async def test_unreachable_card_is_stored_with_an_error_and_fetched_later(
    reg: RegistryService,
) -> None:
    later = Target()
    await later.start()
    port = later.port
    await later.stop()  # down at registration time
    svc = await post(reg, a2a(port))
    assert "agent_info" not in svc
    assert "agent-card.json" in svc["agent_info_error"]
    assert "agent.json" in svc["agent_info_error"]
    later.documents["/.well-known/agent-card.json"] = CARD
    await later.start(port)  # up again: the leader retries every 200 ms
    try:
        done = await wait_for_service(
            reg.store, svc["id"], lambda s: s is not None and s.agent_info is not None
        )
        assert done is not None
        assert done.agent_info == {"a2a_agent_card": CARD}
        assert done.agent_info_error is None
    finally:
        await later.stop()
