"""The router as a service: its actor on the bus, its HTTP face, and
``actorbus route dest``, on a real nats-server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _util import WAIT

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.cli.main import main
from actorbus.services.router.actor import RouteDecision, RouteRequest
from actorbus.services.router.service import RouterService, RouterSettings

HELDOUT = Path(__file__).resolve().parent.parent / "fixtures" / "router" / "heldout_scenarios.json"


class Translator(Actor):
    type_name = "translator"
    skills = ("translate",)

    @handler
    async def text(self, text: str) -> str:
        return text[::-1]


@pytest.fixture
async def router(nats_server: EmbeddedServer, ns: str) -> AsyncIterator[RouterService]:
    async with RouterService(
        nats_url=nats_server.url, namespace=ns, settings=RouterSettings(http_port=0)
    ) as service:
        yield service


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=data) as resp:
        return resp.status, (await resp.json() if resp.status != 204 else None)


async def test_the_http_face_selects_routes_and_learns(router: RouterService) -> None:
    base = router.http_url
    scenario = json.loads(HELDOUT.read_text())[2]  # H1-Q3, two pharmaceutical companies
    async with aiohttp.ClientSession() as http:
        status, body = await post(http, f"{base}/select", scenario)
        assert status == 200
        [decision] = body["decisions"]
        assert decision["selected_protocol"] == "ANP"
        assert decision["evidence_spans"]
        to = ["worker/slow", "worker/fast"]
        status, body = await post(http, f"{base}/route", {"candidates": to, "key": "s-1"})
        assert status == 200
        assert body["policy"] == "latency-aware"
        for dest, latency in (("worker/slow", 0.2), ("worker/fast", 0.002)):
            status, _ = await post(
                http, f"{base}/observe", {"destination": dest, "latency_s": latency}
            )
            assert status == 204
        status, body = await post(http, f"{base}/route", {"candidates": to})
        assert body["destination"] == "worker/fast"  # learned from what callers saw
        sticky = {"candidates": [*to, "worker/other"], "key": "s-9", "policy": "consistent-hash"}
        again = [(await post(http, f"{base}/route", sticky))[1]["destination"] for _ in range(4)]
        assert len(set(again)) == 1  # the same session, the same instance
        # bad input: clear, typed, and the service goes on
        status, body = await post(http, f"{base}/route", {"candidates": to, "policy": "vibes"})
        assert status == 400
        assert "unknown policy 'vibes'" in body["error"]["message"]
        status, body = await post(http, f"{base}/select", {"modules": []})
        assert status == 400
        assert body["error"]["code"] == "E_VALIDATION"
        status, body = await post(http, f"{base}/route", b"{not json")
        assert status == 400
        assert body["error"]["code"] == "E_DECODE"
        status, body = await post(http, f"{base}/route", {})
        assert status == 400
        async with http.get(f"{base}/healthz") as resp:
            assert (await resp.json())["actor"] == "router/main"


async def test_the_actor_answers_on_the_bus_and_routes_by_skill(
    router: RouterService, make_system: Any, capsys: Any, nats_server: EmbeddedServer, ns: str
) -> None:
    host: ActorSystem = await make_system()
    await host.spawn(Translator, "1")
    await host.directory.announced()
    caller: ActorSystem = await make_system()
    decision = await caller.ask(
        "router/main", RouteRequest(skill="translate"), returns=RouteDecision, timeout=WAIT
    )
    assert decision.destination == "translator"
    assert await caller.ask(decision.destination, "olleh", timeout=WAIT) == "hello"
    by_type = await caller.ask(
        "router/main", RouteRequest(name="translator"), returns=RouteDecision, timeout=WAIT
    )
    assert by_type.destination == "translator"
    # and from a terminal
    argv = ["route", "dest", "--url", nats_server.url, "--namespace", ns, "--to", "a/1,b/1"]
    code = await asyncio.to_thread(main, [*argv, "--policy", "first-match", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["destination"] == "a/1"
    code = await asyncio.to_thread(main, ["route", "dest", "--url", nats_server.url])
    assert code != 0
    assert "--skill or --to" in capsys.readouterr().err


async def test_routing_and_observing_over_http_need_a_token_where_auth_is_on(
    make_system: Any, tmp_path: Path
) -> None:
    """/route names the namespace's actors and /observe steers where calls go: on a
    secured bus (here auth="required") both need a token from the namespace's
    issuer with their capability; /select reads only the request."""
    from actorbus.security.identity import Identity
    from actorbus.security.tokens import TokenIssuer

    key = tmp_path / "token-issuer.key"
    issuer = TokenIssuer(Identity.load(key), "actorbus")
    settings = RouterSettings(http_port=0, auth="required", issuer_key=key)
    seen = {"destination": "worker/a", "latency_s": 0.01}
    route = {"candidates": ["worker/a", "worker/b"]}
    async with (
        RouterService(system=await make_system(), settings=settings) as router,
        aiohttp.ClientSession() as http,
    ):
        base = router.http_url
        for path, body in (("/route", route), ("/observe", seen)):
            async with http.post(f"{base}{path}", json=body) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"] == "Bearer"
                assert "needs a bearer token" in (await resp.json())["error"]["message"]
        observer, _ = issuer.issue("probe", "router", ["router:observe"])
        as_observer = {"Authorization": f"Bearer {observer}"}
        async with http.post(f"{base}/observe", json=seen, headers=as_observer) as resp:
            assert resp.status == 204
        async with http.post(f"{base}/route", json=route, headers=as_observer) as resp:
            assert resp.status == 401  # observing grants no routing
            assert "lacks the capability" in (await resp.json())["error"]["message"]
        other, _ = issuer.issue("probe", "registry", ["*"])  # another audience
        async with http.post(
            f"{base}/route", json=route, headers={"Authorization": f"Bearer {other}"}
        ) as resp:
            assert resp.status == 401
        router_token, _ = issuer.issue("ops", "router", ["router:route"])
        async with http.post(
            f"{base}/route", json=route, headers={"Authorization": f"Bearer {router_token}"}
        ) as resp:
            assert resp.status == 200
        async with http.post(f"{base}/select", json={"modules": [{"id": "m"}]}) as resp:
            assert resp.status == 200  # open: it reads nothing but the request
