"""OAuth 2 at the gateway, as standard clients find and use it: the official MCP
client discovers the authorization server from a 401 and gets a token by the
client-credentials grant; the official A2A client reads the card's security
scheme, gets a token with Authlib's OAuth client, and sends it with its auth
interceptor. One token serves two agents; scopes, the allow-list of agents and
the token endpoint's errors are each checked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import httpx2
import pytest
from _gateway import host_agents, message, running_gateway
from _js import needs_js, run_js
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from authlib.integrations.httpx_client import AsyncOAuth2Client
from mcp import ClientSession
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.shared.exceptions import MCPError
from test_gateway_auth import basic

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService

SECRET = "s3cret"
CLIENTS = {"tester": SECRET, "echoer": "e-secret"}
SCOPES = {"echoer": ("agent:gw-echo",)}


@pytest.fixture
async def gw(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> AsyncIterator[GatewayService]:
    system: ActorSystem = await make_system()
    await host_agents(system)
    async with running_gateway(
        nats_server.url,
        ns,
        tmp_path / "gw.db",
        "gw-echo",
        "gw-streamer",
        auth="required",
        token_secrets=CLIENTS,
        token_scopes=SCOPES,
        issuer_key=tmp_path / "issuer.key",
    ) as g:
        yield g


async def oauth_token(
    http: aiohttp.ClientSession, base: str, client: str = "tester", **form: str
) -> tuple[int, dict[str, Any]]:
    fields = {"grant_type": "client_credentials", **form}
    secret = CLIENTS.get(client, "wrong")
    async with http.post(f"{base}/oauth/token", data=fields, headers=basic(client, secret)) as r:
        return r.status, await r.json()


async def a2a_send(
    http: aiohttp.ClientSession, url: str, text: str, token: str | None = None
) -> tuple[int, dict[str, str], dict[str, Any]]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message(text)},
    }
    headers = {"A2A-Version": "1.0"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with http.post(url, json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.json()


# -- discovery and refusals ------------------------------------------------------------


async def test_a_401_leads_to_the_metadata_and_the_metadata_to_the_token_endpoint(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    base = gw.http_url
    assert base is not None
    status, headers, body = await a2a_send(http, f"{base}/a2a/gw-echo", "no token")
    assert status == 401
    challenge = headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    meta_url = f"{base}/.well-known/oauth-protected-resource"
    assert f'resource_metadata="{meta_url}"' in challenge
    assert body["error"]["code"] == -32000  # an auth error, not -32603
    async with http.get(meta_url) as r:
        resource = await r.json()
    assert resource["resource"] == base
    assert resource["authorization_servers"] == [base]
    assert {"agent:gw-echo", "agent:gw-streamer", "agent:*", "gateway:status"} <= set(
        resource["scopes_supported"]
    )
    async with http.get(f"{base}/.well-known/oauth-protected-resource/mcp") as r:
        assert (await r.json())["resource"] == base  # RFC 9728's path-suffixed form
    async with http.get(f"{base}/.well-known/oauth-authorization-server") as r:
        server = await r.json()
    assert server["issuer"] == base
    assert server["token_endpoint"] == f"{base}/oauth/token"
    assert server["grant_types_supported"] == ["client_credentials"]

    # Every edge's 401 points there: MCP's, the status page's, ACP's.
    acp_run = {
        "agent_name": "gw-echo",
        "input": [{"role": "user", "parts": [{"content": "x", "content_type": "text/plain"}]}],
    }
    for method, path, body in (
        ("POST", "/mcp", {}),
        ("GET", "/status", None),
        ("POST", "/acp/runs", acp_run),
    ):
        async with http.request(method, base + path, json=body) as r:
            assert r.status == 401, path
            assert f'resource_metadata="{meta_url}"' in r.headers["WWW-Authenticate"], path


async def test_the_cards_say_how_to_get_a_token_and_agree_with_the_root(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    base = gw.http_url
    async with http.get(f"{base}/a2a/gw-echo/.well-known/agent-card.json") as r:
        card = await r.json()
    scheme = card["securitySchemes"]["oauth2"]
    assert scheme["type"] == "oauth2"
    flow = scheme["flows"]["clientCredentials"]
    assert flow["tokenUrl"] == f"{base}/oauth/token"
    assert "agent:gw-echo" in flow["scopes"]
    assert scheme["oauth2SecurityScheme"]["flows"] == scheme["flows"]
    assert card["security"] == [{"oauth2": ["agent:gw-echo"]}]
    assert card["securityRequirements"] == [{"schemes": {"oauth2": {"list": ["agent:gw-echo"]}}}]
    assert card["capabilities"]["pushNotifications"] is True


async def test_a_token_is_scoped_and_one_token_serves_two_agents(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    base = gw.http_url
    assert base is not None
    status, issued = await oauth_token(http, base, scope="agent:gw-echo agent:gw-streamer")
    assert status == 200, issued
    assert issued["token_type"] == "Bearer"
    assert issued["scope"] == "agent:gw-echo agent:gw-streamer"
    token = issued["access_token"]
    for agent in ("gw-echo", "gw-streamer"):
        status, _, body = await a2a_send(http, f"{base}/a2a/{agent}", "one token", token)
        assert status == 200, body
        assert "result" in body, body

    # A client the operator limited gets what it may have, and no more.
    status, narrow = await oauth_token(http, base, client="echoer")
    assert (status, narrow["scope"]) == (200, "agent:gw-echo")
    status, headers, body = await a2a_send(
        http, f"{base}/a2a/gw-streamer", "not mine", narrow["access_token"]
    )
    assert status == 403
    assert 'error="insufficient_scope"' in headers["WWW-Authenticate"]
    assert 'scope="agent:gw-streamer"' in headers["WWW-Authenticate"]
    assert body["error"]["code"] == -32000
    status, refused = await oauth_token(http, base, client="echoer", scope="agent:gw-streamer")
    assert (status, refused["error"]) == (400, "invalid_scope")

    # gateway:status, for the status page.
    status, ops = await oauth_token(http, base, scope="gateway:status")
    async with http.get(
        f"{base}/status", headers={"Authorization": "Bearer " + ops["access_token"]}
    ) as r:
        assert r.status == 200
    async with http.get(f"{base}/status", headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status == 403
        assert 'scope="gateway:status"' in r.headers["WWW-Authenticate"]


async def test_the_token_endpoint_answers_as_rfc_6749_says(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    base = gw.http_url
    assert base is not None
    status, body = await oauth_token(http, base, client="nobody")
    assert (status, body["error"]) == (401, "invalid_client")
    status, body = await oauth_token(http, base, grant_type="password")
    assert (status, body["error"]) == (400, "unsupported_grant_type")
    status, body = await oauth_token(http, base, scope="root")
    assert (status, body["error"]) == (400, "invalid_scope")
    status, body = await oauth_token(http, base, resource="https://elsewhere.example")
    assert (status, body["error"]) == (400, "invalid_target")
    # header names are case-insensitive (HTTP/2 clients send them in lower case)
    lower = {"authorization": basic("tester", SECRET)["Authorization"]}
    async with http.post(
        f"{base}/oauth/token", data={"grant_type": "client_credentials"}, headers=lower
    ) as r:
        assert r.status == 200, await r.text()
    # the secret as form fields (client_secret_post) works too
    form = {"grant_type": "client_credentials", "client_id": "tester", "client_secret": SECRET}
    async with http.post(f"{base}/oauth/token", data=form) as r:
        assert r.status == 200, await r.text()
    # a token for another gateway is refused here
    status, issued = await oauth_token(http, base)
    elsewhere = base.replace("127.0.0.1", "localhost")
    async with http.post(
        f"{elsewhere}/a2a/gw-echo",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": message("x")},
        },
        headers={"Authorization": "Bearer " + issued["access_token"], "A2A-Version": "1.0"},
    ) as r:
        assert r.status == 401
        assert "not this gateway" in (await r.json())["error"]["message"]


async def test_an_a2acp_token_for_every_agent_is_taken(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    ask = {"agent_id": "tester", "target_agent_id": "*", "requested_capabilities": ["*"]}
    async with http.post(
        f"{gw.http_url}/auth/token", json=ask, headers=basic("tester", SECRET)
    ) as r:
        token = (await r.json())["token"]
    for agent in ("gw-echo", "gw-streamer"):
        status, _, body = await a2a_send(http, f"{gw.http_url}/a2a/{agent}", "star", token)
        assert status == 200, body
        assert "result" in body, body


async def test_a_limited_client_gets_no_more_from_the_older_token_endpoint(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    """A client the operator limited to one agent could ask POST /auth/token (the
    A2ACP form) for any agent, or for all: its limit holds there too."""

    async def a2acp(target: str, caps: list[str]) -> tuple[int, dict[str, Any]]:
        ask = {"agent_id": "echoer", "target_agent_id": target, "requested_capabilities": caps}
        headers = basic("echoer", CLIENTS["echoer"])
        async with http.post(f"{gw.http_url}/auth/token", json=ask, headers=headers) as r:
            return r.status, await r.json()

    for target in ("gw-streamer", "*", "registry", "router"):
        status, body = await a2acp(target, ["*"])
        assert status == 403, (target, body)
        assert body["error"]["code"] == "AUTH_FAILED"
        assert "echoer may have agent:gw-echo only" in body["error"]["message"]
    status, body = await a2acp("gw-echo", ["*"])  # its own agent: as before
    assert status == 200, body
    to_echo, _, answer = await a2a_send(http, f"{gw.http_url}/a2a/gw-echo", "hi", body["token"])
    assert to_echo == 200, answer
    elsewhere, _, _ = await a2a_send(http, f"{gw.http_url}/a2a/gw-streamer", "hi", body["token"])
    assert elsewhere == 401  # a token for another agent


# -- the official clients ----------------------------------------------------------------


class MemoryTokens(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@asynccontextmanager
async def oauth_mcp(gw: GatewayService, client: str, storage: TokenStorage) -> AsyncIterator[Any]:
    """An MCP session of the official client with its client-credentials OAuth:
    nothing but the client's id and secret given."""
    base = gw.http_url
    assert base is not None
    provider = ClientCredentialsOAuthProvider(
        server_url=f"{base}/mcp",
        storage=storage,
        client_id=client,
        client_secret=CLIENTS[client],
        issuer=base,
    )
    async with (
        httpx2.AsyncClient(auth=provider, timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_the_mcp_client_finds_the_token_endpoint_and_calls_two_agents(
    gw: GatewayService,
) -> None:
    storage = MemoryTokens()
    async with oauth_mcp(gw, "tester", storage) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"gw-echo.text", "gw-streamer"} <= tools
        shout = await session.call_tool("gw-echo.text", {"text": "hi"})
        words = await session.call_tool("gw-streamer", {"text": "a b"})
    assert not shout.is_error
    assert not words.is_error
    assert "".join(getattr(c, "text", "") for c in shout.content) == "HI"
    assert storage.tokens is not None  # one token, got once, served both
    assert set((storage.tokens.scope or "").split()) >= {"agent:gw-echo", "agent:gw-streamer"}


async def test_the_mcp_client_of_a_limited_client_sees_only_its_agent(gw: GatewayService) -> None:
    async with oauth_mcp(gw, "echoer", MemoryTokens()) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        # a call beyond its scopes: the SDK asks for the scope (a 403's step-up),
        # is granted no more, sends the request again, and is refused for good
        with pytest.raises(MCPError, match="do not cover gw-streamer"):
            await session.call_tool("gw-streamer", {"text": "x"})
    assert tools == {"gw-echo.text", "gw-echo.dict"}


class OAuthCredentials(CredentialService):
    """Tokens for the card's OAuth scheme, from its token URL, with Authlib's
    OAuth client (the client-credentials grant): what an A2A client plugs in."""

    def __init__(self, token_url: str, scopes: str) -> None:
        self.token_url = token_url
        self.scopes = scopes
        self.fetched = 0
        self._token: str | None = None

    async def get_credentials(self, security_scheme_name: str, context: Any) -> str | None:
        if self._token is None:
            async with AsyncOAuth2Client("tester", SECRET, scope=self.scopes) as oauth:
                token = await oauth.fetch_token(self.token_url, grant_type="client_credentials")
            self._token = str(token["access_token"])
            self.fetched += 1
        return self._token


async def test_the_a2a_client_reads_the_card_and_calls_two_agents_with_one_token(
    gw: GatewayService,
) -> None:
    base = gw.http_url
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{base}/a2a/gw-echo/.well-known/agent-card.json")).json()
    flow = card["securitySchemes"]["oauth2"]["flows"]["clientCredentials"]
    credentials = OAuthCredentials(flow["tokenUrl"], "agent:gw-echo agent:gw-streamer")
    texts = {}
    for agent, text in (("gw-echo", "hello"), ("gw-streamer", "a b")):
        client = await create_client(
            f"{base}/a2a/{agent}",
            client_config=ClientConfig(streaming=False),
            interceptors=[AuthInterceptor(credentials)],
        )
        try:
            request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
            [event] = [e async for e in client.send_message(request, context=ClientCallContext())]
        finally:
            await client.close()
        assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        texts[agent] = [p.text for a in event.task.artifacts for p in a.parts]
    assert texts == {"gw-echo": ["HELLO"], "gw-streamer": ["AB"]}
    assert credentials.fetched == 1


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
async def test_the_a2a_js_client_finds_the_token_endpoint_from_a_401(
    gw: GatewayService, transport: str
) -> None:
    for mark in needs_js("@a2a-js/sdk") + needs_js("@modelcontextprotocol/client"):
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    assert gw.http_url is not None
    seen = await run_js(
        "a2a_client.mjs", "oauth", gw.http_url, f"tester:{SECRET}", A2A_TRANSPORT=transport
    )
    assert seen["refused"] == 1  # the first call; the token served every later one
    assert seen["tokensFetched"] == 1
    assert {"agent:gw-echo", "agent:gw-streamer"} <= set(seen["scope"].split())
    answers = seen["answers"]
    assert answers["gw-echo"]["artifacts"] == ["HELLO"]
    assert answers["gw-streamer"]["artifacts"] == ["AB"]


# -- what is exposed -------------------------------------------------------------------


async def test_only_the_agents_exposed_are_listed_or_answered(
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    await host_agents(await make_system())
    async with running_gateway(
        nats_server.url,
        ns,
        tmp_path / "gw.db",
        "gw-echo",
        "gw-streamer",
        expose=("gw-echo",),
    ) as gw:
        async with http.get(f"{gw.http_url}/a2a") as r:
            assert [a["name"] for a in (await r.json())["agents"]] == ["gw-echo"]
        async with http.get(f"{gw.http_url}/a2a/gw-streamer/.well-known/agent-card.json") as r:
            assert r.status == 404
        status, _, body = await a2a_send(http, f"{gw.http_url}/a2a/gw-streamer", "hidden")
        assert status == 404
        assert "no agent 'gw-streamer'" in body["error"]["message"]
        # an open gateway's cards declare no security
        async with http.get(f"{gw.http_url}/a2a/gw-echo/.well-known/agent-card.json") as r:
            assert "securitySchemes" not in await r.json()


async def test_a_host_header_that_is_no_host_is_a_400(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    for host in ("b\u00e4d.example", "a b", "[::1]:99999999"):
        async with http.get(
            f"{gw.http_url}/a2a/gw-echo/.well-known/agent-card.json", headers={"Host": host}
        ) as r:
            assert r.status == 400, host
            assert "Host header" in (await r.json())["message"]
    async with http.get(f"{gw.http_url}/a2a", headers={"Host": "[::1]:8480"}) as r:
        assert r.status == 200  # an IPv6 host is a host
        assert (await r.json())["agents"][0]["url"].startswith("http://[::1]:8480/")


async def test_an_agents_tasks_are_for_those_who_may_ask_it(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    """Reading, listing and cancelling tasks needs the agent's scope too: no
    token is 401, another agent's token 403, on both A2A bindings and ACP."""
    base = gw.http_url
    assert base is not None
    _, issued = await oauth_token(http, base, scope="agent:gw-echo")
    token = issued["access_token"]
    _, _, sent = await a2a_send(http, f"{base}/a2a/gw-echo", "mine", token)
    task_id = sent["result"]["task"]["id"]
    _, narrow = await oauth_token(http, base, client="echoer")  # gw-echo only
    _, other = await oauth_token(http, base, scope="agent:gw-streamer")

    async def get_task(bearer: str | None) -> int:
        headers = {"A2A-Version": "1.0"}
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
        async with http.post(f"{base}/a2a/gw-echo", json=body, headers=headers) as r:
            return r.status

    assert await get_task(None) == 401
    assert await get_task(other["access_token"]) == 403
    assert await get_task(token) == 200
    assert await get_task(narrow["access_token"]) == 200  # it may ask gw-echo too
    async with http.get(f"{base}/a2a/gw-echo/tasks") as r:  # the REST binding
        assert r.status == 401
    async with http.get(
        f"{base}/a2a/gw-echo/tasks/{task_id}",
        headers={"Authorization": "Bearer " + other["access_token"]},
    ) as r:
        assert r.status == 403
    async with http.get(f"{base}/acp/runs/{task_id}") as r:
        assert r.status == 401


async def test_the_mcp_inspector_calls_two_agents_with_one_token(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    """The inspector's CLI has no OAuth flow of its own: it is given the token
    (`--header`), and one token serves both agents' tools."""
    for mark in needs_js("@modelcontextprotocol/inspector"):
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    from _js import JS, run_node

    base = gw.http_url
    assert base is not None
    _, issued = await oauth_token(http, base, scope="agent:*")
    inspector = str(JS / "node_modules" / ".bin" / "mcp-inspector")
    bearer = f"Authorization: Bearer {issued['access_token']}"

    async def inspect(*args: str) -> Any:
        code, out, err = await run_node(inspector, "--cli", f"{base}/mcp", *args)
        assert code == 0, f"inspector {args}: exit {code}\n{out[-2000:]}\n{err[-2000:]}"
        return json.loads(out)

    listed = await inspect("--header", bearer, "--method", "tools/list")
    assert {"gw-echo.text", "gw-streamer"} <= {t["name"] for t in listed["tools"]}
    for tool in ("gw-echo.text", "gw-streamer"):
        called = await inspect(
            "--header",
            bearer,
            "--method",
            "tools/call",
            "--tool-name",
            tool,
            "--tool-arg",
            "text=hi",
        )
        assert called["isError"] is False, called
    code, _, _ = await run_node(inspector, "--cli", f"{base}/mcp", "--method", "tools/list")
    assert code != 0  # without the token: 401
