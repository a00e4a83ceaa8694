"""RFC 9421 HTTP message signatures, as anp 1.x clients sign their requests: the
``Signature-Input`` / ``Signature`` pair over ``@method``, ``@target-uri`` (or
``@authority``) and a ``Content-Digest`` of the body, by a did:wba key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import msgspec
from cryptography.exceptions import InvalidSignature

from actorbus.security.did import DidDocument
from actorbus.security.didwba import DidWbaAuthError, authenticating_key
from actorbus.security.signatures import verify

_SIG_INPUT = re.compile(r"\s*([A-Za-z0-9_-]+)=\(([^)]*)\)(.*)")
_SIG = re.compile(r"\s*([A-Za-z0-9_-]+)=:([A-Za-z0-9+/=]+):\s*")


class HttpSignature(msgspec.Struct, frozen=True):
    """One parsed ``Signature-Input`` / ``Signature`` pair."""

    components: tuple[str, ...]
    params: str  # the serialized parameters after the component list, as signed
    keyid: str
    created: int
    expires: int | None
    nonce: str | None
    signature: bytes


def parse_http_signature(headers: Mapping[str, str], realm: str) -> HttpSignature:
    """The signature of a request (one label); DidWbaAuthError ``invalid_request``."""

    def bad(why: str) -> DidWbaAuthError:
        return DidWbaAuthError("invalid_request", why, realm=realm)

    given = _SIG_INPUT.fullmatch(headers.get("Signature-Input", ""))
    value = _SIG.fullmatch(headers.get("Signature", ""))
    if given is None or value is None:
        raise bad("malformed Signature-Input or Signature header")
    if given.group(1) != value.group(1):
        raise bad("Signature-Input and Signature name different labels")
    components = tuple(re.findall(r'"([^"]+)"', given.group(2)))
    params: dict[str, str | int] = {}
    for raw in given.group(3).split(";"):
        name, eq, text = raw.strip().partition("=")
        if not name:
            continue
        if not eq:
            params[name] = 1
        elif len(text) >= 2 and text[0] == text[-1] == '"':
            params[name] = text[1:-1]
        elif text.lstrip("-").isdigit():
            params[name] = int(text)
        else:
            raise bad(f"bad signature parameter {name!r}")
    keyid, created, expires = params.get("keyid"), params.get("created"), params.get("expires")
    nonce = params.get("nonce")
    if not isinstance(keyid, str) or "#" not in keyid:
        raise bad("the signature's keyid is not a DID URL")
    if not isinstance(created, int) or not (expires is None or isinstance(expires, int)):
        raise bad("the signature needs created (and an integer expires)")
    try:
        signature = base64.b64decode(value.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise bad("the Signature value is not base64") from None
    return HttpSignature(
        components=components,
        params=f"({given.group(2)}){given.group(3).rstrip()}",
        keyid=keyid,
        created=created,
        expires=expires,
        nonce=nonce if isinstance(nonce, str) else None,
        signature=signature,
    )


def signature_base(
    sig: HttpSignature, method: str, url: str, headers: Mapping[str, str], realm: str
) -> bytes:
    """RFC 9421's signature base for the derived components anp signs."""
    lines = []
    by_name = {k.lower(): v for k, v in headers.items()}  # field names are case-insensitive
    for name in sig.components:
        if name == "@method":
            value = method.upper()
        elif name == "@target-uri":
            value = url
        elif name == "@authority":
            value = urlsplit(url).netloc
        elif name == "@path":
            value = urlsplit(url).path or "/"
        elif name.startswith("@") or name.lower() not in by_name:
            raise DidWbaAuthError("invalid_request", f"cannot cover {name!r}", realm=realm)
        else:
            value = by_name[name.lower()].strip()
        lines.append(f'"{name}": {value}')
    lines.append(f'"@signature-params": {sig.params}')
    return "\n".join(lines).encode()


def verify_http_signature(
    sig: HttpSignature,
    doc: DidDocument,
    method: str,
    url: str,
    headers: Mapping[str, str],
    realm: str,
    *,
    max_age: float = 300.0,
    max_skew: float = 60.0,
) -> None:
    """Check an HTTP message signature against the signer's DID document: it covers
    the method and target, is fresh, and verifies. The body is not needed: a body
    is bound by the Content-Digest header the signature covers, which
    :func:`check_content_digest` compares once the body has been read, so a caller
    who cannot sign never gets the gateway to read or parse one."""
    covered = {c.lower() for c in sig.components}
    if "@method" not in covered or not covered & {"@target-uri", "@authority"}:
        raise DidWbaAuthError(
            "invalid_request", "the signature must cover @method and @target-uri", realm=realm
        )
    now = time.time()
    expired = sig.expires is not None and sig.expires < now
    if now - sig.created > max_age or sig.created - now > max_skew or expired:
        raise DidWbaAuthError("invalid_timestamp", "the signature is expired or ahead", realm=realm)
    key = authenticating_key(doc, sig.keyid, doc.id, realm)
    data = signature_base(sig, method, url, headers, realm)
    try:
        verify(key, sig.signature, data)
    except InvalidSignature:
        raise DidWbaAuthError(
            "invalid_signature", "the signature does not verify", realm=realm
        ) from None


def check_content_digest(
    sig: HttpSignature, headers: Mapping[str, str], body: bytes, realm: str
) -> None:
    """A body is only as authentic as the signed ``Content-Digest`` that names it."""
    covered = {c.lower() for c in sig.components}
    if not body and "content-digest" not in covered:
        return
    want = "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"
    digest = next((v for k, v in headers.items() if k.lower() == "content-digest"), "")
    if "content-digest" not in covered or digest.strip() != want:
        raise DidWbaAuthError(
            "invalid_signature", "the Content-Digest does not match the body", realm=realm
        )
