"""The safety probes against the gateway's edges (for ``bench/safety.py``): TLS,
hijacked and skewed tokens, replays and the status page, on every protocol edge
in the gateway's default secured configuration.

Each edge's request is built as that protocol's own clients build it: A2A with
a ``messageId``, ACP with messages stamped ``created_at`` (as the acp-sdk does),
MCP in a session (2025-11-25) and stateless (2026-07-28, with an
``Idempotency-Key``), Agora with an ``Idempotency-Key``, ANP signed with a
DIDWba header of a did:wba identity served on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from _safety_probes import MARK, NS, Probes, Vault, member, sniffing
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ed25519

from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.security.did import did_document, parse_did
from actorbus.security.didwba import build_auth_header
from actorbus.security.identity import Identity
from actorbus.security.secure_broker import SecureBroker
from actorbus.security.tokens import TokenIssuer
from actorbus.services.gateway import GatewayService, GatewaySettings

EDGES = ("a2a", "acp", "agora", "mcp", "anp")
LEGACY_MCP, MODERN_MCP = "2025-11-25", "2026-07-28"


@dataclass
class Request:
    """One HTTP request to an edge, kept whole so it can be sent again."""

    url: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class DidHost:
    """A did:wba identity (an ANP caller) whose did.json a loopback server serves."""

    def __init__(self) -> None:
        self.key = ed25519.Ed25519PrivateKey.generate()
        self.did = ""
        self._runner: web.AppRunner | None = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[DidHost]:
        app = web.Application()
        doc: dict[str, Any] = {}

        async def serve(request: web.Request) -> web.Response:
            return web.json_response(doc) if request.path == path else web.Response(status=404)

        app.router.add_get("/{tail:.*}", serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        port = self._runner.addresses[0][1]
        self.did = f"did:wba:127.0.0.1%3A{port}:user:probe"
        path = "/" + "/".join(parse_did(self.did).path) + "/did.json"
        doc.update(did_document(self.did, self.key.public_key()))
        try:
            yield self
        finally:
            await self._runner.cleanup()

    def header(self, now: datetime | None = None) -> dict[str, str]:
        """A fresh DIDWba header (a new nonce) for the gateway at 127.0.0.1."""
        signed = build_auth_header(self.did, self.key, "127.0.0.1", now=now or datetime.now(UTC))
        return {"Authorization": signed}


# -- the requests, as each protocol's clients send them -------------------------------
def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def a2a_request(base: str, token: str | None, text: str) -> Request:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return Request(f"{base}/a2a/vault", body, {"A2A-Version": "1.0", **bearer(token)})


def acp_request(base: str, token: str | None, text: str) -> Request:
    stamp = datetime.now(UTC).isoformat()
    part = {"content_type": "text/plain", "content": text}
    message = {"role": "user", "parts": [part], "created_at": stamp, "completed_at": stamp}
    body = {"agent_name": "vault", "mode": "sync", "input": [message]}
    return Request(f"{base}/acp/runs", body, bearer(token))


def agora_request(base: str, token: str | None, text: str) -> Request:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    return Request(
        f"{base}/agora/vault", {"body": text, "protocolHash": None}, {**key, **bearer(token)}
    )


def mcp_call_body(text: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "vault.text", "arguments": {"text": text}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def mcp_session_request(
    http: aiohttp.ClientSession, base: str, token: str | None, text: str
) -> Request:
    """A tools/call in a new 2025-11-25 session (initialized first)."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_MCP,
            "capabilities": {},
            "clientInfo": {"name": "safety-probe", "version": "0"},
        },
    }
    async with http.post(f"{base}/mcp", json=init, headers=bearer(token)) as r:
        session = r.headers.get("Mcp-Session-Id", "")
    hdrs = {**bearer(token), "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY_MCP}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(f"{base}/mcp", json=note, headers=hdrs):
        pass
    return Request(f"{base}/mcp", mcp_call_body(text), hdrs)


def mcp_stateless_request(base: str, token: str | None, text: str) -> Request:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN_MCP,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    hdrs = {
        "MCP-Protocol-Version": MODERN_MCP,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "vault.text",
        "Idempotency-Key": uuid.uuid4().hex,
        **bearer(token),
    }
    return Request(f"{base}/mcp", mcp_call_body(text, meta), hdrs)


def anp_request(base: str, caller: DidHost | None, text: str, **header: Any) -> Request:
    body = {"jsonrpc": "2.0", "id": 1, "method": "text", "params": {"text": text}}
    return Request(f"{base}/anp/vault/rpc", body, caller.header(**header) if caller else {})


async def send(http: aiohttp.ClientSession, edge: str, req: Request) -> tuple[bool, str]:
    """Send ``req`` to ``edge``; (whether it was refused, what came back)."""
    async with http.post(req.url, json=req.body, headers=req.headers) as r:
        body = await r.json()
        said = f"HTTP {r.status}: {str(body)[:200]}"
        if edge == "acp":
            return r.status >= 400 or body.get("status") == "failed", said
        if edge == "agora":
            return body.get("status") != "success", said
        if edge == "mcp":
            result = body.get("result") or {}
            return "error" in body or bool(result.get("isError")), said
        return r.status >= 400 or "error" in body, said


async def edge_request(
    http: aiohttp.ClientSession, base: str, edge: str, token: str | None, text: str
) -> Request:
    if edge == "a2a":
        return a2a_request(base, token, text)
    if edge == "acp":
        return acp_request(base, token, text)
    if edge == "agora":
        return agora_request(base, token, text)
    if edge == "mcp":
        return await mcp_session_request(http, base, token, text)
    req = anp_request(base, None, text)  # a token where a DIDWba signature belongs
    req.headers.update(bearer(token))
    return req


# -- the probes ----------------------------------------------------------------------------
async def gateway_probes(p: Probes, home: Path, work: Path) -> None:
    broker = SecureBroker(home)
    dev_ca = broker.tls.client_context()
    extra = broker.server_config([NS])
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        host = await member(server.url, broker, "vault-host", registry=True)
        await host.spawn(Vault, "1")
        settings = GatewaySettings(
            http_port=0,
            db_path=str(work / "gw.db"),
            token_secrets={"probe": "secret"},
            expose=("vault",),  # a secured gateway serves the agents it is told to
            issuer_key=work / "token-issuer.key",
        )
        try:
            async with (
                GatewayService(nats_url=server.url, namespace=NS, settings=settings) as gw,
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=dev_ca)) as http,
                DidHost().serving() as did,
            ):
                await wait_for_agent(gw)
                base = str(gw.http_url)
                await gateway_tls_probes(p, base)
                await token_probes(p, http, base, gw, work)
                await anp_probes(p, http, base, did)
                good = await issue(http, base, "vault")
                await replay_probes(p, http, base, good, did)
                ports = [int(base.rsplit(":", 1)[1]), int(server.url.rsplit(":", 1)[1])]
                await watermark_probe(p, http, base, good, did, ports, work)
                async with http.get(f"{base}/status") as r:
                    p.add(
                        "gateway",
                        "metadata",
                        "status page without a token",
                        r.status == 401,
                        f"HTTP {r.status}",
                    )
        finally:
            await host.close(timeout=2.0)


async def token_probes(
    p: Probes, http: aiohttp.ClientSession, base: str, gw: GatewayService, work: Path
) -> None:
    """Hijack (no, an expired, a forged, another agent's token) on every edge;
    tokens from an issuer with a wrong clock on the token edges."""
    assert gw.auth is not None
    good = await issue(http, base, "vault")
    other = await issue(http, base, "billing")
    expired, _ = gw.auth.issuer.issue("probe", "vault", ["*"], ttl=60, now=time.time() - 3600)
    rogue = TokenIssuer(Identity.load(work / "rogue.key"), "actorbus")
    forged, _ = rogue.issue("probe", "vault", ["*"])
    for edge in EDGES:
        for name, token in (
            ("no token", None),
            ("expired token", expired),
            ("forged token", forged),
            ("another agent's token", other),
        ):
            p.add(
                edge,
                "hijack",
                name,
                *await send(http, edge, await edge_request(http, base, edge, token, MARK)),
            )
        if edge == "anp":  # the ANP edge takes DIDWba identities, not tokens
            continue
        refused, said = await send(http, edge, await edge_request(http, base, edge, good, "hello"))
        p.control(edge, "a valid token is served", not refused, said)
        for minutes in (-10, -5, -2, 2, 5, 10):  # an issuer's clock off
            skewed, _ = gw.auth.issuer.issue(
                "probe", "vault", ["*"], ttl=60, now=time.time() + 60 * minutes
            )
            req = await edge_request(http, base, edge, skewed, MARK)
            p.add(
                edge, "clock", f"token from a clock {minutes:+d} min", *await send(http, edge, req)
            )
    # a token-bearing request its protocol gives no id, without an Idempotency-Key
    for edge, req in (
        ("agora", agora_request(base, good, MARK)),
        ("acp", acp_request(base, good, MARK)),
        ("mcp", mcp_stateless_request(base, good, MARK)),
    ):
        req.headers.pop("Idempotency-Key", None)
        if edge == "acp":
            for message in req.body["input"]:
                del message["created_at"]
        p.add(edge, "replay", "a request no replay can be told from", *await send(http, edge, req))


async def anp_probes(p: Probes, http: aiohttp.ClientSession, base: str, did: DidHost) -> None:
    """A DIDWba-signed call is served; headers from a clock off are refused."""
    refused, said = await send(http, "anp", anp_request(base, did, "hello"))
    p.control("anp", "a DIDWba-signed request is served", not refused, said)
    for minutes in (-10, -5, -2, 2, 5, 10):
        at = datetime.now(UTC) + timedelta(minutes=minutes)
        req = anp_request(base, did, MARK, now=at)
        p.add(
            "anp",
            "clock",
            f"DIDWba header from a clock {minutes:+d} min",
            *await send(http, "anp", req),
        )


async def replay_probes(
    p: Probes, http: aiohttp.ClientSession, base: str, token: str, did: DidHost
) -> None:
    """A captured request (headers, ids and all) sent again, twice, on every edge."""
    captured = [
        ("a2a", "", a2a_request(base, token, MARK)),
        ("acp", "", acp_request(base, token, MARK)),
        ("agora", "", agora_request(base, token, MARK)),
        ("mcp", " (session)", await mcp_session_request(http, base, token, MARK)),
        ("mcp", " (stateless)", mcp_stateless_request(base, token, MARK)),
        ("anp", "", anp_request(base, did, MARK)),
    ]
    for edge, how, req in captured:
        refused, said = await send(http, edge, req)
        p.control(edge, f"the original request{how} is served", not refused, said)
        for round_ in (1, 2):
            p.add(
                edge,
                "replay",
                f"captured request{how}, round {round_}",
                *await send(http, edge, req),
            )


async def watermark_probe(
    p: Probes,
    http: aiohttp.ClientSession,
    base: str,
    token: str,
    did: DidHost,
    ports: list[int],
    work: Path,
) -> None:
    """A marked request through every edge while tcpdump watches the gateway's
    port and the broker's: HTTPS outside, sealed inside, so no hit."""
    async with sniffing(p, "gateway", ports, work) as wire:
        for edge in EDGES:
            if edge == "anp":
                req = anp_request(base, did, MARK)
            else:
                req = await edge_request(http, base, edge, token, MARK)
            refused, said = await send(http, edge, req)
            p.control(edge, "a marked request is served", not refused, said)
    if wire.data is not None:
        name = f"marked PII in {len(wire.data):,} bytes tcpdump saw"
        p.add("gateway", "watermark", name, wire.hits == 0, f"{wire.hits} hits")


async def gateway_tls_probes(p: Probes, base: str) -> None:
    """The gateway's listener (every edge's): HTTPS only, with its certificate."""
    plain = "http://" + base.removeprefix("https://")

    async def get(url: str, ssl_ctx: ssl.SSLContext | bool) -> int:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx)) as s,
            s.get(f"{url}/healthz") as r,
        ):
            if r.status >= 400:
                raise RuntimeError(f"HTTP {r.status}")
            return r.status

    await p.refused("gateway", "tls", "plaintext HTTP", lambda: get(plain, False))
    await p.refused(
        "gateway",
        "tls",
        "a client that does not trust its CA",
        lambda: get(base, ssl.create_default_context()),
    )


async def issue(http: aiohttp.ClientSession, base: str, target: str) -> str:
    basic = base64.b64encode(b"probe:secret").decode()
    body = {"agent_id": "probe", "target_agent_id": target, "requested_capabilities": ["*"]}
    async with http.post(
        f"{base}/auth/token", json=body, headers={"Authorization": f"Basic {basic}"}
    ) as r:
        return str((await r.json())["token"])


async def wait_for_agent(gw: GatewayService) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(a.name == "vault" for a in await gw.core.agents()):
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the vault agent never showed up in the registry")
