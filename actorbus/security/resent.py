"""A fresh, signed stamp on a message sent again long after it was made.

An idempotent durable handler's sends are recorded with its handled key and
sent again when its message comes back after a crash (see
``actorbus.actors.outbox``). That is at least ``ack_wait`` later, so their
envelopes, sealed and signed when the handler ran, are stamped too long before
the store took them for the receiver's clock-skew check, which exists to refuse
a captured message played back into the stream. The envelope cannot be stamped
again without opening it. So the sender adds ``Ab-Resent: <ms>.<signature>``:
the time it sends the message again, and its signature over that time and the
envelope's id, by the key that opened the message's session. The receiver
checks the signature against that session's sender and then checks the resend
time, not the envelope's, against its clock; the id still goes through the
replay window, and the stream drops a copy it already holds by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from cryptography.exceptions import InvalidSignature

from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.multibase import b64url, b64url_decode

RESENT_HEADER: Final = "Ab-Resent"
_DOMAIN = b"actorbus-resent\x00"


def _statement(envelope_id: str, at_ms: int) -> bytes:
    return _DOMAIN + envelope_id.encode() + b"\x00" + str(at_ms).encode()


def resent_stamp(signer: Identity, envelope_id: str, at_ms: int) -> str:
    """The header's value: ``at_ms`` signed with the session's sender key."""
    return f"{at_ms}.{b64url(signer.sign(_statement(envelope_id, at_ms)))}"


def resent_at(value: str, envelope_id: str, sender: PublicIdentity) -> int:
    """The resend time ``value`` states, once ``sender``'s signature over it and
    the envelope's id verifies; AuthError otherwise."""
    at_text, _, sig_text = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not at_text.isdigit() or not sig_text:
        raise AuthError(f"malformed {RESENT_HEADER} header")
    try:
        signature = b64url_decode(sig_text)
    except DecodeError:
        raise AuthError(f"malformed {RESENT_HEADER} header") from None
    at_ms = int(at_text)
    try:
        sender.verifier().verify(signature, _statement(envelope_id, at_ms))
    except InvalidSignature:
        raise AuthError(
            f"the {RESENT_HEADER} stamp of message {envelope_id:.40} is not {sender.did:.60}'s"
        ) from None
    return at_ms


def stamped_at(
    envelope_id: str, envelope_ts: int, headers: Mapping[str, str], sender: PublicIdentity
) -> tuple[str, int]:
    """What the replay window takes the message as, and when it was sent (for the
    clock-skew check): its id and its envelope's stamp; or, sent again, its id
    with its verified resend time and that time. Each sending the sender's key
    signed is taken once (a dead letter replayed where that key is, after the
    first delivery took the id); a copy of any of them, played back, is not."""
    value = headers.get(RESENT_HEADER)
    if value is None:
        return envelope_id, envelope_ts
    at_ms = resent_at(value, envelope_id, sender)
    return f"{envelope_id}+{at_ms}", at_ms
