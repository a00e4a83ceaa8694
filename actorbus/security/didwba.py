"""The ``Authorization: DIDWba v="1.1", ...`` header (did:wba, ANP 1.x): a
signature over the SHA-256 of the JCS-canonical JSON of ``{nonce, timestamp,
aud, did}``, checked against the sender's resolved DID document.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec
from cryptography.exceptions import InvalidSignature

from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.did import (
    DidDocument,
    PrivateKey,
    PublicKey,
    key_bound,
    parse_did,
    parse_did_document,
    public_key_of,
)
from actorbus.security.jcs import jcs
from actorbus.security.multibase import b64url, b64url_decode
from actorbus.security.signatures import sign, verify

AUTH_SCHEME = "DIDWba"
AUTH_VERSION = "1.1"
_AUTH_FIELDS = ("did", "nonce", "timestamp", "verification_method", "signature")
_PARAM = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"\s*(,|$)')


class DidWbaAuth(msgspec.Struct, frozen=True):
    """A parsed ``Authorization: DIDWba ...`` header."""

    version: str
    did: str
    nonce: str
    timestamp: str
    verification_method: str
    signature: str

    @property
    def method_id(self) -> str:
        return f"{self.did}#{self.verification_method}"


AuthProblem = Literal[
    "invalid_request",
    "invalid_did",
    "invalid_verification_method",
    "invalid_signature",
    "invalid_timestamp",
    "invalid_nonce",
]


class DidWbaAuthError(AuthError):
    """A DIDWba header that does not authenticate its sender.

    ``www_authenticate`` is the value to send back with the 401 (``status``: 403
    when the key is real but not allowed to authenticate), as anp's verifier
    does: ``DIDWba realm="...", error="...", error_description="..."``.
    """

    def __init__(self, problem: AuthProblem, description: str, *, realm: str, status: int = 401):
        super().__init__(description)
        self.problem = problem
        self.status = status
        text = description.replace('"', "'").replace("\\", "/")
        self.www_authenticate = (
            f'{AUTH_SCHEME} realm="{realm}", error="{problem}", error_description="{text}"'
        )


def signing_input(
    nonce: str, timestamp: str, aud: str, did: str, version: str = AUTH_VERSION
) -> bytes:
    """SHA-256 of the JCS JSON of {nonce, timestamp, aud, did} (``service`` in 1.0)."""
    audience = "aud" if version != "1.0" else "service"
    payload = {"nonce": nonce, "timestamp": timestamp, audience: aud, "did": did}
    return hashlib.sha256(jcs(payload)).digest()


def _utc(now: datetime) -> datetime:
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)


def build_auth_header(
    did: str,
    private_key: PrivateKey,
    aud: str,
    *,
    now: datetime,
    nonce: str | None = None,
    verification_method: str = "key-1",
    version: str = AUTH_VERSION,
) -> str:
    """The ``Authorization`` value proving ``did`` to the service at ``aud`` (its
    host name), signed with the private key of ``did#verification_method``."""
    parse_did(did)
    nonce = nonce or secrets.token_hex(16)
    timestamp = _utc(now).strftime("%Y-%m-%dT%H:%M:%SZ")
    digest = signing_input(nonce, timestamp, aud, did, version)
    signature = b64url(sign(private_key, digest))
    return (
        f'{AUTH_SCHEME} v="{version}", did="{did}", nonce="{nonce}", '
        f'timestamp="{timestamp}", verification_method="{verification_method}", '
        f'signature="{signature}"'
    )


def parse_auth_header(value: Any, *, realm: str = "") -> DidWbaAuth:
    """The fields of a DIDWba header; DidWbaAuthError (``invalid_request``) if it
    is not one. Field names are case-insensitive; ``v`` defaults to 1.1."""
    if not isinstance(value, str):
        raise DidWbaAuthError("invalid_request", "no DIDWba Authorization header", realm=realm)
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != AUTH_SCHEME.lower():
        raise DidWbaAuthError("invalid_request", "the scheme is not DIDWba", realm=realm)
    fields = _auth_params(rest, realm)
    missing = [name for name in _AUTH_FIELDS if not fields.get(name)]
    if missing:
        raise DidWbaAuthError("invalid_request", f"missing {', '.join(missing)}", realm=realm)
    return DidWbaAuth(
        version=fields.get("v", AUTH_VERSION),
        **{name: fields[name] for name in _AUTH_FIELDS},
    )


def _auth_params(text: str, realm: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    pos, end = 0, len(text.rstrip())
    while pos < end:
        match = _PARAM.match(text, pos)
        if match is None:
            raise DidWbaAuthError("invalid_request", "malformed DIDWba parameters", realm=realm)
        name = match.group(1).lower()
        if name in fields:
            raise DidWbaAuthError("invalid_request", f"{name} given twice", realm=realm)
        fields[name] = match.group(2)
        pos = match.end()
    return fields


def verify_auth_header(
    header: str | DidWbaAuth,
    document: DidDocument | Mapping[str, Any],
    *,
    aud: str,
    now: datetime,
    seen_nonce: Callable[[str, str], bool] | None = None,
    max_age: float = 300.0,
    max_skew: float = 60.0,
) -> DidWbaAuth:
    """Check a DIDWba header against the sender's resolved DID document.

    In order: the header parses, its DID is a did:wba DID and the document's id,
    the timestamp is at most ``max_age`` seconds old and ``max_skew`` ahead of
    ``now``, the verification method is listed under ``authentication`` with a
    key an ``e1_``/``k1_`` DID is bound to, the signature verifies, and last
    ``seen_nonce(did, nonce)`` (which records the nonce, and answers True if it
    was used before) does not report a replay. Returns the header's fields;
    raises :class:`DidWbaAuthError` (an ``AuthError``) naming the first failure.
    """
    auth = header if isinstance(header, DidWbaAuth) else parse_auth_header(header, realm=aud)
    doc = _document_for(auth, document, aud)
    _check_time(auth.timestamp, _utc(now), aud, max_age, max_skew)
    key = _auth_key(auth, doc, aud)
    _check_signature(auth, key, aud)
    if seen_nonce is not None and seen_nonce(auth.did, auth.nonce):
        raise DidWbaAuthError("invalid_nonce", "the nonce was already used", realm=aud)
    return auth


def _document_for(
    auth: DidWbaAuth, document: DidDocument | Mapping[str, Any], realm: str
) -> DidDocument:
    try:
        parse_did(auth.did)
        if isinstance(document, DidDocument):
            if document.id != auth.did:
                raise DecodeError(f"the DID document is {document.id!r:.120}, not {auth.did!r}")
            return document
        return parse_did_document(dict(document), auth.did)
    except DecodeError as exc:
        raise DidWbaAuthError("invalid_did", str(exc), realm=realm) from exc


def _check_time(stamp: str, now: datetime, realm: str, max_age: float, max_skew: float) -> None:
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        raise DidWbaAuthError(
            "invalid_timestamp", "the timestamp is not ISO 8601", realm=realm
        ) from None
    if moment.tzinfo is None:
        raise DidWbaAuthError("invalid_timestamp", "the timestamp has no time zone", realm=realm)
    age = (now - moment).total_seconds()
    if age > max_age or -age > max_skew:
        raise DidWbaAuthError("invalid_timestamp", "the timestamp is expired or ahead", realm=realm)


def _auth_key(auth: DidWbaAuth, doc: DidDocument, realm: str) -> PublicKey:
    return authenticating_key(doc, auth.method_id, auth.did, realm)


def authenticating_key(doc: DidDocument, method_id: str, did: str, realm: str) -> PublicKey:
    """The key of ``method_id`` in ``doc``, if the document lists it for
    authentication and ``did`` is bound to it; DidWbaAuthError naming what is
    wrong otherwise (403 for a real key that may not authenticate)."""
    method = doc.method(method_id)
    if method is None:
        raise DidWbaAuthError(
            "invalid_verification_method", "no such verification method", realm=realm
        )
    if not doc.authenticates(method_id):
        raise DidWbaAuthError(
            "invalid_verification_method",
            "the verification method is not for authentication",
            realm=realm,
            status=403,
        )
    try:
        key = public_key_of(method)
    except DecodeError as exc:
        raise DidWbaAuthError("invalid_verification_method", str(exc), realm=realm) from exc
    if not key_bound(did, key):
        raise DidWbaAuthError("invalid_did", "the DID is not bound to this key", realm=realm)
    return key


def _check_signature(auth: DidWbaAuth, key: PublicKey, realm: str) -> None:
    if auth.version not in ("1.0", "1.1"):
        raise DidWbaAuthError("invalid_request", f"unknown version {auth.version!r}", realm=realm)
    digest = signing_input(auth.nonce, auth.timestamp, realm, auth.did, auth.version)
    try:
        verify(key, b64url_decode(auth.signature), digest)
    except (DecodeError, InvalidSignature, ValueError) as exc:
        raise DidWbaAuthError(
            "invalid_signature", "the signature does not verify", realm=realm
        ) from exc
