"""Sessions: every message authenticated, and sealed when policy says so, at the
cost of a symmetric cipher per message.

Signing each message with Ed25519 and checking it costs about 70 µs of CPU per
message pair, more than a whole ``ask`` costs today. So a sender signs once per
*session* instead, and every message of the session is authenticated with a key
only the two ends can derive:

1. The sender makes an ephemeral X25519 key pair and signs, with its identity's
   Ed25519 key, the recipient's key id, the ephemeral public key and an expiry.
   That signed statement is the session header (``Ab-Session``), the same on
   every message of the session, so a receiver checks it once and caches it.
2. Both ends derive two AES-256-GCM keys with HKDF-SHA256 from the X25519
   secret of the ephemeral key and the recipient's static agreement key (salt:
   the ephemeral public key; info: both key ids): one for messages to the
   recipient, one for the answers back. Nobody else can derive them: a forged
   session header fails the signature, a copied one gives no key.
3. A sealed message's content is the AES-256-GCM ciphertext of its plaintext
   (a fresh 96-bit nonce each), with every other envelope field (id, src, dst,
   ts, intent, context) as associated data: opening it proves all of them, and
   the ciphertext cannot be moved into another envelope. A message that is
   authenticated but not sealed carries ``Ab-Auth``: a nonce and the GCM tag
   over its whole body.

Sessions expire (``SESSION_LIFETIME_MS``) and a sender starts a new one before
that, or after ``SESSION_MAX_MESSAGES``: key rotation without a round trip.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.multibase import b64url, b64url_decode

if TYPE_CHECKING:  # credentials are checked by the guard; here they are only passed on
    from actorbus.security.credentials import Credential

SESSION_HEADER: Final = "Ab-Session"
AUTH_HEADER: Final = "Ab-Auth"
CIPHER: Final = "A256GCM"
SESSION_LIFETIME_MS: Final = 10 * 60 * 1000
SESSION_MAX_MESSAGES: Final = 1 << 24
_RENEW_BEFORE_MS: Final = 30_000  # a new session this long before the old one ends
_NONCE: Final = 12
_NONCE_SPACE: Final = 1 << (8 * _NONCE)
_TAG: Final = 16
_SESSION_LABEL: Final = b"actorbus-session/1|"
_KDF_LABEL: Final = b"actorbus/1|"


@dataclass(frozen=True)
class SessionKeys:
    """The two directions of one session."""

    forward: AESGCM  # sender -> recipient
    back: AESGCM  # recipient -> sender (answers)


def _derive(shared: bytes, eph_pub: bytes, sender_kid: str, recipient_kid: str) -> SessionKeys:
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=64,
        salt=eph_pub,
        info=_KDF_LABEL + sender_kid.encode() + b"|" + recipient_kid.encode(),
    ).derive(shared)
    return SessionKeys(AESGCM(okm[:32]), AESGCM(okm[32:]))


def _statement(recipient_kid: str, eph_pub: bytes, expires_ms: int) -> bytes:
    return (
        _SESSION_LABEL + recipient_kid.encode() + b"|" + eph_pub + b"|" + str(expires_ms).encode()
    )


class OutboundSession:
    """A sender's live session with one recipient key."""

    def __init__(self, sender: Identity, recipient: PublicIdentity, now_ms: int) -> None:
        eph = x25519.X25519PrivateKey.generate()
        eph_pub = eph.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.expires_ms = now_ms + SESSION_LIFETIME_MS
        signature = sender.sign(_statement(recipient.kid, eph_pub, self.expires_ms))
        self.header = ".".join(
            (sender.kid, recipient.kid, b64url(eph_pub), str(self.expires_ms), b64url(signature))
        )
        # The header's line as encode_headers writes it, for the request
        # encoder's shortcut (the same on every message of the session).
        self.header_line = f"{SESSION_HEADER}: {self.header}\r\n"
        shared = eph.exchange(x25519.X25519PublicKey.from_public_bytes(recipient.agreement_key))
        self.keys = _derive(shared, eph_pub, sender.kid, recipient.kid)
        self.recipient = recipient
        self.sent = 0

    def fresh(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms - _RENEW_BEFORE_MS and self.sent < SESSION_MAX_MESSAGES


@dataclass(frozen=True)
class InboundSession:
    """A session as its recipient accepted it: who opened it, and its keys."""

    sender: Credential
    keys: SessionKeys
    expires_ms: int
    recipient_kid: str


def accept_session(
    header: str,
    recipient: Identity,
    credential_of: Callable[[str], Credential],
    now_ms: int,
) -> InboundSession:
    """Check a session header addressed to ``recipient``: its signer's credential
    (``credential_of(kid)``, which raises AuthError for an unknown or untrusted
    one), the signature, the expiry; derive the keys. AuthError otherwise."""
    parts = header.split(".") if isinstance(header, str) else []
    if len(parts) != 5 or not parts[3].isdigit():
        raise AuthError(f"malformed {SESSION_HEADER} header")
    sender_kid, recipient_kid, eph_text, expires_text, sig_text = parts
    if recipient_kid != recipient.kid:
        raise AuthError(f"session opened for key {recipient_kid:.60}, not this recipient's")
    expires = int(expires_text)
    if expires <= now_ms:
        raise AuthError("session expired")
    if expires > now_ms + SESSION_LIFETIME_MS + 60_000:
        raise AuthError("session lasts longer than any sender may open one")
    try:
        eph_pub, signature = b64url_decode(eph_text), b64url_decode(sig_text)
    except DecodeError:
        raise AuthError(f"malformed {SESSION_HEADER} header") from None
    if len(eph_pub) != 32:
        raise AuthError(f"malformed {SESSION_HEADER} header")
    sender = credential_of(sender_kid)
    try:
        sender.subject.verifier().verify(signature, _statement(recipient_kid, eph_pub, expires))
    except InvalidSignature:
        raise AuthError(f"session signature of {sender.subject.did:.80} does not verify") from None
    shared = recipient.agree(eph_pub)
    keys = _derive(shared, eph_pub, sender_kid, recipient_kid)
    return InboundSession(sender, keys, expires, recipient_kid)


def session_signer(header: str) -> str:
    """The key id that signed a session header (to find its credential)."""
    return header.partition(".")[0]


# -- per message -------------------------------------------------------------------
# A GCM nonce must never repeat under one key. Each process counts up from a random
# 96-bit start (drawn again in a forked child), so its own nonces never repeat, and
# two processes that share a key (the hosts of one type, answering on one session)
# repeat one only if their ranges meet somewhere in 2**96: less likely than two
# random nonces colliding. Random bytes from the system on every message (a system
# call) cost half as much as the cipher itself.
_nonce_start = 0
_nonce_counter = itertools.count()


def _new_nonce_source() -> None:
    global _nonce_start, _nonce_counter
    _nonce_start = int.from_bytes(os.urandom(_NONCE))
    _nonce_counter = itertools.count()


_new_nonce_source()
os.register_at_fork(after_in_child=_new_nonce_source)


def fresh_nonce() -> bytes:
    """A 96-bit nonce this process has not used before (see above)."""
    return ((_nonce_start + next(_nonce_counter)) % _NONCE_SPACE).to_bytes(_NONCE)


def tag_body(aead: AESGCM, body: bytes) -> str:
    """``Ab-Auth`` for ``body``: a fresh nonce and the GCM tag over every byte."""
    nonce = fresh_nonce()
    return b64url(nonce + aead.encrypt(nonce, b"", body))


def check_body(aead: AESGCM, body: bytes, auth: str | None) -> None:
    """AuthError unless ``auth`` is the tag of ``body`` under this key."""
    if not auth:
        raise AuthError(f"message without {AUTH_HEADER}")
    try:
        raw = b64url_decode(auth)
    except DecodeError:
        raise AuthError(f"malformed {AUTH_HEADER}") from None
    if len(raw) != _NONCE + _TAG:
        raise AuthError(f"malformed {AUTH_HEADER}")
    try:
        aead.decrypt(raw[:_NONCE], raw[_NONCE:], body)
    except InvalidTag:
        raise AuthError(
            "message does not match its authentication tag (forged or altered)"
        ) from None


CONTEXT_FIELDS: Final = (
    "trace_id",
    "parent_id",
    "session_id",
    "idempotency_key",
    "ttl_ms",
    "stream",
)
_NO_CONTEXT: Final = (None,) * len(CONTEXT_FIELDS)


def sealing_aad(
    msg_id: str, src: str, dst: str, ts: int, intent: str, context: Sequence[Any] = ()
) -> bytes:
    """What a sealed content is bound to: the envelope's id, src, dst, ts, intent
    and its context (the values of ``CONTEXT_FIELDS``, in that order; None and
    False leave a field out). A sealed message needs no other tag: opening it
    proves every one of these.

    Four times per sealed ask (each side seals one and opens one), so the fields
    are written out rather than looped over: half the time of a loop."""
    aad = f"{msg_id}\x1f{src}\x1f{dst}\x1f{ts}\x1f{intent}"
    if len(context) != len(CONTEXT_FIELDS):
        context = (*context, *_NO_CONTEXT)[: len(CONTEXT_FIELDS)]
    trace, parent, session, key, ttl, stream = context
    if trace is not None and trace is not False:
        aad += f"\x1ftrace_id={trace}"
    if parent is not None and parent is not False:
        aad += f"\x1fparent_id={parent}"
    if session is not None and session is not False:
        aad += f"\x1fsession_id={session}"
    if key is not None and key is not False:
        aad += f"\x1fidempotency_key={key}"
    if ttl is not None and ttl is not False:
        aad += f"\x1fttl_ms={ttl}"
    if stream is not None and stream is not False:
        aad += f"\x1fstream={stream}"
    return aad.encode()


def seal(aead: AESGCM, plaintext: bytes, aad: bytes) -> bytes:
    nonce = fresh_nonce()
    return nonce + aead.encrypt(nonce, plaintext, aad)


def unseal(aead: AESGCM, sealed: bytes, aad: bytes) -> bytes:
    if len(sealed) < _NONCE + _TAG:
        raise AuthError("sealed content too short")
    try:
        return aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], aad)
    except InvalidTag:
        raise AuthError("sealed content does not open (wrong key, forged or altered)") from None


def now_ms() -> int:
    return int(time.time() * 1000)
