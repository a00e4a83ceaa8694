"""Who may ask the gateway's agents for what: capability tokens, DIDWba
identities, open agents, and the rate limits.

Every protocol request reaches an actor through ``GatewayCore.submit`` (or the
Agora edge's ask), which calls :meth:`GatewayAuth.authorize` with the agent and
the intent first. The caller is whoever the request proved to be:

- an OAuth access token (``Authorization: Bearer <JWT>``) from this gateway's
  ``POST /oauth/token`` (:mod:`~actorbus.services.gateway.oauth`): audience
  the gateway, scopes ``agent:<name>`` or ``agent:*`` covering the agent;
- a token from ``POST /auth/token``, checked as the A2ACP spec says
  (signature, expiry, audience = the agent or ``*``, the capability for the
  intent, issuer);
- a DID the ANP edge verified (DIDWba or an RFC 9421 signature);
- nobody, which is enough only for an agent the operator opened
  (``GatewaySettings.open_agents``; ``"*"`` opens all).

Then the spec's rate limits apply, per caller, per caller and agent, and in
total. A refusal is an :class:`AuthError` or a :class:`RateLimitedError`
(with ``retry_after``), which each edge answers in its protocol's terms.

A request is taken once. Its id is the one its protocol gives it (A2A's
``messageId``, an MCP session and request id, the digest of ACP messages
stamped with ``created_at``) or else its ``Idempotency-Key`` header; an id seen
again from the same caller for the same agent is a :class:`ReplayError` for as
long as the caller's token lives (an hour at least), and a stamp older than
that, or ahead of the gateway's clock by more than 30 s, a
:class:`ClockSkewError`. A token-bearing request with no id at all could not be
told from a replay, so it is refused unless the operator set
``request_ids="optional"``. DIDWba callers are covered by the ANP edge's
single-use nonces.

Both token endpoints serve the clients the operator lists in ``token_secrets``
(an id and a shared secret, sent as HTTP Basic; OAuth also takes them as form
fields), each limited to its ``token_scopes`` when the operator names them.
Every 401 and 403 answer carries ``WWW-Authenticate: Bearer`` with the
resource's metadata URL (RFC 9728), so a client learns where tokens come from.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import heapq
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web
from multidict import MultiDict, MultiDictProxy

from actorbus.codecs.common import read_json
from actorbus.codecs.errors import (
    AuthError,
    ClockSkewError,
    DecodeError,
    ForbiddenError,
    ReplayError,
)
from actorbus.security.tokens import RateLimits, TokenIssuer, TokenVerifier
from actorbus.services.gateway import oauth
from actorbus.services.gateway.edges.http import base_url, json_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REPLAY_WINDOW = 3600.0  # seconds a request id is remembered at least (a token's usual life)
STAMP_AHEAD = 30.0  # seconds a request's own stamp may be ahead of the gateway's clock
REQUEST_ID_HEADER = "Idempotency-Key"
MAX_IDS = 1_000_000  # request ids remembered; past that the oldest go
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    """What a request proved about its sender."""

    bearer: str | None = None
    did: str | None = None
    request_key: str | None = None  # its Idempotency-Key header
    base: str | None = None  # the gateway's base URL as this request reached it
    refused: list[str] = field(default_factory=list, compare=False)  # scopes it lacked
    # its OAuth token, checked once (a listing asks for each agent)
    access: list[oauth.AccessGrant] = field(default_factory=list, compare=False)
    # (agent, intent) -> who, once authorized: one HTTP request is checked (and
    # counted) once, however many layers ask
    granted: dict[tuple[str, str], str] = field(default_factory=dict, compare=False)


class OutOfScopeError(AuthError):
    """An authenticated token client asked for more than its scopes."""


NOBODY = Caller()
current_caller: ContextVar[Caller | None] = ContextVar("actorbus_gateway_caller", default=None)


class GatewayAuth:
    def __init__(
        self,
        issuer: TokenIssuer,
        *,
        open_agents: tuple[str, ...] = (),
        token_secrets: dict[str, str] | None = None,
        token_scopes: Mapping[str, Iterable[str]] | None = None,
        limits: RateLimits | None = None,
        require_request_ids: bool = True,
        public_url: str | None = None,
    ) -> None:
        self.issuer = issuer
        self.verifier = TokenVerifier.of(issuer)
        self.open_agents = frozenset(open_agents)
        self.public_url = public_url
        secrets = dict(token_secrets or {})
        self._secrets = {
            agent: hashlib.sha256(secret.encode()).digest() for agent, secret in secrets.items()
        }
        scopes = {name: frozenset(granted) for name, granted in (token_scopes or {}).items()}
        clients = {
            name: oauth.TokenClient(name, secret, scopes.get(name))
            for name, secret in secrets.items()
        }
        self.tokens = oauth.AccessTokens(issuer)
        self.token_server = oauth.TokenServer(clients, self.tokens)
        # the names of the agents served (for the scopes the metadata lists); the
        # service sets it once its core runs
        self.agent_names: Callable[[], Awaitable[list[str]]] | None = None
        self.limits = limits or RateLimits()
        self.require_request_ids = require_request_ids
        self._seen: set[tuple[str, str, str]] = set()
        self._expiry: list[tuple[float, tuple[str, str, str]]] = []  # (until, key), a min-heap
        self._full_warned = False

    # -- checking ---------------------------------------------------------------
    def is_open(self, agent: str) -> bool:
        """May anyone ask ``agent``, with no token?"""
        return "*" in self.open_agents or agent in self.open_agents

    def authorize(
        self,
        agent: str,
        intent: str,
        request_id: str | None = None,
        *,
        stamped: float | None = None,
    ) -> str:
        """The caller's name if it may ask ``agent`` for ``intent`` now; else
        AuthError, RateLimitedError, or (a request taken before, or stamped
        ``stamped``, unix seconds, out of bounds) ReplayError / ClockSkewError.
        ``request_id`` is the id the protocol gives the request; without one the
        ``Idempotency-Key`` header is the id."""
        caller = current_caller.get() or NOBODY
        if (agent, intent) in caller.granted:
            return caller.granted[(agent, intent)]
        lives_until = time.time() + REPLAY_WINDOW
        if caller.bearer is not None:
            who, expires = self._bearer(caller, agent, intent)
            lives_until = max(lives_until, expires)
        elif caller.did is not None:
            who = caller.did
        elif self.is_open(agent):
            who = "anonymous"
        else:
            raise AuthError(
                f"{agent} takes only authenticated requests: send a bearer token "
                f"(from POST {oauth.TOKEN_PATH}, or POST /auth/token) or sign the "
                "request (DIDWba)"
            )
        rid = request_id if request_id is not None else caller.request_key
        if rid is None and caller.bearer is not None and self.require_request_ids:
            raise ReplayError(
                f"this request to {agent} carries no id its protocol gives it, so a replay "
                f"of it could not be told apart: send an {REQUEST_ID_HEADER} header, "
                "unique per request"
            )
        if stamped is not None:
            self._check_stamp(rid or "the request", stamped)
        if rid is not None:
            self._check_replay((who, agent, rid))
        self.limits.take(who, agent)  # a request refused here may come again
        if rid is not None:
            self._remember((who, agent, rid), lives_until)
        if caller is not NOBODY:
            caller.granted[(agent, intent)] = who
        return who

    def authenticate(self) -> None:
        """Is the current request fit to come in at all? Its token must verify
        (scopes are checked per agent); without one, only when some agent is
        open. AuthError otherwise."""
        caller = current_caller.get() or NOBODY
        if caller.bearer is None:
            if not self.open_agents:
                raise AuthError(
                    "this gateway takes only authenticated requests: get a bearer token "
                    f"from {oauth.TOKEN_PATH} (its OAuth metadata is at "
                    f"{oauth.RESOURCE_METADATA_PATH})"
                )
            return
        if oauth.AccessTokens.is_access_token(caller.bearer):
            self.tokens.check(caller.bearer, caller.base)
        else:
            self.verifier.verified(caller.bearer)

    def admit(self, agent: str) -> None:
        """For what is not a message to ``agent`` but touches its tasks (get, list,
        cancel, subscribe, push configs): AuthError or ForbiddenError unless the
        current request may ask it. Neither counted nor taken as a replay; the
        gateway's own work (no request) is let through."""
        caller = current_caller.get()
        if caller is None or caller.did is not None or self.is_open(agent):
            return
        if caller.bearer is None:
            raise AuthError(
                f"{agent} takes only authenticated requests: send a bearer token "
                f"(from {oauth.TOKEN_PATH})"
            )
        self._bearer(caller, agent)

    def may_ask(self, agent: str) -> bool:
        """Would the current request be let through to ``agent`` (not counting
        rate limits and replays)? For listings: a caller sees what it may ask."""
        if self.is_open(agent):
            return True
        caller = current_caller.get() or NOBODY
        if caller.bearer is None:
            return False
        try:
            self._bearer(dataclasses.replace(caller, refused=[]), agent)
        except AuthError:
            return False
        return True

    def _bearer(self, caller: Caller, agent: str, intent: str | None = None) -> tuple[str, int]:
        """Who the caller's token names, and until when, if it covers ``agent``
        (and, for an A2ACP token, ``intent``; None: any); AuthError or
        ForbiddenError otherwise."""
        assert caller.bearer is not None
        if not oauth.AccessTokens.is_access_token(caller.bearer):
            needed = () if intent is None else None
            claims = self.verifier.check(caller.bearer, agent, intent or "*", needed)
            return claims.subject, claims.expires
        if not caller.access:
            caller.access.append(self.tokens.check(caller.bearer, caller.base))
        grant = caller.access[0]
        wanted = oauth.agent_scope(agent)
        if not oauth.covers(grant.scopes, wanted):
            raise self._lacks(caller, wanted, f"the token's scopes do not cover {agent}")
        return grant.subject, grant.expires

    @staticmethod
    def _lacks(caller: Caller, scope: str, why: str) -> ForbiddenError:
        """The refusal of a token without ``scope``, noted for the 403's challenge."""
        caller.refused.append(scope)
        refused = ForbiddenError(f"{why} (needs the scope {scope})")
        refused.scope = scope
        return refused

    def _check_stamp(self, rid: str, stamped: float) -> None:
        now = time.time()
        if stamped > now + STAMP_AHEAD or stamped < now - REPLAY_WINDOW:
            ahead = "ahead of" if stamped > now else "behind"
            raise ClockSkewError(
                f"{rid} is stamped {abs(now - stamped):.0f} s {ahead} the gateway's clock "
                f"(allowed: {STAMP_AHEAD:g} s ahead, {REPLAY_WINDOW:g} s behind)"
            )

    def _check_replay(self, key: tuple[str, str, str]) -> None:
        expiry, seen = self._expiry, self._seen
        now = time.time()
        while expiry and expiry[0][0] < now:
            seen.discard(heapq.heappop(expiry)[1])
        if key in seen:
            raise ReplayError(f"request {key[2]!r} from {key[0]} was already taken: a replay")

    def _remember(self, key: tuple[str, str, str], until: float) -> None:
        if len(self._seen) >= MAX_IDS:  # the ids closest to their end go first
            if not self._full_warned:
                log.warning("gateway: %d request ids remembered; forgetting the oldest", MAX_IDS)
                self._full_warned = True
            for _ in range(MAX_IDS // 10):
                self._seen.discard(heapq.heappop(self._expiry)[1])
        self._seen.add(key)
        heapq.heappush(self._expiry, (until, key))

    def check_operator(self, request: web.Request, audience: str, capability: str) -> None:
        """For the gateway's own endpoints: a bearer token with ``capability`` (an
        OAuth scope, or an A2ACP token for ``audience``); AuthError otherwise."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError(f"this needs a bearer token with {capability}")
        if not oauth.AccessTokens.is_access_token(token):
            self.verifier.check(token, audience, capability, [capability])
            return
        grant = self.tokens.check(token, self._base(request))
        if capability not in grant.scopes:
            caller = current_caller.get() or Caller()
            raise self._lacks(caller, capability, "the token's scopes do not include it")

    def _base(self, request: web.Request) -> str | None:
        try:
            return base_url(request, self.public_url)
        except web.HTTPBadRequest:
            return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Note the bearer token and the request id of every request for
        ``authorize``; point every refusal at the resource's OAuth metadata."""
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        bearer = value.strip() if scheme.lower() == "bearer" and value.strip() else None
        key = request.headers.get(REQUEST_ID_HEADER, "").strip() or None
        base = self._base(request)
        caller = Caller(bearer=bearer, request_key=key, base=base)
        token = current_caller.set(caller)
        try:
            response = await handler(request)
        finally:
            current_caller.reset(token)
        if response.status in (401, 403) and base is not None and not response.prepared:
            challenges = response.headers.getall("WWW-Authenticate", [])
            if not any(c.lower().startswith("bearer") for c in challenges):
                error = None if bearer is None else "invalid_token"
                scope = caller.refused[-1] if caller.refused else None
                if response.status == 403:
                    error = "insufficient_scope"
                response.headers.add("WWW-Authenticate", oauth.challenge(base, error, scope))
        return response

    # -- OAuth: metadata and POST /oauth/token -----------------------------------
    def routes(self) -> list[web.RouteDef]:
        """The token endpoints and the metadata that names them."""
        return [
            web.post("/auth/token", self.token),
            web.post(oauth.TOKEN_PATH, self.oauth_token),
            web.route("*", oauth.AUTHORIZE_PATH, self.no_authorization),
            # RFC 9728 §3.1: the path-suffixed form names the same resource
            web.get(oauth.RESOURCE_METADATA_PATH, self.resource_metadata),
            web.get(oauth.RESOURCE_METADATA_PATH + "/{tail:.*}", self.resource_metadata),
            web.get(oauth.SERVER_METADATA_PATH, self.server_metadata),
            web.get(oauth.SERVER_METADATA_PATH + "/{tail:.*}", self.server_metadata),
        ]

    async def scopes(self) -> list[str]:
        """The scopes a client may ask for: each agent's, every agent's, the status."""
        names = await self.agent_names() if self.agent_names is not None else []
        return [oauth.ANY_AGENT, *(oauth.agent_scope(n) for n in names), oauth.STATUS_SCOPE]

    async def resource_metadata(self, request: web.Request) -> web.Response:
        base = base_url(request, self.public_url)
        return json_response(oauth.resource_metadata(base, await self.scopes()))

    async def server_metadata(self, request: web.Request) -> web.Response:
        base = base_url(request, self.public_url)
        return json_response(oauth.server_metadata(base, await self.scopes()))

    async def no_authorization(self, request: web.Request) -> web.Response:
        return json_response(oauth.NO_AUTHORIZATION, 400)

    async def oauth_token(self, request: web.Request) -> web.Response:
        """The client-credentials grant (RFC 6749 §4.4), answered by Authlib."""
        base = base_url(request, self.public_url)
        form = await request.post()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        asked = oauth.TokenRequest(
            base + oauth.TOKEN_PATH, request.headers, MultiDictProxy(MultiDict(fields)), base
        )
        status, body, headers = self.token_server.answer(asked)
        extra = {k: v for k, v in headers if k.lower() != "content-type"}  # no-store, ...
        return json_response(body, status, extra)

    # -- POST /auth/token --------------------------------------------------------
    async def token(self, request: web.Request) -> web.Response:
        try:
            agent_id = self._client(request)
            body = read_json(await request.read(), "the token request")
            if not isinstance(body, dict):
                raise DecodeError("the token request must be a JSON object")
            if body.get("agent_id", agent_id) != agent_id:
                raise AuthError("agent_id is not the client that authenticated")
            target = body.get("target_agent_id")
            caps = body.get("requested_capabilities") or []
            ttl = body.get("ttl", 3600)
            if (
                not isinstance(target, str)
                or not isinstance(caps, list)
                or not isinstance(ttl, int)
            ):
                raise DecodeError(
                    "expected target_agent_id (string), requested_capabilities (list), ttl (int)"
                )
            caps = [str(c) for c in caps]
            self._within_scopes(agent_id, target, caps)
            token, expires = self.issuer.issue(agent_id, target, caps, ttl=ttl)
        except OutOfScopeError as e:
            return json_response({"error": {"code": "AUTH_FAILED", "message": str(e)}}, 403)
        except AuthError as e:
            return json_response({"error": {"code": "AUTH_FAILED", "message": str(e)}}, 401)
        except DecodeError as e:
            return json_response({"error": {"code": "INVALID_REQUEST", "message": str(e)}}, 400)
        at = datetime.fromtimestamp(expires, UTC).isoformat().replace("+00:00", "Z")
        return json_response({"token": token, "expires_at": at})

    def _within_scopes(self, client_id: str, target: str, caps: list[str]) -> None:
        """OutOfScopeError unless a client the operator limited to some scopes asks
        within them: a token for an agent they cover, for asking it (no service
        capability such as ``registry:write``). An unlimited client may ask for
        anything, as before scopes existed."""
        client = self.token_server.clients.get(client_id)
        granted = client.scopes if client is not None else None
        if granted is None:
            return
        if oauth.covers(granted, oauth.agent_scope(target)) and not any(":" in c for c in caps):
            return
        raise OutOfScopeError(
            f"{client_id} may have {', '.join(sorted(granted)) or 'nothing'} only, not a "
            f"token for {target!r} with {', '.join(caps) or 'no capabilities'}"
        )

    def _client(self, request: web.Request) -> str:
        """The agent id a token request authenticated as (HTTP Basic, a secret
        the operator gave it); AuthError otherwise."""
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            raise AuthError("authenticate with HTTP Basic: your agent id and secret")
        try:
            agent_id, _, secret = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthError("malformed Basic credentials") from None
        want = self._secrets.get(agent_id)
        got = hashlib.sha256(secret.encode()).digest()
        if want is None or not hmac.compare_digest(want, got):
            raise AuthError("unknown agent id or wrong secret")
        return agent_id
