"""Sender keys: pub/sub topics sealed to their subscribers, every message signed.

A topic message has many recipients, so a pairwise session per message would
cost one seal per subscriber. Instead (the Signal "sender keys" design):

1. A sender makes a random AES-256-GCM key for a topic (a *sender key*, named
   by a random ``skid``) and wraps it to every actor type that listens to the
   topic: for each, a session (``security.sessions``: ephemeral X25519 ECDHE
   with the type's key, signed by the sender) and the key sealed with that
   session's key, bound to the skid, the topic and the sender. The wraps go
   into the namespace's topic-key bucket under the skid, once per key.
2. Each message's content is sealed with the sender key (the same AAD as a
   session's: every envelope field), and the whole body is signed with the
   sender's Ed25519 identity (``Ab-Sig``). Subscribers hold the key, so the key
   alone could not tell the sender from another subscriber: the signature
   does, and the receiver checks that the signer's credential covers ``src``.
3. A receiver meeting a new skid fetches its record once, opens the wrap for
   its own type, and caches the key.

Who listens is declared by each listener itself: a *listening statement* (its
credential, its topic patterns, signed with its key) in the identities bucket,
so only a holder of a type's key can make messages be sealed to it. Listeners
are actor types, and systems themselves for their raw subscriptions
(``ActorSystem.subscribe``; named ``@<key id>``). A sender starts a new key
when the key is due (as sessions are) or when the set of listeners changes: one
that starts listening reads from the next key on; one that stops (a system's
subscriptions end, a type's credential is revoked or its key rotated) reads
nothing sent under the keys after.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.multibase import b64url, b64url_decode
from actorbus.security.sessions import (
    SESSION_LIFETIME_MS,
    OutboundSession,
    accept_session,
    seal,
    session_signer,
    unseal,
)

if TYPE_CHECKING:  # credentials are checked by the guard; here they are only passed on
    from actorbus.security.credentials import Credential

TOPIC_HEADER: Final = "Ab-Topic"  # "<signer kid>.<skid>"
SIGNATURE_HEADER: Final = "Ab-Sig"  # Ed25519 over the whole body
TOPIC_KEY_LIFETIME_MS: Final = SESSION_LIFETIME_MS
_RENEW_BEFORE_MS: Final = 30_000
_WRAP_LABEL: Final = b"actorbus-topic-key/1|"
_LISTEN_LABEL: Final = b"actorbus-listening/1|"
_SIG_LABEL: Final = b"actorbus-topic-msg/1|"


# -- listening statements ---------------------------------------------------------------
def system_listener(kid: str) -> str:
    """The listener name of a system itself (its raw topic subscriptions), beside
    actor type names: ``@`` and its key id."""
    return "@" + kid


def listening_statement(
    identity: Identity, token: str, listener: str, patterns: Iterable[str]
) -> bytes:
    """What a listener (an actor type, or ``system_listener(kid)``) says it listens
    to: its credential, its patterns, signed with its key."""
    topics = sorted(set(patterns))
    signature = identity.sign(_listening_bytes(listener, topics))
    doc = {"credential": token, "type": listener, "topics": topics, "sig": b64url(signature)}
    return json.dumps(doc, separators=(",", ":")).encode()


def _listening_bytes(listener: str, topics: list[str]) -> bytes:
    return _LISTEN_LABEL + json.dumps([listener, topics], separators=(",", ":")).encode()


def read_listening(
    raw: bytes, check: Callable[[str], Credential]
) -> tuple[str, tuple[str, ...], Credential]:
    """The (listener, patterns, credential) of a listening statement whose
    credential ``check`` accepts for the listener (the type's, or the system's
    own key for ``@kid``) and signed with it; AuthError otherwise."""
    try:
        doc = json.loads(raw)
        listener, topics, sig = doc["type"], doc["topics"], b64url_decode(doc["sig"])
        token = doc["credential"]
    except (ValueError, KeyError, TypeError, DecodeError):
        raise AuthError("malformed listening statement") from None
    if not isinstance(listener, str) or not isinstance(topics, list) or not isinstance(token, str):
        raise AuthError("malformed listening statement")
    cred = check(token)
    if listener.startswith("@"):
        if cred.subject.kid != listener[1:]:
            raise AuthError(
                f"a listening statement for {listener:.40} with another key's credential"
            )
    elif not cred.may_receive_for(listener):
        raise AuthError(f"a listening statement for {listener!r} with another type's credential")
    try:
        cred.subject.verifier().verify(sig, _listening_bytes(listener, [str(t) for t in topics]))
    except InvalidSignature:
        raise AuthError(f"the listening statement of {listener!r} does not verify") from None
    return listener, tuple(str(t) for t in topics), cred


# -- the sender's side -------------------------------------------------------------------
class TopicSender:
    """One sender key: what a sender seals a topic's messages with until it is due."""

    def __init__(
        self,
        signer: Identity,
        topic: str,
        listeners: Mapping[str, PublicIdentity],
        now_ms: int,
    ) -> None:
        # libsodium signs in 2/3 and verifies in 1/2 the time of cryptography's
        # Ed25519: a topic message is signed once and checked by every listener
        self._signing = SigningKey(signer.signing_seed())
        self.topic = topic
        self.skid = b64url(os.urandom(16))
        self.header = f"{signer.kid}.{self.skid}"
        self.expires_ms = now_ms + TOPIC_KEY_LIFETIME_MS
        self.listeners = frozenset((t, p.kid) for t, p in listeners.items())
        key = AESGCM.generate_key(bit_length=256)
        self.aead = AESGCM(key)
        wraps = {}
        for type_name, recipient in sorted(listeners.items()):
            session = OutboundSession(signer, recipient, now_ms)
            aad = _wrap_aad(self.skid, topic, signer.kid, self.expires_ms)
            wraps[type_name] = [session.header, seal(session.keys.forward, key, aad)]
        self.record: bytes = msgpack.packb(
            {"topic": topic, "sender": signer.kid, "exp": self.expires_ms, "wraps": wraps}
        )

    def fresh(self, now_ms: int, listeners: Mapping[str, PublicIdentity]) -> bool:
        """Still the key to use: not due, and sealed to exactly these listeners."""
        current = frozenset((t, p.kid) for t, p in listeners.items())
        return now_ms < self.expires_ms - _RENEW_BEFORE_MS and current == self.listeners

    def sign(self, body: bytes) -> str:
        signed = self._signing.sign(_SIG_LABEL + self.skid.encode() + b"|" + body)
        return b64url(signed.signature)


def _wrap_aad(skid: str, topic: str, sender_kid: str, expires_ms: int) -> bytes:
    return _WRAP_LABEL + f"{skid}|{topic}|{sender_kid}|{expires_ms}".encode()


# -- the receiver's side -----------------------------------------------------------------
@dataclass(frozen=True)
class TopicKey:
    """A sender key as a receiver opened it."""

    skid: str
    topic: str
    sender: Credential
    aead: AESGCM
    expires_ms: int
    verify_key: VerifyKey  # the sender's, for each message's signature


def parse_topic_header(header: str) -> tuple[str, str]:
    """(signer kid, skid) of an ``Ab-Topic`` header; AuthError if malformed."""
    kid, dot, skid = header.rpartition(".") if isinstance(header, str) else ("", "", "")
    if not dot or not kid or not skid:
        raise AuthError(f"malformed {TOPIC_HEADER} header")
    return kid, skid


def open_record(
    raw: bytes,
    skid: str,
    type_name: str,
    recipient_of: Callable[[str], Identity],
    credential_of: Callable[[str], Credential],
    now_ms: int,
) -> TopicKey:
    """The sender key ``skid`` from its record, through the wrap for ``type_name``
    (opened with ``recipient_of(key id)``, the type's key the wrap names);
    AuthError when there is none for this type, or it is not genuine. ``now_ms``
    is when the message was sent or stored: the wrap's session must have been
    valid then."""
    try:
        record: dict[str, Any] = msgpack.unpackb(raw)
        topic, sender_kid, expires = record["topic"], record["sender"], int(record["exp"])
        wraps = record["wraps"]
    except (ValueError, KeyError, TypeError, msgpack.UnpackException):
        raise AuthError(f"malformed topic key record {skid:.30}") from None
    wrap = wraps.get(type_name) if isinstance(wraps, dict) else None
    if not isinstance(wrap, list) or len(wrap) != 2:
        raise AuthError(
            f"topic key {skid:.30} of {topic!r} is not sealed to {type_name!r} (it started "
            "listening after the key was made: the sender's next key includes it)"
        )
    session_header, wrapped = wrap
    if not isinstance(session_header, str) or session_signer(session_header) != sender_kid:
        raise AuthError(f"topic key {skid:.30} wrapped by another key than its sender's")
    sealed_to = session_header.split(".")[1] if session_header.count(".") == 4 else ""
    session = accept_session(session_header, recipient_of(sealed_to), credential_of, now_ms)
    if not isinstance(wrapped, bytes):
        raise AuthError(f"malformed topic key record {skid:.30}")
    key = unseal(session.keys.forward, wrapped, _wrap_aad(skid, str(topic), sender_kid, expires))
    verify_key = VerifyKey(session.sender.subject.verify_key)
    return TopicKey(skid, str(topic), session.sender, AESGCM(key), expires, verify_key)


def check_signature(key: TopicKey, body: bytes, signature: str | None) -> None:
    """AuthError unless ``signature`` is the sender's over ``body``."""
    if not signature:
        raise AuthError(f"topic message without {SIGNATURE_HEADER}")
    try:
        raw = b64url_decode(signature)
        key.verify_key.verify(_SIG_LABEL + key.skid.encode() + b"|" + body, raw)
    except (DecodeError, BadSignatureError, ValueError):
        raise AuthError("topic message signature does not verify (forged or altered)") from None
