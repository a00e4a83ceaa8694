"""Standard clients on a secured gateway: one OAuth token (client credentials)
for two agents, found the way A2A and MCP clients look for it."""

import asyncio
import tempfile
from pathlib import Path

import httpx
import httpx2
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest
from authlib.integrations.httpx_client import AsyncOAuth2Client
from mcp import ClientSession
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.types import TextContent

from actorbus import Actor, ActorSystem, handler
from actorbus.services.gateway import GatewayService, GatewaySettings

CLIENT, SECRET = "ops", "a-long-random-secret"  # what the operator gave this client


class Triage(Actor):
    """Sorts tickets."""

    @handler
    async def sort(self, text: str) -> str:
        return "billing" if "invoice" in text else "support"


class Billing(Actor):
    """Answers billing questions."""

    @handler
    async def answer(self, text: str) -> str:
        return f"invoice sent again ({text})"


class OAuthCredentials(CredentialService):
    """A2A: a token for the card's OAuth scheme, from its token URL (Authlib's
    client does the client-credentials grant)."""

    def __init__(self, token_url: str, scope: str) -> None:
        self.token_url, self.scope, self.token = token_url, scope, ""

    async def get_credentials(self, security_scheme_name: str, context: object) -> str:
        if not self.token:
            async with AsyncOAuth2Client(CLIENT, SECRET, scope=self.scope) as oauth:
                self.token = (await oauth.fetch_token(self.token_url))["access_token"]
        return self.token


async def with_a2a(base: str) -> None:
    async with httpx.AsyncClient() as http:  # the card says where tokens come from
        card = (await http.get(f"{base}/a2a/triage/.well-known/agent-card.json")).json()
    token_url = card["securitySchemes"]["oauth2"]["flows"]["clientCredentials"]["tokenUrl"]
    credentials = OAuthCredentials(token_url, "agent:triage agent:billing")
    for agent in ("triage", "billing"):
        client = await create_client(
            f"{base}/a2a/{agent}",
            client_config=ClientConfig(streaming=False),
            interceptors=[AuthInterceptor(credentials)],
        )
        message = new_text_message("about my invoice", role=Role.ROLE_USER)
        async for event in client.send_message(
            SendMessageRequest(message=message), context=ClientCallContext()
        ):
            print("A2A", agent, "->", event.task.artifacts[0].parts[0].text)
        await client.close()


class Memory(TokenStorage):
    """MCP: where the client keeps its token (in memory here)."""

    tokens: OAuthToken | None = None
    client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def with_mcp(base: str) -> None:
    # The first request gets a 401 whose WWW-Authenticate names the metadata; the
    # provider follows it to the token endpoint and asks for a token.
    auth = ClientCredentialsOAuthProvider(
        server_url=f"{base}/mcp",
        storage=Memory(),
        client_id=CLIENT,
        client_secret=SECRET,
        issuer=base,
    )
    async with (
        httpx2.AsyncClient(auth=auth) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for tool in ("triage", "billing"):
            result = await session.call_tool(tool, {"text": "about my invoice"})
            [answer] = result.content
            assert isinstance(answer, TextContent)
            print("MCP", tool, "->", answer.text)


async def main() -> None:
    settings = GatewaySettings(
        http_port=0,
        db_path=Path(tempfile.mkdtemp()) / "gateway.sqlite3",
        expose=("triage", "billing"),  # the agents outside clients may reach
        token_secrets={CLIENT: SECRET},  # the token endpoint's clients
        tls="off",  # plain HTTP on loopback for this example; HTTPS by default
    )
    async with ActorSystem.start() as system:  # a secured bus: tokens are required
        await system.spawn(Triage, "1")
        await system.spawn(Billing, "1")
        async with GatewayService(system=system, settings=settings) as gateway:
            assert gateway.http_url is not None
            await with_a2a(gateway.http_url)
            await with_mcp(gateway.http_url)


if __name__ == "__main__":
    asyncio.run(main())
