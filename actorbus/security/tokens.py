"""Capability tokens as the A2ACP spec defines them, and its rate limits.

A token says that ``sub`` (an agent) may ask ``aud`` (another agent) for what
its ``capabilities`` cover, until ``exp``; ``iss`` names the issuing auth
service of ``domain``. It is a JWT signed with Ed25519 (``alg: Ed25519``, RFC
9864; ``EdDSA`` accepted), made and checked with joserfc. Before a message is
routed, :meth:`TokenVerifier.check` verifies, in the spec's order: the
signature, the expiry, the audience (the target agent), the capability for
the intent, the issuer. Each failure is an :class:`AuthError` that says which.

:class:`RateLimits` keeps the spec's three limits (per agent, per
collaboration, global; messages per minute) with a sliding window each and
refuses with :class:`RateLimitedError` carrying ``retry_after`` seconds.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from actorbus.codecs.errors import AuthError, RateLimitedError
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.multibase import b64url

ALGORITHMS: Final = ["Ed25519", "EdDSA"]
ANY: Final = "*"


def okp_key(identity: Identity | None = None, public: PublicIdentity | None = None) -> OKPKey:
    if identity is not None:
        return OKPKey.import_key(
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": b64url(identity.public.verify_key),
                "d": b64url(identity.signing_seed()),
            }
        )
    assert public is not None
    return OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": b64url(public.verify_key)})


@dataclass(frozen=True)
class Grant:
    """A checked token: who may ask whom for what, until when (unix seconds)."""

    subject: str
    audience: str
    capabilities: frozenset[str]
    domain: str
    expires: int
    token_id: str


class TokenIssuer:
    """A domain's auth service (``POST /auth/token`` on the gateway)."""

    def __init__(self, identity: Identity, domain: str, *, max_ttl: int = 24 * 3600) -> None:
        self.identity = identity
        self.domain = domain
        self.name = f"{domain}-auth-service"
        self.max_ttl = max_ttl
        self._key = okp_key(identity)

    def issue(
        self,
        subject: str,
        audience: str,
        capabilities: Iterable[str],
        *,
        ttl: int = 3600,
        now: float | None = None,
    ) -> tuple[str, int]:
        """A token and its expiry (unix seconds); ``ttl`` is capped at ``max_ttl``."""
        if not subject or not audience:
            raise AuthError("a token needs a subject (agent_id) and an audience (target)")
        if ttl <= 0:
            raise AuthError(f"a token's ttl must be positive, not {ttl}")
        issued = int(time.time() if now is None else now)
        expires = issued + min(int(ttl), self.max_ttl)
        claims = {
            "sub": subject,
            "iss": self.name,
            "aud": audience,
            "iat": issued,
            "exp": expires,
            "capabilities": sorted(set(capabilities)),
            "domain": self.domain,
            "jti": uuid.uuid4().hex,
        }
        header = {"alg": "Ed25519", "typ": "JWT"}
        return jwt.encode(header, claims, self._key, algorithms=ALGORITHMS), expires


class TokenVerifier:
    """Checks tokens of the issuers it trusts (by issuer name)."""

    def __init__(self, issuers: dict[str, PublicIdentity]) -> None:
        self._keys = {name: okp_key(public=p) for name, p in issuers.items()}

    @classmethod
    def of(cls, issuer: TokenIssuer) -> TokenVerifier:
        return cls({issuer.name: issuer.identity.public})

    def check(
        self,
        token: str,
        target: str,
        intent: str,
        required: Iterable[str] | None = None,
        *,
        now: float | None = None,
    ) -> Grant:
        """The grant ``token`` gives for asking ``target`` for ``intent``; AuthError
        naming the first rule it breaks. ``required``: the capabilities the intent
        needs (default: the intent's own name); ``*`` in a token covers any."""
        claims = self.verified(token, now=now)
        at = time.time() if now is None else now
        exp = claims["exp"]
        if claims.get("aud") not in (target, ANY):
            raise AuthError(f"token is for {claims.get('aud')!r}, not {target!r}")
        caps = claims.get("capabilities")
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise AuthError("token capabilities must be a list of strings")
        needed = set(required) if required is not None else {intent}
        if ANY not in caps and not needed <= set(caps):
            missing = ", ".join(sorted(needed - set(caps)))
            raise AuthError(f"token lacks the capability for {intent!r} ({missing})")
        iat = claims.get("iat")
        if not isinstance(iat, int) or iat > at + 60:
            raise AuthError("token issued in the future")
        return Grant(
            subject=str(claims.get("sub")),
            audience=target,
            capabilities=frozenset(caps),
            domain=str(claims.get("domain", "")),
            expires=exp,
            token_id=str(claims.get("jti", "")),
        )

    def verified(self, token: str, *, now: float | None = None) -> dict[str, Any]:
        """The claims of ``token`` if its signature verifies with a trusted issuer
        and it has not expired; AuthError otherwise."""
        claims = self._verified(token)
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= (time.time() if now is None else now):
            raise AuthError("token expired")
        return claims

    def _verified(self, token: str) -> dict[str, Any]:
        if not isinstance(token, str) or token.count(".") != 2 or not token.isascii():
            raise AuthError("a bearer token must be a compact JWT")
        for name, key in self._keys.items():
            try:
                checked = jwt.decode(token, key, algorithms=ALGORITHMS)
            except JoseError:
                continue
            claims = dict(checked.claims)
            if claims.get("iss") != name:
                raise AuthError(f"token issuer {claims.get('iss')!r} is not {name!r}")
            return claims
        raise AuthError("token signature does not verify with any trusted issuer")


@dataclass
class _Window:
    limit: int
    stamps: deque[float] = field(default_factory=deque)

    def wait(self, now: float, span: float) -> float:
        """Seconds until one more fits (0: it fits now)."""
        while self.stamps and self.stamps[0] <= now - span:
            self.stamps.popleft()
        if len(self.stamps) < self.limit:
            return 0.0
        return self.stamps[0] + span - now


class RateLimits:
    """The A2ACP spec's limits, messages per minute: per agent (1000), per
    collaboration (100, one source and one target), global (10,000)."""

    def __init__(
        self,
        per_agent: int = 1000,
        per_collaboration: int = 100,
        global_limit: int = 10_000,
        span: float = 60.0,
    ) -> None:
        self.per_agent = per_agent
        self.per_collaboration = per_collaboration
        self.span = span
        self._global = _Window(global_limit)
        self._agents: dict[str, _Window] = {}
        self._pairs: dict[tuple[str, str], _Window] = {}

    def take(self, source: str, target: str, now: float | None = None) -> None:
        """Count one message from ``source`` to ``target``, or refuse it with
        RateLimitedError (``retry_after`` seconds) without counting it."""
        at = time.monotonic() if now is None else now
        windows = [
            (self._global, "the gateway's global"),
            (self._agents.setdefault(source, _Window(self.per_agent)), f"{source}'s"),
            (
                self._pairs.setdefault((source, target), _Window(self.per_collaboration)),
                f"the {source} -> {target} collaboration's",
            ),
        ]
        for window, what in windows:
            wait = window.wait(at, self.span)
            if wait > 0:
                err = RateLimitedError(
                    f"{what} rate limit of {window.limit} messages a minute is reached"
                )
                err.retry_after = max(1, math.ceil(wait))
                raise err
        for window, _ in windows:
            window.stamps.append(at)
        if len(self._pairs) > 100_000:  # forget idle pairs and agents
            self._prune(at)

    def _prune(self, now: float) -> None:
        cutoff = now - self.span
        self._agents = {k: w for k, w in self._agents.items() if w.stamps and w.stamps[-1] > cutoff}
        self._pairs = {k: w for k, w in self._pairs.items() if w.stamps and w.stamps[-1] > cutoff}
