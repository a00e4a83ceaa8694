"""Who may ask the gateway's agents: tokens from POST /auth/token (the A2ACP
claims and rules), open agents, refusals in each protocol's terms, rate limits."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import host_agents, message, running_gateway
from _util import guard_of

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer

SECRET = "s3cret"


def basic(agent: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{agent}:{secret}".encode()).decode()}


async def send(
    http: aiohttp.ClientSession, url: str, text: str, token: str | None = None
) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message(text)},
    }
    hdrs = {"A2A-Version": "1.0"}
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    async with http.post(url, json=body, headers=hdrs) as resp:
        result: dict[str, Any] = await resp.json()
        return result


@pytest.fixture
async def gw_auth(make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path) -> Any:
    system: ActorSystem = await make_system()
    await host_agents(system)
    async with running_gateway(
        nats_server.url,
        ns,
        tmp_path / "gw.db",
        "gw-echo",
        auth="required",
        token_secrets={"tester": SECRET},
        issuer_key=tmp_path / "issuer.key",
    ) as gw:
        yield gw


async def token_for(
    http: aiohttp.ClientSession, base: str, target: str, caps: list[str], secret: str = SECRET
) -> aiohttp.ClientResponse:
    body = {"agent_id": "tester", "target_agent_id": target, "requested_capabilities": caps}
    return await http.post(f"{base}/auth/token", json=body, headers=basic("tester", secret))


async def test_only_a_token_for_the_agent_and_intent_gets_through(
    gw_auth: Any, http: aiohttp.ClientSession
) -> None:
    url = f"{gw_auth.http_url}/a2a/gw-echo"
    refused = await send(http, url, "no token")
    [info] = refused["error"]["data"]
    assert info["reason"] == "AUTH"
    assert info["metadata"]["actorbusCode"] == "E_AUTH"
    assert "POST /oauth/token" in refused["error"]["message"]
    resp = await token_for(http, gw_auth.http_url, "gw-echo", ["*"])
    assert resp.status == 200
    issued = await resp.json()
    assert issued["expires_at"].endswith("Z")
    answered = await send(http, url, "with a token", issued["token"])
    assert "result" in answered, answered
    other = await (await token_for(http, gw_auth.http_url, "billing", ["*"])).json()
    wrong = await send(http, url, "token for another agent", other["token"])
    assert "is for 'billing'" in wrong["error"]["message"]
    narrow = await (await token_for(http, gw_auth.http_url, "gw-echo", ["read:x"])).json()
    lacking = await send(http, url, "token without the capability", narrow["token"])
    assert "lacks the capability" in lacking["error"]["message"]
    forged = issued["token"][:-4] + ("AAAA" if not issued["token"].endswith("AAAA") else "BBBB")
    assert "does not verify" in (await send(http, url, "forged", forged))["error"]["message"]


async def test_the_token_endpoint_knows_its_clients(
    gw_auth: Any, http: aiohttp.ClientSession
) -> None:
    resp = await token_for(http, gw_auth.http_url, "gw-echo", ["*"], secret="guess")
    assert resp.status == 401
    assert (await resp.json())["error"]["code"] == "AUTH_FAILED"
    async with http.post(f"{gw_auth.http_url}/auth/token", data=b"{") as bad:
        assert bad.status == 401  # no credentials at all
    body = b"[" * 10_000
    async with http.post(
        f"{gw_auth.http_url}/auth/token", data=body, headers=basic("tester", SECRET)
    ) as deep:
        assert deep.status == 400
        assert (await deep.json())["error"]["code"] == "INVALID_REQUEST"


async def test_an_open_agent_takes_anyone_and_the_rate_limit_answers_retry_after(
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    system: ActorSystem = await make_system()
    await host_agents(system)
    async with running_gateway(
        nats_server.url,
        ns,
        tmp_path / "gw.db",
        "gw-echo",
        auth="required",
        open_agents=("gw-echo",),
        issuer_key=tmp_path / "k.key",
    ) as gw:
        assert gw.auth is not None
        gw.auth.limits.per_collaboration = 2  # the spec's 100 a minute, made small
        url = f"{gw.http_url}/a2a/gw-echo"
        for i in range(2):
            assert "result" in await send(http, url, f"open {i}")
        limited = await send(http, url, "one too many")
        assert "rate limit" in limited["error"]["message"]
        [info] = limited["error"]["data"]
        assert info["reason"] == "RATE_LIMIT"
        assert float(info["metadata"]["retryAfter"]) >= 1


async def test_a_secured_bus_makes_the_gateway_require_authentication(
    tmp_path: Path,
) -> None:
    from actorbus.bus.server import ServerConfig
    from actorbus.security.secure_broker import SecureBroker
    from actorbus.services.gateway import GatewayService, GatewaySettings

    ns = f"g{uuid.uuid4().hex[:8]}"
    extra = SecureBroker().server_config([ns])
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        settings = GatewaySettings(http_port=0, db_path=str(tmp_path / "gw.db"))
        async with GatewayService(nats_url=server.url, namespace=ns, settings=settings) as gw:
            assert gw.auth is not None  # "auto" on a secured bus: required


async def test_a_gateway_on_a_development_machine_has_a_client_to_get_tokens_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`actorbus gateway` given no --token-clients, on the development bus: the
    namespace's token-clients.json is made with a client `dev` (0600, beside the
    development authority), its secret gets a token, the log says where and how,
    and the next start serves the same secret. Given nothing at all, the log says
    that nobody can get a token."""
    import json

    from actorbus.bus.server import ServerConfig
    from actorbus.security.broker import DevCertificates
    from actorbus.security.secure_broker import SecureBroker
    from actorbus.security.settings import actorbus_home, default_home
    from actorbus.services.gateway import GatewayService, GatewaySettings

    ns = f"c{uuid.uuid4().hex[:8]}"
    clients = default_home(ns) / "token-clients.json"
    extra = SecureBroker().server_config([ns])
    tls = DevCertificates(actorbus_home()).client_context()
    caplog.set_level(logging.WARNING, logger="actorbus.gateway")
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        plain = GatewaySettings(http_port=0, db_path=str(tmp_path / "gw.db"))
        async with GatewayService(nats_url=server.url, namespace=ns, settings=plain):
            assert "nobody can get a token" in caplog.text
        assert not clients.exists()  # made only when asked for

        dev = GatewaySettings(
            http_port=0, db_path=str(tmp_path / "gw.db"), development_clients=True
        )
        secrets_seen = []
        for start in ("first", "second"):
            caplog.clear()
            async with GatewayService(nats_url=server.url, namespace=ns, settings=dev) as gw:
                assert clients.stat().st_mode & 0o777 == 0o600
                secret = json.loads(clients.read_text())["dev"]
                secrets_seen.append(secret)
                hint = next(r.getMessage() for r in caplog.records if "token clients" in r.msg)
                assert str(clients) in hint
                assert f"{gw.http_url}/oauth/token" in hint
                assert ("made now" in hint) == (start == "first")
                assert "nobody can get a token" not in caplog.text
                form = {"grant_type": "client_credentials", "scope": "gateway:status"}
                async with aiohttp.ClientSession() as http:
                    async with http.post(
                        f"{gw.http_url}/oauth/token",
                        data=form,
                        headers=basic("dev", secret),
                        ssl=tls,
                    ) as resp:
                        assert resp.status == 200, await resp.text()
                        token = (await resp.json())["access_token"]
                    status = f"{gw.http_url}/status"
                    headers = {"Authorization": f"Bearer {token}"}
                    async with http.get(status, headers=headers, ssl=tls) as resp:
                        assert resp.status == 200
                    async with http.post(
                        f"{gw.http_url}/oauth/token",
                        data=form,
                        headers=basic("dev", "guessed"),
                        ssl=tls,
                    ) as resp:
                        assert resp.status == 401
        assert secrets_seen[0] == secrets_seen[1]


def test_a_home_with_issued_credentials_gets_no_development_client(tmp_path: Path) -> None:
    from actorbus.services.gateway.clients import development_clients

    assert development_clients(tmp_path / "issued") is None  # no development authority
    assert not (tmp_path / "issued").exists()


def test_the_command_line_takes_open_agents_and_token_clients(tmp_path: Path) -> None:
    from actorbus.services.gateway.__main__ import parser, token_clients

    clients = tmp_path / "clients.json"
    clients.write_text('{"tester": "s3cret"}')
    args = parser().parse_args(
        ["--auth", "required", "--open-agent", "echo", "--token-clients", str(clients)]
    )
    assert args.auth == "required"
    assert args.open_agent == ["echo"]
    assert token_clients(args.token_clients) == ({"tester": "s3cret"}, {})
    clients.write_text('{"a": "s1", "b": {"secret": "s2", "scopes": ["agent:echo"]}}')
    assert token_clients(clients) == ({"a": "s1", "b": "s2"}, {"b": ("agent:echo",)})
    clients.write_text('{"b": {"secret": "s2", "scopes": ["root"]}}')
    with pytest.raises(SystemExit, match="agent:NAME"):
        token_clients(clients)
    clients.write_text('["not", "a", "map"]')
    with pytest.raises(SystemExit, match="JSON object"):
        token_clients(clients)


async def test_a_secured_gateway_serves_its_did_document_where_the_spec_says(
    tmp_path: Path,
) -> None:
    """did:wba:<host> resolves to https://<host>/.well-known/did.json: the gateway
    system's identity, with its key-agreement key (resolved by our own resolver)."""
    from actorbus.bus.server import ServerConfig
    from actorbus.security.broker import DevCertificates
    from actorbus.security.resolver import DidResolver
    from actorbus.security.secure_broker import SecureBroker
    from actorbus.security.settings import actorbus_home
    from actorbus.services.gateway import GatewayService, GatewaySettings

    ns = f"d{uuid.uuid4().hex[:8]}"
    extra = SecureBroker().server_config([ns])
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        settings = GatewaySettings(http_port=0, db_path=str(tmp_path / "gw.db"))
        async with GatewayService(nats_url=server.url, namespace=ns, settings=settings) as gw:
            assert gw.http_url is not None
            assert gw.http_url.startswith("https://")  # a secured bus: HTTPS by default
            did = "did:wba:" + gw.http_url.removeprefix("https://").replace(":", "%3A")
            tls = DevCertificates(actorbus_home()).client_context()
            resolver = DidResolver(tls=tls, loopback_http=False)
            try:
                doc = await resolver.resolve(did)
            finally:
                await resolver.close()
            assert doc.id == did
            assert gw.system is not None
            raw = guard_of(gw.system).system.public.did_document(did)
            assert raw["keyAgreement"] == [f"{did}#agree"]


async def test_an_a2a_request_is_taken_once(gw_auth: Any, http: aiohttp.ClientSession) -> None:
    issued = await (await token_for(http, gw_auth.http_url, "gw-echo", ["*"])).json()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message("only once")},
    }
    hdrs = {"A2A-Version": "1.0", "Authorization": f"Bearer {issued['token']}"}
    url = f"{gw_auth.http_url}/a2a/gw-echo"
    async with http.post(url, json=body, headers=hdrs) as resp:
        assert "result" in await resp.json()
    async with http.post(url, json=body, headers=hdrs) as resp:
        again = await resp.json()
    assert "a replay" in again["error"]["message"]
    assert again["error"]["data"][0]["metadata"]["actorbusCode"] == "E_REPLAY"


# -- every request taken once ------------------------------------------------------------
async def bearer_for(http: aiohttp.ClientSession, gw: Any) -> dict[str, str]:
    issued = await (await token_for(http, gw.http_url, "gw-echo", ["*"])).json()
    return {"Authorization": f"Bearer {issued['token']}"}


def acp_run(text: str, stamp: datetime | None) -> dict[str, Any]:
    """A run as the acp-sdk sends it: every message stamped ``created_at``."""
    part = {"content_type": "text/plain", "content": text}
    msg: dict[str, Any] = {"role": "user", "parts": [part]}
    if stamp is not None:
        msg["created_at"] = msg["completed_at"] = stamp.isoformat()
    return {"agent_name": "gw-echo", "mode": "sync", "input": [msg]}


async def test_an_acp_run_is_taken_once_and_only_when_fresh(
    gw_auth: Any, http: aiohttp.ClientSession
) -> None:
    auth = await bearer_for(http, gw_auth)
    url = f"{gw_auth.http_url}/acp/runs"
    run = acp_run("once", datetime.now(UTC))
    async with http.post(url, json=run, headers=auth) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["status"] == "completed"
    # the same message, the same text but a new stamp: a new request
    async with http.post(url, json=acp_run("once", datetime.now(UTC)), headers=auth) as resp:
        assert resp.status == 200, await resp.text()
    async with http.post(url, json=run, headers=auth) as resp:
        assert resp.status == 409
        body = await resp.json()
        assert body["data"]["code"] == "E_REPLAY"
        assert "a replay" in body["message"]
    stale = acp_run("stale", datetime.now(UTC) - timedelta(hours=2))
    ahead = acp_run("ahead", datetime.now(UTC) + timedelta(minutes=2))
    for what in (stale, ahead):
        async with http.post(url, json=what, headers=auth) as resp:
            assert resp.status == 401
            assert (await resp.json())["data"]["code"] == "E_CLOCK_SKEW"
    # no stamp: only an Idempotency-Key tells it from a replay
    async with http.post(url, json=acp_run("bare", None), headers=auth) as resp:
        assert resp.status == 409
        assert "Idempotency-Key" in (await resp.json())["message"]
    keyed = {**auth, "Idempotency-Key": uuid.uuid4().hex}
    async with http.post(url, json=acp_run("bare", None), headers=keyed) as resp:
        assert resp.status == 200, await resp.text()


async def test_agora_and_stateless_mcp_requests_are_told_apart_by_idempotency_keys(
    gw_auth: Any, http: aiohttp.ClientSession
) -> None:
    auth = await bearer_for(http, gw_auth)
    agora = f"{gw_auth.http_url}/agora/gw-echo"
    body = {"body": "hello", "protocolHash": None}
    async with http.post(agora, json=body, headers=auth) as resp:
        assert resp.status == 409
        refused = await resp.json()
    assert refused["status"] == "failure"
    assert "Idempotency-Key" in refused["error"]
    keyed = {**auth, "Idempotency-Key": uuid.uuid4().hex}
    async with http.post(agora, json=body, headers=keyed) as resp:
        assert (await resp.json())["status"] == "success"
    async with http.post(agora, json=body, headers=keyed) as resp:
        assert resp.status == 409
        again = await resp.json()
    assert again["status"] == "failure"
    assert "E_REPLAY" in again["error"]

    version = "2026-07-28"
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "gw-echo.text",
            "arguments": {"text": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    hdrs = {
        **auth,
        "MCP-Protocol-Version": version,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "gw-echo.text",
    }
    mcp = f"{gw_auth.http_url}/mcp"
    async with http.post(mcp, json=call, headers=hdrs) as resp:
        assert resp.status == 409, await resp.text()
        assert (await resp.json())["error"]["data"]["code"] == "E_REPLAY"
    hdrs["Idempotency-Key"] = uuid.uuid4().hex
    async with http.post(mcp, json=call, headers=hdrs) as resp:
        assert resp.status == 200
        answered = await resp.json()
        assert answered["result"]["content"][0]["text"] == "HI", answered
    async with http.post(mcp, json=call, headers=hdrs) as resp:
        assert resp.status == 409


async def test_refusals_carry_their_http_status_and_a_limited_request_may_come_again(
    gw_auth: Any, http: aiohttp.ClientSession
) -> None:
    url = f"{gw_auth.http_url}/a2a/gw-echo"
    hdrs = {"A2A-Version": "1.0"}
    async with http.post(url, json=a2a_send("who?"), headers=hdrs) as resp:
        assert resp.status == 401
    hdrs.update(await bearer_for(http, gw_auth))
    gw_auth.auth.limits.per_collaboration = 1
    gw_auth.auth.limits.span = 0.5  # the spec's minute, made short
    async with http.post(url, json=a2a_send("first"), headers=hdrs) as resp:
        assert resp.status == 200
    second = a2a_send("second")
    async with http.post(url, json=second, headers=hdrs) as resp:
        assert resp.status == 429
        assert int(resp.headers["Retry-After"]) >= 1
    # refused by the limit, so not taken: the same request is served once it fits
    deadline = time.monotonic() + 5
    while True:
        async with http.post(url, json=second, headers=hdrs) as resp:
            if resp.status == 200:
                assert "result" in await resp.json()
                break
            assert resp.status == 429
            assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    async with http.post(url, json=second, headers=hdrs) as resp:
        assert resp.status in (409, 429)


def a2a_send(text: str) -> dict[str, Any]:
    params = {"message": message(text)}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


async def test_requests_without_ids_are_taken_only_when_the_operator_says_so(
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await host_agents(await make_system())
    with caplog.at_level(logging.WARNING, logger="actorbus"):
        async with running_gateway(
            nats_server.url,
            ns,
            tmp_path / "gw.db",
            "gw-echo",
            auth="required",
            token_secrets={"tester": SECRET},
            issuer_key=tmp_path / "issuer.key",
            request_ids="optional",
        ) as gw:
            auth = await bearer_for(http, gw)
            body = {"body": "hello", "protocolHash": None}
            for _ in range(2):  # no id: nothing to tell a repeat by
                async with http.post(f"{gw.http_url}/agora/gw-echo", json=body, headers=auth) as r:
                    assert (await r.json())["status"] == "success"
    assert any("request_ids='optional'" in r.getMessage() for r in caplog.records)
