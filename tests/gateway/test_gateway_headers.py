"""No header makes the gateway answer 500: every edge's paths, each with odd
header values written as raw bytes (non-ASCII, IPv6 and empty hosts, broken
versions, tokens and session ids), on an open and on an authenticating gateway.
Slow and silent clients are cut off by the server's timeouts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _gateway import host_agents, running_gateway

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService

SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
}
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACP_RUN = {
    "agent_name": "gw-echo",
    "input": [{"role": "user", "parts": [{"content": "x", "content_type": "text/plain"}]}],
}
REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/.well-known/agent-card.json", None),
    ("GET", "/a2a", None),
    ("GET", "/a2a/gw-echo/.well-known/agent-card.json", None),
    ("POST", "/a2a/gw-echo", SEND),
    ("POST", "/a2a/gw-echo/message:send", {"message": SEND["params"]["message"]}),  # type: ignore[index]
    ("GET", "/a2a/gw-echo/tasks", None),
    ("POST", "/mcp", MCP_INIT),
    ("GET", "/acp/agents", None),
    ("POST", "/acp/runs", ACP_RUN),
    ("GET", "/anp", None),
    ("GET", "/anp/gw-echo/ad.json", None),
    ("GET", "/anp/gw-echo/did.json", None),
    ("GET", "/agora", None),
    ("POST", "/agora/gw-echo", {"protocolHash": None, "body": "hi"}),
    ("GET", "/healthz", None),
    ("GET", "/status", None),
    ("GET", "/.well-known/did.json", None),
    ("GET", "/.well-known/oauth-protected-resource", None),
    ("GET", "/.well-known/oauth-authorization-server", None),
    ("POST", "/oauth/token", None),
]
ODD_HEADERS: list[dict[str, bytes]] = [
    {"Host": "h\xe4st.example".encode("latin-1")},
    {"Host": b"[::1]:8480"},
    {"Host": b"[::1]"},
    {"Host": b""},
    {"Host": b"a b"},
    {"Host": b"example.com:notaport"},
    {"A2A-Version": b"1.\xff"},
    {"A2A-Version": "v\u00e9".encode()},
    {"MCP-Protocol-Version": b"2025-\xff"},
    {"Mcp-Session-Id": b"\xff\xfe"},
    {"Authorization": b"Bearer \xff\xfe.x.y"},
    {"Authorization": b"Basic \xff"},
    {"Idempotency-Key": b"\xff"},
    {"Accept": b"\xff/\xff"},
    {"Content-Type": b"application/\xff"},
    {"A2A-Extensions": b"\xff"},
]


async def raw_request(
    port: int, method: str, path: str, body: Any, headers: dict[str, bytes]
) -> tuple[int, bytes]:
    """One HTTP/1.1 request written byte for byte (no client library cleans it)."""
    data = b"" if body is None else json.dumps(body).encode()
    head = {b"Host": b"127.0.0.1", b"Content-Type": b"application/json", b"Connection": b"close"}
    for name, value in headers.items():
        head[name.encode()] = value
    lines = [f"{method} {path} HTTP/1.1".encode()]
    lines += [name + b": " + value for name, value in head.items()]
    lines.append(b"Content-Length: " + str(len(data)).encode())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + data)
        await writer.drain()
        async with asyncio.timeout(20):
            answer = await reader.read()
    finally:
        writer.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer


def port_of(gw: GatewayService) -> int:
    assert gw.http_url is not None
    return int(gw.http_url.rsplit(":", 1)[1])


@pytest.fixture(params=["open", "required"])
async def any_gw(
    request: pytest.FixtureRequest,
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
) -> AsyncIterator[GatewayService]:
    system: ActorSystem = await make_system()
    await host_agents(system)
    async with running_gateway(
        nats_server.url,
        ns,
        tmp_path / "gw.db",
        "gw-echo",
        auth=request.param,
        token_secrets={"tester": "s"},
        issuer_key=tmp_path / "issuer.key",
    ) as gw:
        yield gw


async def test_no_header_gets_a_500(any_gw: GatewayService) -> None:
    port = port_of(any_gw)
    assert port is not None
    failures = []
    for method, path, body in REQUESTS:
        for odd in ODD_HEADERS:
            status, answer = await raw_request(port, method, path, body, odd)
            if status == 0 or status >= 500:
                failures.append((method, path, odd, answer[:300]))
    assert not failures, "\n".join(map(repr, failures))


async def test_an_ipv6_host_gets_cards_that_name_it(any_gw: GatewayService) -> None:
    port = port_of(any_gw)
    assert port is not None
    status, answer = await raw_request(
        port, "GET", "/anp/gw-echo/ad.json", None, {"Host": b"[::1]:8480"}
    )
    assert status == 200, answer
    assert b"[::1]:8480" in answer


async def test_slow_and_silent_clients_are_cut_off(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    await host_agents(await make_system())
    async with running_gateway(
        nats_server.url,
        ns,
        tmp_path / "gw.db",
        "gw-echo",
        idle_timeout=1.0,
        body_timeout=1.0,
    ) as gw:
        port = port_of(gw)
        assert port is not None

        async def held_open(send: bytes, dribble: bool) -> float:
            """Seconds until the server closes a connection that sends ``send``
            and then (``dribble``) a byte a second, or nothing."""
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = time.monotonic()
            try:
                writer.write(send)
                async with asyncio.timeout(15):
                    while True:
                        if dribble:
                            try:
                                writer.write(b"x")
                                await writer.drain()
                            except ConnectionError:
                                break
                        try:
                            chunk = await asyncio.wait_for(reader.read(1024), 0.5)
                        except TimeoutError:
                            continue
                        if not chunk:
                            break
            finally:
                writer.close()
            return time.monotonic() - started

        silent = held_open(b"", dribble=False)
        headers_drip = held_open(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", dribble=True)
        body_drip = held_open(
            b"POST /a2a/gw-echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{",
            dribble=True,
        )
        idle = held_open(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", dribble=False)
        times = await asyncio.gather(silent, headers_drip, body_drip, idle)
        assert all(t < 8 for t in times), times
