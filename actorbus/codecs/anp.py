"""ANP (Agent Network Protocol, PyPI ``anp`` 1.x) at the edge of the bus.

Three things an ANP peer needs from actorbus, all pure functions here (no I/O,
no clock: callers pass ``now``; the gateway fetches documents and keeps nonces):

- **Identity**: ``did:wba`` DIDs (:func:`parse_did`, :func:`did_document_url`), DID
  documents (:class:`DidDocument`, Ed25519 Multikey or JWK keys, ``authentication``,
  ``keyAgreement``), and the ``Authorization: DIDWba v="1.1", ...`` header
  (:func:`build_auth_header`, :func:`verify_auth_header`): a signature over the
  SHA-256 of the JCS-canonical JSON of ``{nonce, timestamp, aud, did}``.
- **Discovery**: the agent description document (``ad.json``, ``protocolType``
  ANP) whose interface is an OpenRPC document (:func:`agent_description`).
- **Messages**: JSON-RPC 2.0 on the agent's rpc endpoint, the codec below.

Envelope <-> JSON-RPC (the paper's field alignment: request_id, source and
target DIDs, payload, trace, idempotency and session all travel):

=========================  ==================================================
envelope                   JSON-RPC request
=========================  ==================================================
id                         ``id`` (request_id)
intent                     ``method`` (the OpenRPC method the actor serves)
content (a dict)           ``params`` by name
content (anything else)    ``params.payload`` (bytes as base64)
src, dst, ts, context,     ``params._meta`` (src is the caller's DID once the
meta                       gateway has checked it; dst the target DID)
=========================  ==================================================

``_meta`` (not ``meta``) because business params may well have a ``meta`` key,
and ``_meta`` is the reserved-key convention JSON-RPC agent protocols (MCP) use.
A reply is a JSON-RPC response whose ``id`` is the request's id (the reply
envelope's ``context.parent_id``); a dict result carries ``_meta`` the same way.
Every envelope field survives envelope -> ANP -> envelope.

Errors are JSON-RPC error objects: the standard codes, ANP's server codes
(-32000 unauthenticated, -32001 forbidden, -32002 not found, -32005 rate
limited), actorbus codes for the rest, and ``data.code`` with the exact actorbus
code (see :data:`RPC_CODE_OF`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal
from urllib.parse import unquote

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from actorbus.codecs.common import (
    ENVELOPE_FIELDS,
    INTENT_ERROR,
    build_envelope,
    content_intent,
    convert,
    envelope_error,
    envelope_fields,
    error_envelope,
    rebuild_error,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    AuthError,
    DecodeError,
    EncodeError,
    ProtocolError,
    RemoteError,
    UnsupportedError,
)

# -- JCS (RFC 8785) -----------------------------------------------------------------
#
# No JCS package is installed, and the signed objects are small: strings, ints,
# bools, null, nested arrays and objects (floats are handled too, the ES6 way).


def jcs(value: Any) -> bytes:
    """The RFC 8785 canonical JSON of ``value``, UTF-8 encoded."""
    try:
        return _jcs(value).encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: not well-formed Unicode
        raise EncodeError(f"JCS input is not well-formed Unicode: {exc}") from exc


def _jcs(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, int):
        return str(value) if abs(value) <= 2**53 else _es6_number(float(value))
    if isinstance(value, float):
        return _es6_number(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        return _jcs_object(value)
    raise EncodeError(f"JCS cannot encode a {type(value).__name__}")


def _jcs_object(obj: dict[Any, Any]) -> str:
    if not all(isinstance(k, str) for k in obj):
        raise EncodeError("JCS object keys must be strings")
    keys = sorted(obj, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    return "{" + ",".join(f"{_jcs(k)}:{_jcs(obj[k])}" for k in keys) + "}"


def _es6_number(value: float) -> str:
    """ECMAScript Number::toString, which JCS prescribes for numbers."""
    if value != value or value in (float("inf"), float("-inf")):
        raise EncodeError("JCS cannot encode NaN or Infinity")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    tup = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, tup.digits))
    k = len(digits)
    n = int(tup.exponent) + k  # value = 0.digits * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    exp = n - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


# -- base58btc and multibase --------------------------------------------------------

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}
ED25519_MULTICODEC = b"\xed\x01"
X25519_MULTICODEC = b"\xec\x01"


def b58encode(data: bytes) -> str:
    """base58btc (Bitcoin alphabet), the encoding of ``z...`` multibase keys."""
    num = int.from_bytes(data, "big")
    out = []
    while num:
        num, rem = divmod(num, 58)
        out.append(_B58[rem])
    zeros = len(data) - len(data.lstrip(b"\0"))
    return "1" * zeros + "".join(reversed(out))


def b58decode(text: str) -> bytes:
    """The reverse of :func:`b58encode`; DecodeError for a character outside it."""
    num = 0
    for char in text:
        if char not in _B58_INDEX:
            raise DecodeError(f"not base58btc: {char!r}")
        num = num * 58 + _B58_INDEX[char]
    zeros = len(text) - len(text.lstrip("1"))
    body = num.to_bytes((num.bit_length() + 7) // 8, "big") if num else b""
    return b"\0" * zeros + body


def b64url(data: bytes) -> str:
    """Unpadded base64url, as JWKs and DIDWba signatures write bytes."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: Any) -> bytes:
    """base64url with or without padding; DecodeError when it is not that."""
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        raise DecodeError("not base64url")
    try:
        return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"not base64url: {exc}") from exc


def multikey(public_key: ed25519.Ed25519PublicKey) -> str:
    """An Ed25519 key as a Multikey ``publicKeyMultibase`` (``z6Mk...``)."""
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "z" + b58encode(ED25519_MULTICODEC + raw)


# -- did:wba ---------------------------------------------------------------------------

_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_SEGMENT = re.compile(r"(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})+")


class DidWba(msgspec.Struct, frozen=True):
    """A parsed ``did:wba`` DID: where its document lives."""

    did: str
    host: str
    port: int | None
    path: tuple[str, ...]

    @property
    def document_url(self) -> str:
        """``https://host[:port]/.well-known/did.json`` or ``/path/.../did.json``."""
        origin = f"https://{self.host}" + (f":{self.port}" if self.port is not None else "")
        if not self.path:
            return f"{origin}/.well-known/did.json"
        return f"{origin}/{'/'.join(self.path)}/did.json"


def parse_did(did: Any) -> DidWba:
    """Check a ``did:wba:host[%3Aport][:path...]`` DID; DecodeError says what is wrong."""
    if not isinstance(did, str) or not did.startswith("did:wba:"):
        raise DecodeError(f"not a did:wba DID: {did!r:.120}")
    segments = did[len("did:wba:") :].split(":")
    host, port = _host_port(segments[0], did)
    for segment in segments[1:]:
        if not _SEGMENT.fullmatch(segment):
            raise DecodeError(f"bad path segment {segment!r} in {did!r:.120}")
    return DidWba(did=did, host=host, port=port, path=tuple(segments[1:]))


def _host_port(authority: str, did: str) -> tuple[str, int | None]:
    cut = authority.lower().find("%3a")
    host, port_text = (authority, None) if cut < 0 else (authority[:cut], authority[cut + 3 :])
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise DecodeError(f"bad host {unquote(host)!r:.80} in {did!r:.120}")
    if port_text is None:
        return host.lower(), None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise DecodeError(f"bad port {port_text!r:.20} in {did!r:.120}")
    return host.lower(), int(port_text)


def did_document_url(did: str) -> str:
    """Where a did:wba DID's document is fetched from (over HTTPS)."""
    return parse_did(did).document_url


def e1_fingerprint(public_key: ed25519.Ed25519PublicKey) -> str:
    """The RFC 7638 JWK thumbprint an ``e1_`` DID ends with (anp 1.x key binding)."""
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    jwk = '{"crv":"Ed25519","kty":"OKP","x":"' + b64url(raw) + '"}'
    return b64url(hashlib.sha256(jwk.encode()).digest())


def k1_fingerprint(public_key: ec.EllipticCurvePublicKey) -> str:
    """The RFC 7638 thumbprint a ``k1_`` DID ends with (secp256k1 key binding)."""
    nums = public_key.public_numbers()
    x, y = b64url(nums.x.to_bytes(32, "big")), b64url(nums.y.to_bytes(32, "big"))
    jwk = '{"crv":"secp256k1","kty":"EC","x":"' + x + '","y":"' + y + '"}'
    return b64url(hashlib.sha256(jwk.encode()).digest())


def e1_did(
    host: str, path: Sequence[str], public_key: ed25519.Ed25519PublicKey, port: int | None = None
) -> str:
    """A key-bound did:wba DID: ``did:wba:host[%3Aport]:path...:e1_<thumbprint>``."""
    authority = host + (f"%3A{port}" if port is not None else "")
    did = ":".join(["did:wba", authority, *path, "e1_" + e1_fingerprint(public_key)])
    parse_did(did)
    return did


# -- DID documents --------------------------------------------------------------------


class VerificationMethod(msgspec.Struct, omit_defaults=True):
    id: str
    type: str
    controller: str | None = None
    publicKeyMultibase: str | None = None
    publicKeyJwk: dict[str, Any] | None = None
    publicKeyBase58: str | None = None


MethodRef = str | VerificationMethod


class DidDocument(msgspec.Struct, omit_defaults=True):
    """A DID document, as much of it as authentication and key agreement need."""

    id: str
    context: list[Any] | str | None = msgspec.field(default=None, name="@context")
    verificationMethod: list[VerificationMethod] = msgspec.field(default_factory=list)
    authentication: list[MethodRef] = msgspec.field(default_factory=list)
    assertionMethod: list[MethodRef] = msgspec.field(default_factory=list)
    keyAgreement: list[MethodRef] = msgspec.field(default_factory=list)
    service: list[dict[str, Any]] = msgspec.field(default_factory=list)
    proof: dict[str, Any] | None = None

    def absolute(self, ref: str) -> str:
        """A method id with a relative ``#fragment`` made absolute."""
        return self.id + ref if ref.startswith("#") else ref

    def method(self, method_id: str) -> VerificationMethod | None:
        """The verification method with this id (listed or embedded)."""
        for method in (*self.verificationMethod, *self.authentication, *self.keyAgreement):
            if isinstance(method, VerificationMethod) and self.absolute(method.id) == method_id:
                return method
        return None

    def authenticates(self, method_id: str) -> bool:
        """Whether the method may be used for authentication."""
        for ref in self.authentication:
            ref_id = ref if isinstance(ref, str) else ref.id
            if self.absolute(ref_id) == method_id:
                return True
        return False


def parse_did_document(obj: Any, did: str | None = None) -> DidDocument:
    """Check a fetched DID document; with ``did``, its ``id`` must be exactly it."""
    doc = convert(obj, DidDocument, "DID document")
    if did is not None and doc.id != did:
        raise DecodeError(f"the DID document is {doc.id!r:.120}, not {did!r:.120}")
    return doc


def did_document(
    did: str,
    public_key: ed25519.Ed25519PublicKey,
    *,
    key_id: str = "key-1",
    agreement_key: bytes | None = None,
    services: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A DID document for an Ed25519 key (Multikey), optionally with an X25519
    ``keyAgreement`` key (raw 32 bytes) for end-to-end encryption."""
    parse_did(did)
    method = {
        "id": f"{did}#{key_id}",
        "type": "Multikey",
        "controller": did,
        "publicKeyMultibase": multikey(public_key),
    }
    doc: dict[str, Any] = {
        "@context": [
            "https://www.w3.org/ns/did/v1",
            "https://w3id.org/security/multikey/v1",
        ],
        "id": did,
        "verificationMethod": [method],
        "authentication": [method["id"]],
        "assertionMethod": [method["id"]],
    }
    if agreement_key is not None:
        agreement = {
            "id": f"{did}#key-x25519",
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": "z" + b58encode(X25519_MULTICODEC + agreement_key),
        }
        doc["verificationMethod"].append(agreement)
        doc["keyAgreement"] = [agreement["id"]]
    if services:
        doc["service"] = [dict(s) for s in services]
    return doc


PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
_CURVES: dict[str, ec.EllipticCurve] = {"secp256k1": ec.SECP256K1(), "P-256": ec.SECP256R1()}
_ED25519_TYPES = frozenset(
    {"Multikey", "Ed25519VerificationKey2018", "Ed25519VerificationKey2020", "JsonWebKey2020"}
)


def public_key_of(method: VerificationMethod) -> PublicKey:
    """The public key a verification method holds (Ed25519 Multikey/base58/JWK,
    secp256k1 or P-256 JWK); DecodeError for anything else."""
    try:
        if method.publicKeyJwk is not None:
            return _jwk_key(method.publicKeyJwk)
        if method.publicKeyMultibase is not None and method.type in _ED25519_TYPES:
            return _multibase_ed25519(method.publicKeyMultibase)
        if method.publicKeyBase58 is not None and method.type in _ED25519_TYPES:
            return ed25519.Ed25519PublicKey.from_public_bytes(b58decode(method.publicKeyBase58))
    except (ValueError, TypeError, KeyError) as exc:
        raise DecodeError(f"bad public key in {method.id!r:.120}: {exc}") from exc
    raise DecodeError(f"unsupported verification method {method.type!r:.60} ({method.id!r:.120})")


def _multibase_ed25519(text: str) -> ed25519.Ed25519PublicKey:
    if not text.startswith("z"):
        raise DecodeError("only base58btc (z...) multibase keys are supported")
    raw = b58decode(text[1:])
    if len(raw) == 34 and raw[:2] == ED25519_MULTICODEC:
        raw = raw[2:]
    return ed25519.Ed25519PublicKey.from_public_bytes(raw)


def _jwk_key(jwk: Mapping[str, Any]) -> PublicKey:
    if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
        return ed25519.Ed25519PublicKey.from_public_bytes(b64url_decode(str(jwk["x"])))
    curve = _CURVES.get(str(jwk.get("crv")))
    if jwk.get("kty") == "EC" and curve is not None:
        x = int.from_bytes(b64url_decode(str(jwk["x"])), "big")
        y = int.from_bytes(b64url_decode(str(jwk["y"])), "big")
        return ec.EllipticCurvePublicNumbers(x, y, curve).public_key()
    raise DecodeError(f"unsupported JWK kty={jwk.get('kty')!r:.20} crv={jwk.get('crv')!r:.20}")


def _binding_ok(did: str, key: PublicKey) -> bool:
    """An ``e1_``/``k1_`` DID names its key's thumbprint: the key must match it."""
    last = did.rsplit(":", 1)[-1]
    if last.startswith("e1_"):
        return isinstance(key, ed25519.Ed25519PublicKey) and last[3:] == e1_fingerprint(key)
    if last.startswith("k1_"):
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256k1":
            return False
        return last[3:] == k1_fingerprint(key)
    return True


# -- the DIDWba Authorization header ------------------------------------------------

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
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
    signature = b64url(_sign(private_key, digest))
    return (
        f'{AUTH_SCHEME} v="{version}", did="{did}", nonce="{nonce}", '
        f'timestamp="{timestamp}", verification_method="{verification_method}", '
        f'signature="{signature}"'
    )


def _sign(private_key: PrivateKey, digest: bytes) -> bytes:
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key.sign(digest)
    r, s = decode_dss_signature(private_key.sign(digest, ec.ECDSA(hashes.SHA256())))
    size = (private_key.curve.key_size + 7) // 8
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")


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
    method = doc.method(auth.method_id)
    if method is None:
        raise DidWbaAuthError(
            "invalid_verification_method", "no such verification method", realm=realm
        )
    if not doc.authenticates(auth.method_id):
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
    if not _binding_ok(auth.did, key):
        raise DidWbaAuthError("invalid_did", "the DID is not bound to this key", realm=realm)
    return key


def _check_signature(auth: DidWbaAuth, key: PublicKey, realm: str) -> None:
    if auth.version not in ("1.0", "1.1"):
        raise DidWbaAuthError("invalid_request", f"unknown version {auth.version!r}", realm=realm)
    digest = signing_input(auth.nonce, auth.timestamp, realm, auth.did, auth.version)
    try:
        _verify(key, b64url_decode(auth.signature), digest)
    except (DecodeError, InvalidSignature, ValueError) as exc:
        raise DidWbaAuthError(
            "invalid_signature", "the signature does not verify", realm=realm
        ) from exc


def _verify(key: PublicKey, signature: bytes, digest: bytes) -> None:
    if isinstance(key, ed25519.Ed25519PublicKey):
        key.verify(signature, digest)
        return
    size = (key.curve.key_size + 7) // 8
    if len(signature) == 2 * size:  # r || s, as anp sends it
        r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
        signature = encode_dss_signature(r, s)
    key.verify(signature, digest, ec.ECDSA(hashes.SHA256()))


# -- the agent description (ad.json) and its OpenRPC interface ------------------------

OPENRPC_VERSION = "1.3.2"


def openrpc_document(
    title: str,
    rpc_url: str,
    methods: Sequence[str | Mapping[str, Any]],
    *,
    version: str = "1.0.0",
    description: str = "",
) -> dict[str, Any]:
    """An OpenRPC document for the agent's JSON-RPC endpoint; a method given by
    name takes any params by name and returns any result."""
    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    return {
        "openrpc": OPENRPC_VERSION,
        "info": info,
        "servers": [{"name": title, "url": rpc_url}],
        "methods": [_openrpc_method(m) for m in methods],
    }


def _openrpc_method(method: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(method, str):
        return {
            "name": method,
            "paramStructure": "by-name",
            "params": [],
            "result": {"name": "result", "schema": {}},
        }
    out = dict(method)
    out.setdefault("params", [])
    return out


def agent_description(
    *,
    name: str,
    did: str,
    url: str,
    rpc_url: str,
    methods: Sequence[str | Mapping[str, Any]] = (),
    description: str = "",
    openrpc_url: str | None = None,
    created: str | None = None,
    version: str = "1.0.0",
) -> dict[str, Any]:
    """The ANP agent description document served at ``url`` (``/agent/ad.json``).

    One ``StructuredInterface`` of protocol ``openrpc``: linked when
    ``openrpc_url`` is given, else embedded; DIDWba as the security scheme.
    """
    parse_did(did)
    interface: dict[str, Any] = {
        "type": "StructuredInterface",
        "protocol": "openrpc",
        "version": OPENRPC_VERSION,
        "description": f"JSON-RPC 2.0 interface of {name}",
    }
    if openrpc_url is not None:
        interface["url"] = openrpc_url
    else:
        interface["content"] = openrpc_document(name, rpc_url, methods, version=version)
    ad: dict[str, Any] = {
        "protocolType": "ANP",
        "protocolVersion": "1.0.0",
        "type": "AgentDescription",
        "url": url,
        "name": name,
        "did": did,
        "description": description,
        "securityDefinitions": {
            "didwba_sc": {"scheme": "didwba", "in": "header", "name": "Authorization"}
        },
        "security": "didwba_sc",
        "interfaces": [interface],
    }
    if created is not None:
        ad["created"] = created
    return ad


# -- JSON-RPC ------------------------------------------------------------------------

JSONRPC = "2.0"
RpcId = str | int | None


class RpcRequest(msgspec.Struct, omit_defaults=True):
    jsonrpc: Literal["2.0"]
    method: str
    params: dict[str, Any] | list[Any] | None = None
    id: RpcId = None


class RpcErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class RpcResponse(msgspec.Struct, omit_defaults=True):
    jsonrpc: Literal["2.0"]
    id: RpcId
    result: Any = None
    error: RpcErrorObject | None = None


def rpc_request(method: str, params: Any, request_id: RpcId) -> dict[str, Any]:
    """A JSON-RPC 2.0 request (a notification when ``request_id`` is None)."""
    out: dict[str, Any] = {"jsonrpc": JSONRPC, "method": method, "params": params}
    if request_id is not None:
        out["id"] = request_id
    return out


def rpc_result(request_id: RpcId, result: Any) -> dict[str, Any]:
    """A JSON-RPC 2.0 success response."""
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def rpc_error(request_id: RpcId, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response with a code of the caller's choosing."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": JSONRPC, "id": request_id, "error": error}


# -- envelope <-> params / result ----------------------------------------------------

META_KEY = "_meta"
_CARRIED = ("id", "ts", "src", "dst", "intent", "context", "meta")


def _carried_meta(env: Envelope, form: str | None, *, skip: tuple[str, ...]) -> dict[str, Any]:
    meta = envelope_fields(env)
    for name in skip:
        del meta[name]
    if form is not None:
        meta["form"] = form
    return meta


def _wrap(env: Envelope, carry: bool, skip: tuple[str, ...]) -> Any:
    """Content as params/result: a dict by name, anything else under ``payload``;
    with ``carry``, the envelope's other fields under ``_meta``."""
    content = env.content
    if isinstance(content, dict) and META_KEY not in content:
        if not carry:
            return content
        return {**content, META_KEY: _carried_meta(env, None, skip=skip)}
    if not carry and isinstance(content, list):
        return content
    form = "bytes" if isinstance(content, bytes) else "payload"
    payload = base64.b64encode(content).decode() if isinstance(content, bytes) else content
    if not carry:
        return {"payload": payload}
    return {"payload": payload, META_KEY: _carried_meta(env, form, skip=skip)}


def _unwrap(value: Any) -> tuple[Any, dict[str, Any]]:
    """params/result -> (content, the carried envelope fields)."""
    if not isinstance(value, dict) or not isinstance(value.get(META_KEY), dict):
        return value, {}
    meta = dict(value[META_KEY])
    form = meta.pop("form", None)
    if form is None:
        return {k: v for k, v in value.items() if k != META_KEY}, meta
    payload = value.get("payload")
    if form == "bytes":
        if not isinstance(payload, str):
            raise DecodeError("an ANP bytes payload is not a base64 string")
        try:
            return base64.b64decode(payload, validate=True), meta
        except (binascii.Error, ValueError) as exc:
            raise DecodeError(f"an ANP bytes payload is not base64: {exc}") from exc
    if form != "payload":
        raise DecodeError(f"unknown ANP payload form {form!r:.40}")
    return payload, meta


def _envelope_data(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {name: meta[name] for name in _CARRIED if name in meta}


def _native_defaults(data: dict[str, Any], carried: Mapping[str, Any]) -> None:
    """What a message from a plain JSON-RPC peer (no ``_meta``) cannot say: no
    time (0: a codec reads no clock), no target, and replies should go back in
    ANP."""
    data.setdefault("dst", "")
    data.setdefault("ts", 0)
    if not carried:
        data["meta"] = {"protocol_hint": "anp"}


# -- encode / decode ----------------------------------------------------------------


def encode_request(env: Envelope, *, carry: bool = True) -> dict[str, Any]:
    """A JSON-RPC request: ``method`` = intent, ``id`` = envelope id."""
    return rpc_request(env.intent, _wrap(env, carry, ("id", "intent")), env.id)


def encode_response(
    env: Envelope, *, request_id: RpcId = None, carry: bool = True
) -> dict[str, Any]:
    """A JSON-RPC response for a reply envelope (an ``$error`` one gives an error
    response); the id is ``request_id`` or the reply's ``context.parent_id``."""
    rid = request_id if request_id is not None else env.context.parent_id
    if env.intent == INTENT_ERROR:
        return error_response(envelope_error(env), rid)
    return rpc_result(rid, _wrap(env, carry, ()))


def encode(env: Envelope) -> dict[str, Any]:
    """The codec's encode: an error response for ``$error``, else a request."""
    if env.intent == INTENT_ERROR:
        return encode_response(env)
    return encode_request(env)


def decode_request(obj: Any) -> Envelope:
    """A JSON-RPC request -> envelope (a notification gets a fresh id)."""
    req = convert(obj, RpcRequest, "JSON-RPC request")
    if not req.method:
        raise DecodeError("a JSON-RPC request needs a method")
    content, meta = _unwrap(obj.get("params"))
    data = _envelope_data(meta)
    data["intent"] = req.method
    data["content"] = content
    _native_defaults(data, meta)
    if req.id is not None:
        data["id"] = str(req.id)
    return build_envelope(data, "an ANP request")


def decode_response(obj: Any) -> Envelope:
    """A JSON-RPC response -> reply envelope (``$error`` for an error response);
    ``context.parent_id`` is the request id."""
    resp = convert(obj, RpcResponse, "JSON-RPC response")
    parent = None if resp.id is None else str(resp.id)
    if resp.error is not None:
        return error_envelope(error_from(obj["error"]), parent_id=parent)
    content, meta = _unwrap(obj.get("result"))
    data = _envelope_data(meta)
    data["content"] = content
    data.setdefault("intent", content_intent(content))
    _native_defaults(data, meta)
    if parent is not None and not meta:  # a plain peer: the id is what we asked
        data["context"] = {"parent_id": parent}
    return build_envelope(data, "an ANP response")


def decode(obj: Any) -> Envelope:
    """The codec's decode: a JSON-RPC request or response -> envelope."""
    if isinstance(obj, list):
        raise UnsupportedError("JSON-RPC batches are not supported")
    if not isinstance(obj, dict):
        raise DecodeError(f"a JSON-RPC message is an object, not {type(obj).__name__}")
    if "method" in obj:
        return decode_request(obj)
    if "result" in obj or "error" in obj:
        return decode_response(obj)
    raise DecodeError("not a JSON-RPC message: no method, result or error")


# -- errors -----------------------------------------------------------------------------

#: actorbus code -> JSON-RPC error code. Standard codes first, then ANP's server
#: codes, then codes of actorbus's own in the server range (-32010...).
RPC_CODE_OF: dict[str, int] = {
    "E_DECODE": -32700,
    "E_PROTOCOL": -32600,
    "E_UNSUPPORTED": -32601,
    "E_VALIDATION": -32602,
    "E_ADDRESS": -32602,
    "E_INTERNAL": -32603,
    "E_HANDLER": -32603,
    "E_ENCODE": -32603,
    "E_AUTH": -32000,
    "E_NOT_FOUND": -32002,
    "E_NO_RESPONDERS": -32002,
    "E_RATE_LIMIT": -32005,
    "E_TIMEOUT": -32010,
    "E_CONN": -32011,
    "E_EXPIRED": -32012,
    "E_STOPPED": -32013,
    "E_CANCELLED": -32014,
    "E_TOO_LARGE": -32015,
}
#: JSON-RPC code -> actorbus code, for errors from peers that send no data.code.
CODE_OF_RPC: dict[int, str] = {
    -32700: "E_DECODE",
    -32600: "E_PROTOCOL",
    -32601: "E_UNSUPPORTED",
    -32602: "E_VALIDATION",
    -32000: "E_AUTH",
    -32001: "E_AUTH",
    -32002: "E_NOT_FOUND",
    -32004: "E_VALIDATION",
    -32005: "E_RATE_LIMIT",
    -32010: "E_TIMEOUT",
    -32011: "E_CONN",
    -32012: "E_EXPIRED",
    -32013: "E_STOPPED",
    -32014: "E_CANCELLED",
    -32015: "E_TOO_LARGE",
}


def _error_object(err: ActorBusError) -> dict[str, Any]:
    wire = err.to_wire()
    return {
        "code": RPC_CODE_OF.get(err.code, -32603),
        "message": wire["message"],
        "data": {"code": err.code, "type": wire["type"]},
    }


def error_response(err: ActorBusError, request_id: RpcId = None) -> dict[str, Any]:
    """The JSON-RPC error response for ``err`` to the request ``request_id``."""
    return {"jsonrpc": JSONRPC, "id": request_id, "error": _error_object(err)}


def error_to(err: ActorBusError) -> dict[str, Any]:
    """The codec's error form: an error response (id null; see error_response)."""
    return error_response(err)


def error_from(obj: Any) -> ActorBusError:
    """A JSON-RPC error response or error object -> the typed error; never raises."""
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        obj = obj["error"]
    if not isinstance(obj, dict) or not isinstance(obj.get("code"), int):
        return ProtocolError(f"malformed JSON-RPC error: {obj!r:.200}")
    message = str(obj.get("message", ""))
    data = obj.get("data")
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return rebuild_error(data["code"], message, str(data.get("type") or "Exception"))
    code = CODE_OF_RPC.get(obj["code"])
    if code is None:
        return RemoteError(message, remote_type=f"JSONRPCError{obj['code']}")
    return rebuild_error(code, message)


CODEC = register(
    Codec(
        name="anp",
        encode=encode,
        decode=decode,
        error_to=error_to,
        error_from=error_from,
        carries=ENVELOPE_FIELDS,
    )
)
