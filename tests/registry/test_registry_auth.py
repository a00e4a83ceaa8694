"""The registry's HTTP API takes changes only with a token (registry:write) from
the namespace's token issuer, the one a gateway's POST /auth/token uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from actorbus.security.identity import Identity
from actorbus.security.tokens import TokenIssuer
from actorbus.services.registry import RegistryService, RegistrySettings

BODY = {"name": "search", "host": "127.0.0.1", "port": 8080, "protocol": "http"}


async def test_writes_need_a_registry_token_and_reads_do_not(
    make_system: Any, tmp_path: Path
) -> None:
    key = tmp_path / "token-issuer.key"
    system = await make_system()
    settings = RegistrySettings(auth="required", issuer_key=key)
    issuer = TokenIssuer(Identity.load(key), "actorbus")
    async with (
        RegistryService(system=system, settings=settings) as reg,
        aiohttp.ClientSession() as http,
    ):
        url = f"{reg.http_url}/services"
        async with http.post(url, json=BODY) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"] == "unauthorized"
            assert resp.headers["WWW-Authenticate"] == "Bearer"
        reader, _ = issuer.issue("someone", "registry", ["registry:read"])
        async with http.post(url, json=BODY, headers={"Authorization": f"Bearer {reader}"}) as r:
            assert r.status == 401
            assert "lacks the capability" in (await r.json())["message"]
        other, _ = issuer.issue("someone", "gateway", ["*"])  # for another audience
        async with http.post(url, json=BODY, headers={"Authorization": f"Bearer {other}"}) as r:
            assert r.status == 401
        writer, _ = issuer.issue("ops", "registry", ["registry:write"])
        auth = {"Authorization": f"Bearer {writer}"}
        async with http.post(url, json=BODY, headers=auth) as resp:
            assert resp.status in (200, 201), await resp.text()
            sid = (await resp.json())["id"]
        async with http.get(url) as resp:  # reading needs nothing
            assert resp.status == 200
            assert [s["id"] for s in await resp.json()] == [sid]
        async with http.delete(f"{url}/{sid}") as resp:
            assert resp.status == 401
        async with http.delete(f"{url}/{sid}", headers=auth) as resp:
            assert resp.status in (200, 204)
