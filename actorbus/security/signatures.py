"""Signing and verifying bytes: the one verifier every edge and the bus use.

Ed25519 signs the bytes as they are; ECDSA (secp256k1, P-256) signs their
SHA-256, and its signatures travel as the raw ``r || s`` pair (as anp, JOSE and
RFC 9421 write them). A DER-encoded ECDSA signature is refused: one encoding, so
one signature per message.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from actorbus.security.did import PrivateKey, PublicKey


def sign(private_key: PrivateKey, data: bytes) -> bytes:
    """A signature of ``data``: Ed25519's 64 bytes, or ECDSA-SHA256's ``r || s``."""
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key.sign(data)
    r, s = decode_dss_signature(private_key.sign(data, ec.ECDSA(hashes.SHA256())))
    size = (private_key.curve.key_size + 7) // 8
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")


def verify(key: PublicKey, signature: bytes, data: bytes) -> None:
    """InvalidSignature unless ``signature`` is ``key``'s over ``data``."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        key.verify(signature, data)
        return
    size = (key.curve.key_size + 7) // 8
    if len(signature) != 2 * size:
        raise InvalidSignature(f"an ECDSA signature here is r || s, {2 * size} bytes")
    r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
    key.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
