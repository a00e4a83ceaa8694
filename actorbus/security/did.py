"""Decentralized identifiers: ``did:wba`` DIDs and DID documents, and the public
keys they hold (Ed25519 Multikey/base58/JWK, secp256k1 and P-256 JWK).

Pure functions: no I/O, no clock. Fetching a document and caching it is the
caller's (the gateway's) business.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import msgspec
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from actorbus.codecs.common import convert
from actorbus.codecs.errors import DecodeError
from actorbus.security.multibase import (
    ED25519_MULTICODEC,
    X25519_MULTICODEC,
    b58decode,
    b58encode,
    b64url,
    b64url_decode,
    multikey,
)

PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey

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


def wba_authority(host: str, port: int | None) -> str:
    """A DID's first segment for ``host`` and ``port``: the port after ``%3A``, an
    IPv6 address in brackets, its colons percent-encoded (``%5B%3A%3A1%5D``), as
    the document's URL has it, since ``:`` separates the DID's segments."""
    if ":" in host:  # an IPv6 literal
        host = "%5B" + host.strip("[]").replace(":", "%3A") + "%5D"
    return host + (f"%3A{port}" if port is not None else "")


def _host_port(authority: str, did: str) -> tuple[str, int | None]:
    lowered = authority.lower()
    if lowered.startswith("%5b") and "%5d" in lowered:  # an IPv6 literal
        end = lowered.index("%5d")
        literal = unquote(authority[3:end])
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            raise DecodeError(f"bad IPv6 host {literal!r:.80} in {did!r:.120}") from None
        host, rest = f"[{literal.lower()}]", authority[end + 3 :]
        if not rest:
            return host, None
        if not rest.lower().startswith("%3a"):
            raise DecodeError(f"bad host {unquote(authority)!r:.80} in {did!r:.120}")
        return host, _port(rest[3:], did)
    cut = lowered.find("%3a")
    host, port_text = (authority, None) if cut < 0 else (authority[:cut], authority[cut + 3 :])
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise DecodeError(f"bad host {unquote(host)!r:.80} in {did!r:.120}")
    if port_text is None:
        return host.lower(), None
    return host.lower(), _port(port_text, did)


def _port(text: str, did: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise DecodeError(f"bad port {text!r:.20} in {did!r:.120}")
    return int(text)


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
    authority = wba_authority(host, port)
    did = ":".join(["did:wba", authority, *path, "e1_" + e1_fingerprint(public_key)])
    parse_did(did)
    return did


# -- DID documents ------------------------------------------------------------


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


def key_bound(did: str, key: PublicKey) -> bool:
    """An ``e1_``/``k1_`` DID names its key's thumbprint: the key must match it."""
    last = did.rsplit(":", 1)[-1]
    if last.startswith("e1_"):
        return isinstance(key, ed25519.Ed25519PublicKey) and last[3:] == e1_fingerprint(key)
    if last.startswith("k1_"):
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256k1":
            return False
        return last[3:] == k1_fingerprint(key)
    return True
