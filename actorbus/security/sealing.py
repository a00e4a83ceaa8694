"""Envelopes on a session: content sealed to its recipient and opened again,
answers checked before a caller takes them.

The message pipeline (``actors/pipeline.py``) calls these when it builds or
decodes an envelope that travels on a session; the guard
(``security/guard.py``) when it admits one. Every field of the envelope is
bound to its sealed content, so opening it proves the whole envelope.
"""

from __future__ import annotations

from typing import Any, Final

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nats.aio.msg import Msg

from actorbus.codecs.errors import AuthError
from actorbus.codecs.inbound import Inbound, decode_reply
from actorbus.codecs.wire import pack, unpack
from actorbus.security.sessions import (
    AUTH_HEADER,
    CIPHER,
    CONTEXT_FIELDS,
    InboundSession,
    OutboundSession,
    check_body,
    seal,
    sealing_aad,
    unseal,
)

_OPENED: Final = "_actorbus_opened"


def seal_content(data: dict[str, Any], key: AESGCM) -> None:
    """Seal an envelope's content in place (``data`` is the envelope about to be
    encoded), bound to its id, addresses, time, intent and context."""
    ctx = data["context"]
    aad = sealing_aad(
        data["id"],
        data["src"],
        data["dst"],
        data["ts"],
        data["intent"],
        tuple(map(ctx.get, CONTEXT_FIELDS)),
    )
    data["content"] = seal(key, pack(data["content"]), aad)
    data["meta"] = {"cipher": CIPHER}


def _inbound_aad(env: Inbound) -> bytes:
    c = env.context
    context = (c.trace_id, c.parent_id, c.session_id, c.idempotency_key, c.ttl_ms, c.stream)
    return sealing_aad(env.id, env.src, env.dst, env.ts, env.intent, context)


def attach_session(env: Inbound, session: InboundSession | None) -> None:
    """Remember the session ``env`` came in on (its answer goes back on it) and
    open its content if it is sealed; AuthError for sealed content without one."""
    if session is None:
        refuse_sealed(env)
        return
    env.__dict__["_session"] = session
    if env.sealed:
        open_content(env, session.keys.forward)


def refuse_sealed(env: Inbound) -> None:
    """AuthError for sealed content that came without a session: nothing here can
    open it, and a handler must never be given ciphertext as its message."""
    if env.sealed:
        raise AuthError(f"message {env.id} is sealed but came without a session")


def open_content(env: Inbound, key: AESGCM) -> None:
    """Open sealed content in place; AuthError if it does not open (forged,
    altered, or moved from another envelope: every field is bound to it)."""
    if env.meta is None or env.meta.cipher != CIPHER or not isinstance(env.content, bytes):
        raise AuthError(f"message {env.id}: sealed with an unknown cipher, or not bytes")
    env.content = unpack(unseal(key, env.content, _inbound_aad(env)))
    env.meta = None
    env.__dict__.pop("_envelope", None)
    env.__dict__["_opened"] = True  # its answers are sealed too


def session_of(env: Inbound) -> InboundSession | None:
    """The session ``env`` came in on (None: it came unauthenticated)."""
    session: InboundSession | None = env.__dict__.get("_session")
    return session


def check_answer(msg: Msg, session: OutboundSession) -> None:
    """Check an answer on ``session`` before taking it: a sealed one is opened (and
    kept opened on ``msg`` for :func:`opened_answer`), another one's tag is
    checked. AuthError if it is not genuine."""
    headers = msg.headers
    auth = headers.get(AUTH_HEADER) if headers else None
    if auth is not None:
        check_body(session.keys.back, msg.data, auth)
        return
    try:
        intent, content, sealed = decode_reply(msg.data)
    except Exception:
        raise AuthError("an answer that is neither sealed nor tagged") from None
    if sealed is None or not isinstance(content, bytes):
        raise AuthError("an answer that is neither sealed nor tagged")
    content = unpack(unseal(session.keys.back, content, sealing_aad(*sealed)))
    msg.__dict__[_OPENED] = (intent, content)


def opened_answer(msg: Msg) -> tuple[str, Any] | None:
    """The (intent, content) :func:`check_answer` opened already, if it did."""
    opened: tuple[str, Any] | None = msg.__dict__.get(_OPENED)
    return opened
