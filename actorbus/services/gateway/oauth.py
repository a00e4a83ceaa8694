"""OAuth 2 at the gateway, as MCP and A2A clients expect to find it.

The gateway is both the protected resource and its authorization server:

- ``/.well-known/oauth-protected-resource`` (RFC 9728) names the resource (the
  gateway's base URL), its authorization server (the same URL) and the scopes;
  every 401 points there in ``WWW-Authenticate: Bearer resource_metadata=...``;
- ``/.well-known/oauth-authorization-server`` (RFC 8414) names the token
  endpoint and what it supports;
- ``POST /oauth/token`` takes the client-credentials grant (RFC 6749 §4.4),
  the client authenticated with the secret the operator gave it (HTTP Basic or
  form fields), and answers a JWT access token (RFC 9068) whose audience is
  the gateway and whose scopes name what it may do.

Scopes: ``agent:<name>`` asks that agent (any of its intents), ``agent:*``
every agent the gateway exposes, ``gateway:status`` reads ``GET /status``. A
client asks for what it needs (or for nothing: then all it may have), and gets
what the operator lets it have of that; one token serves any number of agents.

Authlib runs the grant (client authentication, the request's checks, RFC 6749's
error answers); the tokens are signed with the gateway's issuer key (Ed25519)
through joserfc. Tokens from ``POST /auth/token`` (A2ACP's, one agent each) are
still taken: :mod:`actorbus.services.gateway.auth` tells the two apart.
"""

from __future__ import annotations

import hmac
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from authlib.oauth2 import AuthorizationServer, OAuth2Error, OAuth2Request
from authlib.oauth2.rfc6749 import ClientMixin, OAuth2Payload
from authlib.oauth2.rfc6749.errors import InvalidScopeError
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant
from joserfc import jws, jwt
from joserfc.errors import JoseError
from multidict import MultiDictProxy

from actorbus.codecs.errors import AuthError
from actorbus.security.tokens import ALGORITHMS, TokenIssuer, okp_key

AGENT_SCOPE: Final = "agent:"
ANY_AGENT: Final = "agent:*"
STATUS_SCOPE: Final = "gateway:status"
TOKEN_PATH: Final = "/oauth/token"
# RFC 8414 names an authorization endpoint even where no grant uses it (clients'
# metadata models require one): it says the code flow is not served.
AUTHORIZE_PATH: Final = "/oauth/authorize"
RESOURCE_METADATA_PATH: Final = "/.well-known/oauth-protected-resource"
SERVER_METADATA_PATH: Final = "/.well-known/oauth-authorization-server"
ACCESS_TOKEN_TYPE: Final = "at+jwt"
TOKEN_TTL: Final = 3600


def agent_scope(agent: str) -> str:
    return f"{AGENT_SCOPE}{agent}"


def valid_scope(scope: str) -> bool:
    """Is ``scope`` one this gateway knows how to grant?"""
    agent = scope.removeprefix(AGENT_SCOPE)
    return scope == STATUS_SCOPE or (agent != scope and agent != "")


def covers(scopes: Iterable[str], wanted: str) -> bool:
    """Do ``scopes`` grant ``wanted`` (``agent:*`` grants every agent)?"""
    held = set(scopes)
    return wanted in held or (wanted.startswith(AGENT_SCOPE) and ANY_AGENT in held)


# -- metadata ----------------------------------------------------------------------


def resource_metadata(base: str, scopes: list[str]) -> dict[str, Any]:
    """RFC 9728's document for the gateway at ``base``."""
    return {
        "resource": base,
        "authorization_servers": [base],
        "bearer_methods_supported": ["header"],
        "scopes_supported": scopes,
        "resource_name": "actorbus gateway",
    }


def server_metadata(base: str, scopes: list[str]) -> dict[str, Any]:
    """RFC 8414's document for the gateway's authorization server at ``base``."""
    return {
        "issuer": base,
        "authorization_endpoint": base + AUTHORIZE_PATH,
        "token_endpoint": base + TOKEN_PATH,
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "response_types_supported": [],
        "scopes_supported": scopes,
    }


NO_AUTHORIZATION: Final = {
    "error": "unsupported_response_type",
    "error_description": "this server issues tokens by the client-credentials grant only "
    f"(POST {TOKEN_PATH})",
}


def challenge(base: str, error: str | None = None, scope: str | None = None) -> str:
    """The ``WWW-Authenticate`` value of a 401 (or a 403 for a scope): where the
    resource's metadata is, and what was wrong (RFC 6750 §3)."""
    parts = [f'Bearer realm="actorbus", resource_metadata="{base}{RESOURCE_METADATA_PATH}"']
    if error is not None:
        parts.append(f'error="{error}"')
    if scope is not None:
        parts.append(f'scope="{scope}"')
    return ", ".join(parts)


# -- the authorization server ------------------------------------------------------


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707's error for a ``resource`` this server issues no tokens for."""

    error = "invalid_target"


@dataclass(frozen=True)
class TokenClient(ClientMixin):  # type: ignore[misc]  # authlib is untyped
    """A client the operator registered: its id, its secret, and the scopes it
    may have (None: any)."""

    client_id: str
    secret: str
    scopes: frozenset[str] | None = None

    def get_client_id(self) -> str:
        return self.client_id

    def check_client_secret(self, client_secret: str) -> bool:
        return hmac.compare_digest(self.secret.encode(), str(client_secret).encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return endpoint == "token" and method in ("client_secret_basic", "client_secret_post")

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials"

    def allowed(self, requested: list[str]) -> list[str]:
        """What of ``requested`` (nothing: all it may have) this client gets."""
        if self.scopes is None:
            return requested or [ANY_AGENT, STATUS_SCOPE]
        if not requested:
            return sorted(self.scopes)
        return [s for s in requested if covers(self.scopes, s)]


class _Form(OAuth2Payload):  # type: ignore[misc]
    def __init__(self, form: MultiDictProxy[str]) -> None:
        self._form = form

    @property
    def data(self) -> dict[str, str]:
        return {key: self._form[key] for key in self._form}

    @property
    def datalist(self) -> dict[str, list[str]]:
        return {key: self._form.getall(key) for key in self._form}


class TokenRequest(OAuth2Request):  # type: ignore[misc]
    """A token request as Authlib reads it, with the audience its token gets."""

    def __init__(
        self, uri: str, headers: Mapping[str, str], form: MultiDictProxy[str], audience: str
    ) -> None:
        super().__init__("POST", uri, headers=headers)  # case-insensitive, as received
        self.payload = _Form(form)
        self._form = form
        self.audience = audience

    @property
    def form(self) -> MultiDictProxy[str]:
        return self._form

    @property
    def args(self) -> dict[str, str]:
        return {}


class _ClientCredentials(ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def validate_requested_scope(self) -> None:
        requested = self.request.payload.scope
        unknown = [s for s in (requested or "").split() if not valid_scope(s)]
        if unknown:
            raise InvalidScopeError(
                f"unknown scope {unknown[0]!r}: ask for agent:<name>, agent:* or {STATUS_SCOPE}"
            )
        resource = self.request.payload.data.get("resource")
        base: str = self.request.audience
        if (
            resource is not None
            and resource.rstrip("/") != base
            and not resource.startswith(base + "/")
        ):
            raise InvalidTargetError(f"this server issues tokens for {base}, not {resource}")

    def create_token_response(self) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        client: TokenClient = self.request.client
        granted = client.allowed((self.request.payload.scope or "").split())
        if not granted:
            raise InvalidScopeError("none of the scopes asked for is granted to this client")
        tokens: AccessTokens = self.server.tokens
        token, ttl = tokens.issue(client.client_id, granted, self.request.audience)
        body = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": ttl,
            "scope": " ".join(granted),
        }
        return 200, body, self.TOKEN_RESPONSE_HEADER


class TokenServer(AuthorizationServer):  # type: ignore[misc]
    """The client-credentials grant of the gateway's registered clients."""

    def __init__(self, clients: Mapping[str, TokenClient], tokens: AccessTokens) -> None:
        super().__init__()
        self.clients = dict(clients)
        self.tokens = tokens
        self.register_grant(_ClientCredentials)

    def query_client(self, client_id: str) -> TokenClient | None:
        return self.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: TokenRequest) -> None:
        """Nothing to keep: the tokens are self-contained JWTs."""

    def create_oauth2_request(self, request: TokenRequest) -> TokenRequest:
        return request

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """No signals here."""

    def handle_response(
        self, status: int, body: Any, headers: list[tuple[str, str]]
    ) -> tuple[int, Any, list[tuple[str, str]]]:
        return status, body, headers

    def answer(self, request: TokenRequest) -> tuple[int, Any, list[tuple[str, str]]]:
        """The token response to ``request``, or RFC 6749's error answer."""
        try:
            result: tuple[int, Any, list[tuple[str, str]]] = self.create_token_response(request)
        except OAuth2Error as error:  # raised before a grant is chosen
            result = self.handle_error_response(request, error)
        return result


# -- the tokens --------------------------------------------------------------------


@dataclass(frozen=True)
class AccessGrant:
    """What a checked access token lets its bearer do."""

    subject: str
    scopes: frozenset[str]
    expires: int


class AccessTokens:
    """RFC 9068 access tokens signed with the gateway's issuer key."""

    def __init__(self, issuer: TokenIssuer, ttl: int = TOKEN_TTL) -> None:
        self._key = okp_key(issuer.identity)
        self._public = okp_key(public=issuer.identity.public)
        self.ttl = ttl

    def issue(self, client_id: str, scopes: list[str], base: str) -> tuple[str, int]:
        now = int(time.time())
        claims = {
            "iss": base,
            "aud": base,
            "sub": client_id,
            "client_id": client_id,
            "iat": now,
            "exp": now + self.ttl,
            "jti": uuid.uuid4().hex,
            "scope": " ".join(scopes),
        }
        header = {"alg": ALGORITHMS[0], "typ": ACCESS_TOKEN_TYPE}
        return jwt.encode(header, claims, self._key, algorithms=ALGORITHMS), self.ttl

    @staticmethod
    def is_access_token(token: str) -> bool:
        """Does ``token`` say it is one of these (``typ: at+jwt``)? Unverified."""
        try:
            header = jws.extract_compact(token.encode()).headers()
        except (JoseError, ValueError, TypeError, UnicodeError):
            return False
        return str(header.get("typ", "")).lower() in (ACCESS_TOKEN_TYPE, "application/at+jwt")

    def check(self, token: str, base: str | None, now: float | None = None) -> AccessGrant:
        """The grant of ``token`` at the gateway whose base URL is ``base``;
        AuthError naming the first thing wrong."""
        if not token.isascii():
            raise AuthError("a bearer token must be a compact JWT")
        try:
            claims = dict(jwt.decode(token, self._public, algorithms=ALGORITHMS).claims)
        except (JoseError, ValueError, TypeError):
            raise AuthError("the access token's signature does not verify") from None
        at = time.time() if now is None else now
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= at:
            raise AuthError("the access token expired")
        if base is None:
            raise AuthError("the access token's audience cannot be checked (set --public-url)")
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if base not in audiences or claims.get("iss") != base:
            raise AuthError(f"the access token is for {audience!r}, not this gateway ({base})")
        scope = claims.get("scope")
        if not isinstance(scope, str):
            raise AuthError("the access token carries no scope")
        return AccessGrant(str(claims.get("sub")), frozenset(scope.split()), exp)
