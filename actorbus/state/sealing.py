"""State sealed to its actor type's key, so the store holds only ciphertext.

The broker's operator, a database administrator and members of other types read
nothing: a value is AES-256-GCM under a key agreed (X25519, HKDF-SHA256) between
an ephemeral key of the writing activation and the actor type's agreement key,
which only the type's hosts hold. The entry's name is the associated data, so a
value copied under another actor's entry does not open. An activation agrees
once and seals each write with a fresh nonce (its ephemeral public key goes
with every value); whoever holds the type key (a host, or ``actorbus state
get`` on a machine whose home holds it) opens any value, also one sealed to a
key retired by a rotation, as long as it is still held.

On an open bus (no security) values are kept plain, marked as such.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from actorbus.codecs.errors import StateError
from actorbus.codecs.wire import pack, unpack
from actorbus.security.identity import Identity, PublicIdentity

_INFO = b"actorbus-state/1|"
ALGORITHM = "A256GCM"


class StateSeal:
    """Seals one activation's writes to its type's key (None: kept plain)."""

    def __init__(self, recipient: PublicIdentity | None) -> None:
        self.recipient = recipient
        self._aead: AESGCM | None = None
        self._epk = b""
        if recipient is not None:
            ephemeral = Identity.generate()
            self._epk = ephemeral.public.agreement_key
            shared = ephemeral.agree(recipient.agreement_key)
            self._aead = AESGCM(_derive(shared, self._epk, recipient.kid))

    def seal(self, entry: str, record: bytes) -> bytes:
        if self._aead is None or self.recipient is None:
            return pack({"p": record})
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, record, entry.encode())
        return pack(
            {"a": ALGORITHM, "k": self.recipient.kid, "e": self._epk, "n": nonce, "c": sealed}
        )


def is_sealed(blob: bytes) -> bool:
    """Does this stored value need a key to open (False: kept plain)?"""
    return "c" in _parts(blob)


def open_state(blob: bytes, entry: str, key_for: Callable[[str], Identity | None]) -> bytes:
    """The record in a stored value; ``key_for(kid)`` gives the type key it was
    sealed to, when this process holds it. StateError when it does not, or the
    value is not genuine."""
    parts = _parts(blob)
    if "p" in parts:
        return bytes(parts["p"])
    kid = str(parts.get("k", ""))
    key = key_for(kid)
    if key is None:
        raise StateError(
            f"the state in {entry} is sealed to a key this process does not hold ({kid:.60})"
        )
    try:
        shared = key.agree(bytes(parts["e"]))
        aead = AESGCM(_derive(shared, bytes(parts["e"]), kid))
        return aead.decrypt(bytes(parts["n"]), bytes(parts["c"]), entry.encode())
    except (InvalidTag, KeyError, ValueError, TypeError) as exc:
        raise StateError(f"the state in {entry} does not open: not genuine ({exc!r})") from None


def sealed_size(blob: bytes) -> int:
    return len(bytes(_parts(blob).get("c", b"")))


def _parts(blob: bytes) -> dict[str, Any]:
    try:
        parts = unpack(blob)
    except Exception as exc:
        raise StateError(f"a stored state is not a state value ({exc!r})") from None
    if not isinstance(parts, dict):
        raise StateError("a stored state is not a state value")
    return parts


def _derive(shared: bytes, epk: bytes, kid: str) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=epk, info=_INFO + kid.encode()).derive(shared)
