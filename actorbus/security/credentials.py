"""Credentials: a namespace's authority vouches for an identity and what it may be.

Every member of a namespace trusts one authority key. The authority issues each
ActorSystem and each actor type a credential: a JWT (RFC 7519) signed with
Ed25519 (the fully-specified ``Ed25519`` algorithm of RFC 9864; ``EdDSA`` is
accepted too), saying

    sub  the subject's did:key          iss  the authority's did:key
    aud  the namespace                  cnf  the subject's public keys
    act  the actor types it may send as and receive for ("*": any)
    iat, exp, jti

Anyone holding the authority's public key checks a credential offline, so
credentials may travel over untrusted channels (a key-value bucket, a header)
without anyone being able to forge one. Rotation is issuing a new credential to
a new identity while the old one stays valid until it expires (the grace
period); revocation lists the ``jti`` of a credential that must stop working
before then.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.identity import Identity, PublicIdentity, verify_key_of
from actorbus.security.multibase import b64url, b64url_decode

ALGORITHMS: Final = ["Ed25519", "EdDSA"]
ANY_TYPE: Final = "*"
DEFAULT_TTL: Final = 30 * 24 * 3600.0  # seconds a credential is valid by default
CLIENT: Final = "client"  # the address type of a system's own sends (client/<id>)


def _okp_public(verify_key: bytes) -> OKPKey:
    return OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": b64url(verify_key)})


@dataclass(frozen=True)
class Credential:
    """A checked credential: who (``subject``), vouched for by ``issuer``, in
    ``namespace``, as which actor ``types``, until ``expires`` (unix seconds)."""

    subject: PublicIdentity
    issuer: str
    namespace: str
    types: frozenset[str]
    expires: float
    jti: str
    token: str

    def may_send_as(self, address: str) -> bool:
        """Whether a message from ``address`` may carry this credential: a member
        speaks for its own ``client/<key id>`` address only (another member's is
        not its to use); an actor address only for the types the credential names."""
        kind = address.partition("/")[0]
        if kind == CLIENT:
            return address == client_address(self.subject.kid)
        return ANY_TYPE in self.types or kind in self.types

    def may_receive_for(self, type_name: str) -> bool:
        return ANY_TYPE in self.types or type_name in self.types


def client_address(kid: str) -> str:
    """The ``client/...`` address of the member whose key id is ``kid``."""
    return f"{CLIENT}/{kid}"


class Authority:
    """A namespace's issuer of credentials (keep its identity file offline in
    production; ``actorbus`` creates one for development)."""

    def __init__(self, identity: Identity, namespace: str) -> None:
        self.identity = identity
        self.namespace = namespace
        self._key = OKPKey.import_key(
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": b64url(identity.public.verify_key),
                "d": b64url(identity.signing_seed()),
            }
        )

    @property
    def public(self) -> PublicIdentity:
        return self.identity.public

    def issue(
        self,
        subject: PublicIdentity,
        types: Iterable[str] = (),
        *,
        ttl: float = DEFAULT_TTL,
        now: float | None = None,
    ) -> str:
        """A credential for ``subject`` as the actor ``types`` given."""
        issued = int(time.time() if now is None else now)
        claims = {
            "iss": self.identity.did,
            "sub": subject.did,
            "aud": self.namespace,
            "iat": issued,
            "exp": issued + int(ttl),
            "jti": uuid.uuid4().hex,
            "act": sorted(set(types)),
            "cnf": {"x25519": b64url(subject.agreement_key)},
        }
        return jwt.encode(
            {"alg": "Ed25519", "typ": "JWT"}, claims, self._key, algorithms=ALGORITHMS
        )


def read_credential(
    token: str,
    trusted: Mapping[str, PublicIdentity],
    namespace: str,
    *,
    revoked: frozenset[str] | set[str] = frozenset(),
    now: float | None = None,
) -> Credential:
    """Check ``token`` against the ``trusted`` authorities (by did): signature,
    issuer, audience, time, revocation. AuthError saying what failed."""
    if not isinstance(token, str) or token.count(".") != 2:
        raise AuthError("a credential must be a compact JWT")
    header, claims = _unverified_part(token, 0), _unverified_part(token, 1)
    if header.get("alg") not in ALGORITHMS:
        raise AuthError(f"credential algorithm {header.get('alg')!r} is not Ed25519")
    issuer = trusted.get(str(claims.get("iss")))
    if issuer is None:
        raise AuthError(f"credential from an untrusted issuer {claims.get('iss')!r:.80}")
    try:
        checked = jwt.decode(token, _okp_public(issuer.verify_key), algorithms=ALGORITHMS)
    except JoseError as exc:
        raise AuthError(f"credential signature does not verify: {exc}") from None
    c = checked.claims
    at = time.time() if now is None else now
    if c.get("aud") != namespace:
        raise AuthError(f"credential for namespace {c.get('aud')!r}, not {namespace!r}")
    exp, iat = c.get("exp"), c.get("iat")
    if not isinstance(exp, int) or exp <= at:
        raise AuthError("credential expired")
    if not isinstance(iat, int) or iat > at + 60:
        raise AuthError("credential issued in the future")
    if c.get("jti") in revoked:
        raise AuthError("credential revoked")
    return Credential(
        subject=_subject(c),
        issuer=issuer.did,
        namespace=namespace,
        types=frozenset(str(t) for t in c.get("act") or []),
        expires=float(exp),
        jti=str(c.get("jti")),
        token=token,
    )


def _unverified_part(token: str, index: int) -> dict[str, Any]:
    """The header (0) or claims (1) before the signature is checked: only to pick
    the algorithm and the issuer's key."""
    what = ("header", "claims")[index]
    try:
        part = json.loads(b64url_decode(token.split(".")[index]))
    except (DecodeError, ValueError) as exc:
        raise AuthError(f"unreadable credential {what}: {exc}") from None
    if not isinstance(part, dict):
        raise AuthError(f"credential {what} must be an object")
    return part


def _subject(claims: Mapping[str, Any]) -> PublicIdentity:
    did = claims.get("sub")
    cnf = claims.get("cnf")
    try:
        verify = verify_key_of(str(did))
        agreement = PublicIdentity.from_json(
            {"did": did, "verify_key": b64url(verify), "agreement_key": (cnf or {}).get("x25519")}
        ).agreement_key
    except (DecodeError, AttributeError) as exc:
        raise AuthError(f"credential subject is not a usable identity: {exc}") from None
    return PublicIdentity(str(did), verify, agreement)
