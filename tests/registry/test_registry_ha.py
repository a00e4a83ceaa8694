"""High availability: registry instances in separate processes share one store; the
leader is SIGKILLed and another takes over; every instance restarts and nothing is lost."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
from _registry import RegistryProcess, registry_process, target

from actorbus.bus.server import EmbeddedServer
from actorbus.testing import eventually

LEADER_TTL = 1.5  # what registry_process passes


async def status(http: aiohttp.ClientSession, proc: RegistryProcess) -> dict[str, Any]:
    async with http.get(proc.url + "/status") as resp:
        data: dict[str, Any] = await resp.json()
        return data


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url, json=body) as resp:
        data: dict[str, Any] = await resp.json()
        assert resp.status == 201, data
        return data


async def services(http: aiohttp.ClientSession, proc: RegistryProcess) -> list[dict[str, Any]]:
    async with http.get(proc.url + "/services") as resp:
        found: list[dict[str, Any]] = await resp.json()
        return found


def worker(i: int) -> dict[str, Any]:
    return {
        "name": f"worker-{i}",
        "host": "127.0.0.1",
        "port": 1000 + i,
        "protocol": "http",
        "ephemeral_check": {"check_type": "TTL", "renewal_delete_timeout": "5m"},
    }


def checked(port: int) -> dict[str, Any]:
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
            "check_timeout": "300ms",
            "check_unhealthy_timeout": "300ms",
        },
    }


async def test_leader_sigkilled_another_takes_over(nats_server: EmbeddedServer, ns: str) -> None:
    async with (
        target() as svc_target,
        contextlib.AsyncExitStack() as stack,
        aiohttp.ClientSession() as http,
    ):
        a, b = await asyncio.gather(
            stack.enter_async_context(registry_process(nats_server.url, ns)),
            stack.enter_async_context(registry_process(nats_server.url, ns)),
        )
        states = [await status(http, p) for p in (a, b)]
        assert sorted(s["leader"] for s in states) == [False, True]
        leader, follower = (a, b) if states[0]["leader"] else (b, a)
        assert states[0]["leader_instance"] == leader.instance

        billing = await post(http, leader.url + "/services", checked(svc_target.port))
        ids = {billing["id"]}
        for i in range(10):  # through both instances
            via = leader if i % 2 else follower
            ids.add((await post(http, via.url + "/services", worker(i)))["id"])
        await asyncio.sleep(0.3)
        assert svc_target.health_hits >= 1  # the leader checks it

        leader.proc.kill()  # SIGKILL: no release, the lease must expire
        await leader.proc.wait()
        killed_at = time.monotonic()
        svc_target.healthy = False  # only a new leader can notice this now
        for i in range(10, 15):  # the survivor takes registrations meanwhile
            ids.add((await post(http, follower.url + "/services", worker(i)))["id"])

        async def billing_unhealthy() -> bool:
            found = {s["id"]: s for s in await services(http, follower)}
            return found[billing["id"]]["health_status"] == "unhealthy"

        await eventually(billing_unhealthy, 6.0, "the survivor runs the checks")
        took = time.monotonic() - killed_at
        print(f"failover: unhealthy marked by the new leader {took:.2f}s after the kill")
        # lease expiry (<= ttl) + next attempt (<= ttl/3) + unhealthy timeout + slack
        assert took < LEADER_TTL * 4 / 3 + 0.3 + 2.0, took
        now = await status(http, follower)
        assert now["leader"] is True
        assert now["leader_instance"] == follower.instance
        assert {s["id"] for s in await services(http, follower)} == ids  # nothing lost


async def test_persistent_services_survive_restarting_every_instance(
    nats_server: EmbeddedServer, ns: str
) -> None:
    persistent = {
        "name": "ledger",
        "ephemeral": False,
        "host": "127.0.0.1",
        "port": 7000,
        "protocol": "http",
        "agent_protocol": "a2a",
        "agent_info": {"a2a_agent_card": {"name": "ledger"}},
    }
    async with aiohttp.ClientSession() as http:
        async with contextlib.AsyncExitStack() as stack:
            a, b = await asyncio.gather(
                stack.enter_async_context(registry_process(nats_server.url, ns)),
                stack.enter_async_context(registry_process(nats_server.url, ns)),
            )
            kept = [await post(http, a.url + "/services", persistent)]
            kept.append(await post(http, b.url + "/services", {**persistent, "port": 7001}))
            route = await post(http, a.url + "/routes", {"name": "ledger", "service": "ledger"})
        # Every instance is gone now (SIGTERM); start new ones.
        async with contextlib.AsyncExitStack() as stack:
            c, d = await asyncio.gather(
                stack.enter_async_context(registry_process(nats_server.url, ns)),
                stack.enter_async_context(registry_process(nats_server.url, ns)),
            )
            for proc in (c, d):
                assert await services(http, proc) == kept
                async with http.get(proc.url + "/routes/ledger") as resp:
                    assert await resp.json() == route
            assert sorted([(await status(http, p))["leader"] for p in (c, d)]) == [False, True]
