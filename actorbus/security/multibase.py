"""Byte encodings of keys and signatures: base58btc (multibase ``z...``), unpadded
base64url (JWKs, DIDWba and HTTP signatures), and Multikey public keys.

One copy of each, for every protocol edge and the security layer alike.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from actorbus.codecs.errors import DecodeError

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
