"""Who may ask the gateway's agents for what: capability tokens, DIDWba
identities, open agents, and the rate limits.

Every protocol request reaches an actor through ``GatewayCore.submit`` (or the
Agora edge's ask), which calls :meth:`GatewayAuth.authorize` with the agent and
the intent first. The caller is whoever the request proved to be:

- a bearer token (``Authorization: Bearer <JWT>``) from this gateway's
  ``POST /auth/token``: checked as the A2ACP spec says (signature, expiry,
  audience = the agent, the capability for the intent, issuer);
- a DID the ANP edge verified (DIDWba or an RFC 9421 signature);
- nobody, which is enough only for an agent the operator opened
  (``GatewaySettings.open_agents``; ``"*"`` opens all).

Then the spec's rate limits apply, per caller, per caller and agent, and in
total. A refusal is an :class:`AuthError` or a :class:`RateLimitedError`
(with ``retry_after``), which each edge answers in its protocol's terms.

``POST /auth/token`` issues tokens to the agents the operator lists in
``token_secrets`` (agent id and a shared secret, sent as HTTP Basic).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web

from actorbus.codecs.common import read_json
from actorbus.codecs.errors import AuthError, DecodeError, ReplayError
from actorbus.security.identity import Identity
from actorbus.security.tokens import RateLimits, TokenIssuer, TokenVerifier
from actorbus.services.gateway.edges.http import json_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REPLAY_WINDOW = 3600.0  # seconds a request id is remembered (a token's usual life)


@dataclass(frozen=True)
class Caller:
    """What a request proved about its sender."""

    bearer: str | None = None
    did: str | None = None


NOBODY = Caller()
current_caller: ContextVar[Caller | None] = ContextVar("actorbus_gateway_caller", default=None)


class GatewayAuth:
    def __init__(
        self,
        issuer: TokenIssuer,
        *,
        open_agents: tuple[str, ...] = (),
        token_secrets: dict[str, str] | None = None,
        limits: RateLimits | None = None,
    ) -> None:
        self.issuer = issuer
        self.verifier = TokenVerifier.of(issuer)
        self.open_agents = frozenset(open_agents)
        self._secrets = {
            agent: hashlib.sha256(secret.encode()).digest()
            for agent, secret in (token_secrets or {}).items()
        }
        self.limits = limits or RateLimits()
        self._seen: OrderedDict[tuple[str, str, str], float] = OrderedDict()  # -> until

    @classmethod
    def at(cls, key_file: str, domain: str, **kwargs: object) -> GatewayAuth:
        """With the issuer key in ``key_file`` (made there, 0600, on first use;
        gateways that share it accept each other's tokens)."""
        return cls(TokenIssuer(Identity.load(key_file), domain), **kwargs)  # type: ignore[arg-type]

    # -- checking ---------------------------------------------------------------
    def authorize(self, agent: str, intent: str, request_id: str | None = None) -> str:
        """The caller's name if it may ask ``agent`` for ``intent`` now; else
        AuthError or RateLimitedError. A ``request_id`` the protocol makes unique
        (A2A's messageId) is taken once per caller and agent within the replay
        window: a replayed request is a ReplayError."""
        caller = current_caller.get() or NOBODY
        if caller.bearer is not None:
            who = self.verifier.check(caller.bearer, agent, intent).subject
        elif caller.did is not None:
            who = caller.did
        elif "*" in self.open_agents or agent in self.open_agents:
            who = "anonymous"
        else:
            raise AuthError(
                f"{agent} takes only authenticated requests: send a bearer token "
                "(POST /auth/token) or sign the request (DIDWba)"
            )
        if request_id is not None:
            self._check_replay(who, agent, request_id)
        self.limits.take(who, agent)
        return who

    def _check_replay(self, who: str, agent: str, request_id: str) -> None:
        now = time.monotonic()
        seen = self._seen
        while seen and next(iter(seen.values())) < now:
            seen.popitem(last=False)
        key = (who, agent, request_id)
        if key in seen:
            raise ReplayError(f"request {request_id!r} from {who} was already taken: a replay")
        seen[key] = now + REPLAY_WINDOW
        if len(seen) > 1_000_000:
            seen.popitem(last=False)

    def check_operator(self, request: web.Request, audience: str, capability: str) -> None:
        """For the gateway's own endpoints: a bearer token for ``audience`` with
        ``capability``; AuthError otherwise."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(f"this needs a bearer token with {capability}")
        self.verifier.check(token.strip(), audience, capability, [capability])

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Note the bearer token of every request for ``authorize``."""
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        bearer = value.strip() if scheme.lower() == "bearer" and value.strip() else None
        token = current_caller.set(Caller(bearer=bearer))
        try:
            return await handler(request)
        finally:
            current_caller.reset(token)

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
            token, expires = self.issuer.issue(agent_id, target, [str(c) for c in caps], ttl=ttl)
        except AuthError as e:
            return json_response({"error": {"code": "AUTH_FAILED", "message": str(e)}}, 401)
        except DecodeError as e:
            return json_response({"error": {"code": "INVALID_REQUEST", "message": str(e)}}, 400)
        at = datetime.fromtimestamp(expires, UTC).isoformat().replace("+00:00", "Z")
        return json_response({"token": token, "expires_at": at})

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
