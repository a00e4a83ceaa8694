"""Identities: who signed a message, and who can open one sealed to it.

An :class:`Identity` is two key pairs: Ed25519 to sign and X25519 to agree on
keys (ECDHE). It is named by the ``did:key`` of its signing key, and it can
describe itself as a ``did:wba`` document for the web. Only the public half
(:class:`PublicIdentity`) ever leaves the process: it is what credentials carry
and what peers cache.

Private keys live in one file per identity, 0600, written atomically; they are
never logged (``repr`` shows the DID only) and never sent anywhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519

from actorbus.codecs.errors import DecodeError
from actorbus.security.keys import write_private
from actorbus.security.multibase import b58decode, b58encode, b64url, b64url_decode

log = logging.getLogger("actorbus.security")

ED25519_MULTICODEC = b"\xed\x01"
X25519_MULTICODEC = b"\xec\x01"
DID_KEY = "did:key:"
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _raw_public(key: ed25519.Ed25519PublicKey | x25519.X25519PublicKey) -> bytes:
    return key.public_bytes(*_RAW)


def did_key(verify_key: bytes) -> str:
    """The ``did:key`` of a raw Ed25519 public key (``did:key:z6Mk...``)."""
    return DID_KEY + "z" + b58encode(ED25519_MULTICODEC + verify_key)


def verify_key_of(did: str) -> bytes:
    """The raw Ed25519 public key a ``did:key`` names; DecodeError if it names none."""
    if not isinstance(did, str) or not did.startswith(DID_KEY + "z"):
        raise DecodeError(f"not an Ed25519 did:key: {did!r:.80}")
    raw = b58decode(did[len(DID_KEY) + 1 :])
    if not raw.startswith(ED25519_MULTICODEC) or len(raw) != 34:
        raise DecodeError(f"not an Ed25519 did:key: {did!r:.80}")
    return raw[2:]


@dataclass(frozen=True)
class PublicIdentity:
    """What others know of an identity: its DID and its two public keys."""

    did: str
    verify_key: bytes  # raw Ed25519, 32 bytes
    agreement_key: bytes  # raw X25519, 32 bytes

    @cached_property
    def kid(self) -> str:
        """The key id messages name their signer by: the did:key's fingerprint
        (kept: looked up several times for every sealed message)."""
        return self.did[len(DID_KEY) :]

    def verifier(self) -> ed25519.Ed25519PublicKey:
        return ed25519.Ed25519PublicKey.from_public_bytes(self.verify_key)

    def to_json(self) -> dict[str, str]:
        return {
            "did": self.did,
            "verify_key": b64url(self.verify_key),
            "agreement_key": b64url(self.agreement_key),
        }

    @classmethod
    def from_json(cls, obj: Any) -> PublicIdentity:
        """A public identity as ``to_json`` wrote it; DecodeError naming what is wrong."""
        if not isinstance(obj, dict):
            raise DecodeError("a public identity must be an object")
        verify = b64url_decode(obj.get("verify_key"))
        agree = b64url_decode(obj.get("agreement_key"))
        if len(verify) != 32 or len(agree) != 32:
            raise DecodeError("a public identity's keys must be 32 bytes each")
        did = obj.get("did")
        if did != did_key(verify):
            raise DecodeError("a public identity's did must be the did:key of its verify key")
        return cls(did, verify, agree)

    def did_document(self, did: str | None = None) -> dict[str, Any]:
        """This identity as a DID document (for ``did``, by default its did:key):
        the Ed25519 key for authentication and assertions, the X25519 key for key
        agreement, both as Multikey."""
        subject = did or self.did
        sign_id, agree_id = f"{subject}#sign", f"{subject}#agree"
        return {
            "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
            "id": subject,
            "verificationMethod": [
                {
                    "id": sign_id,
                    "type": "Multikey",
                    "controller": subject,
                    "publicKeyMultibase": "z" + b58encode(ED25519_MULTICODEC + self.verify_key),
                },
                {
                    "id": agree_id,
                    "type": "Multikey",
                    "controller": subject,
                    "publicKeyMultibase": "z" + b58encode(X25519_MULTICODEC + self.agreement_key),
                },
            ],
            "authentication": [sign_id],
            "assertionMethod": [sign_id],
            "keyAgreement": [agree_id],
        }


class Identity:
    """A private identity: sign with it, agree on keys with it. Keep it in one
    process; hand out :attr:`public`."""

    def __init__(
        self, signing: ed25519.Ed25519PrivateKey, agreement: x25519.X25519PrivateKey
    ) -> None:
        self._signing = signing
        self._agreement = agreement
        verify = _raw_public(signing.public_key())
        self.public = PublicIdentity(did_key(verify), verify, _raw_public(agreement.public_key()))
        self.kid: Final = self.public.kid  # its public identity's key id

    @classmethod
    def generate(cls) -> Identity:
        return cls(ed25519.Ed25519PrivateKey.generate(), x25519.X25519PrivateKey.generate())

    @property
    def did(self) -> str:
        return self.public.did

    def sign(self, data: bytes) -> bytes:
        return self._signing.sign(data)

    def signing_seed(self) -> bytes:
        """The raw Ed25519 private key, for a JOSE library that signs with it
        (an authority's credentials); nothing else should need it."""
        return self._signing.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )

    def agree(self, peer_agreement_key: bytes) -> bytes:
        """The X25519 shared secret with a peer's public agreement key."""
        peer = x25519.X25519PublicKey.from_public_bytes(peer_agreement_key)
        return self._agreement.exchange(peer)

    def __repr__(self) -> str:
        return f"Identity({self.did})"

    # -- files -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, create: bool = True) -> Identity:
        """The identity in ``path``; with ``create``, a new one saved there first
        when there is none. A file that is not an identity is an error, never
        silently replaced."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if not create:
                raise
            identity = cls.generate()
            if identity.save(path, exclusive=True):
                return identity
            data = path.read_bytes()  # another process made it first: theirs it is
        return cls._parse(data, path)

    @classmethod
    def _parse(cls, data: bytes, path: Path) -> Identity:
        try:
            keys = [
                serialization.load_pem_private_key(block, password=None)
                for block in _pem_blocks(data)
            ]
        except (ValueError, TypeError):
            keys = []
        signing = [k for k in keys if isinstance(k, ed25519.Ed25519PrivateKey)]
        agreement = [k for k in keys if isinstance(k, x25519.X25519PrivateKey)]
        if len(signing) != 1 or len(agreement) != 1:
            raise DecodeError(
                f"{path} is not an actorbus identity (one Ed25519 and one X25519 private key)"
            )
        return cls(signing[0], agreement[0])

    def save(self, path: str | Path, *, exclusive: bool = False) -> bool:
        """Write both private keys (PEM, PKCS#8) to ``path``, 0600, atomically;
        with ``exclusive``, not over a file already there (then False)."""
        path = Path(path)
        pem = b"".join(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            for key in (self._signing, self._agreement)
        )
        if not write_private(path, pem, exclusive=exclusive):
            return False
        log.info("identity %s saved to %s", self.did, path)
        return True


def _pem_blocks(data: bytes) -> list[bytes]:
    end = b"-----END PRIVATE KEY-----"
    return [chunk + end + b"\n" for chunk in data.split(end) if chunk.strip()]
