"""Agora (agora-protocol 0.2.x) at the edge of the bus.

An Agora message is a text ``body`` said under a *protocol*: ``protocolHash``
names the protocol document it follows (``null``: plain natural language) and
``protocolSources`` says where to fetch that document. A ``multiround`` request
opens a conversation: the reply's ``conversationId`` names it, follow-ups go to
``{base}/conversations/{id}`` until ``conversationExpires``.

- Request: ``{body, protocolHash, protocolSources, multiround}``.
- Reply: ``{status: "success", body, conversationId?, conversationExpires?}``,
  or an error in either shape seen in the wild: the spec's
  ``{"status": "failure", "error": ...}`` and the SDK's ``{"status": "error",
  "message": ...}`` (both are read; :func:`error_reply` writes either).
- Protocol document: front-matter (``name``, ``description``, ``multiround``)
  between ``---`` lines, then the text. ``protocolHash`` is the SHA-1 of the
  whole document: the spec writes 40 hex digits, the SDK base64; both are
  accepted and normalised to hex (:func:`normalize_hash`, :func:`hash_matches`).

Envelope <-> Agora: Agora's message has a text-only body and no metadata slot
of its own; as the ProtocolRouter appendix maps it (G.2: the envelope's fields
under ``metadata``), a request carries the rest of the envelope in an optional
``metadata`` object that Agora peers ignore:

=========================  =====================================================
envelope                   Agora
=========================  =====================================================
content (text)             ``body``; other JSON content is sent as its JSON text
                           (``metadata.contentType`` "json" says to parse it back);
                           bytes cannot be sent
id, ts, src, dst, intent,  ``metadata`` of a request (the envelope's plain-data
context, meta              form, ``meta["agora"]`` left out): a request from an
                           actorbus edge comes back whole, security markers and
                           trace included
context.session_id         also ``conversationId`` of a reply, and of a request
                           the URL (:func:`conversation_url`,
                           :func:`decode_request` ``conversation_id=``)
meta["agora"]              ``protocolHash`` (hex, and the form it came in),
                           ``protocolSources``, ``multiround``,
                           ``conversationExpires``: decode fills, encode reads
=========================  =====================================================

A request without ``metadata`` (an Agora client's) and every reply carry only
the body (and the conversation): decoded, they get ``ts`` 0 (a codec reads no
clock), intent ``text`` and ``protocol_hint`` agora.
The SDK answers with HTTP 200 whatever happened and its client treats any other
status as a transport failure, so the gateway answers errors 200 with an error
body.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote, unquote

import msgspec

# the documents' part lives in agora_documents; named here too, as before
from actorbus.codecs.agora_documents import (
    HashStyle as HashStyle,
    ProtocolDocument as ProtocolDocument,
    hash_matches as hash_matches,
    hash_style as hash_style,
    normalize_hash as normalize_hash,
    parse_front_matter as parse_front_matter,
    parse_protocol_document as parse_protocol_document,
    protocol_document as protocol_document,
    protocol_hash as protocol_hash,
)
from actorbus.codecs.common import (
    ENVELOPE_FIELDS_BUT_HINT,
    INTENT_ERROR,
    build_envelope,
    convert,
    envelope_error,
    envelope_fields,
    error_envelope,
    json_text,
    json_value,
    rebuild_error,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    EncodeError,
    ProtocolError,
    RemoteError,
    UnsupportedError,
)

# -- protocolSources and conversations --------------------------------------------------

_DATA_TEXT = "data:text/plain;charset=utf-8"


def data_uri(text: str) -> str:
    """A protocol document inlined as a source, as the SDK writes it."""
    return f"{_DATA_TEXT}," + quote(text)


def read_data_uri(uri: Any) -> str:
    """The text of a ``data:`` protocol source (percent-encoded or base64)."""
    if not isinstance(uri, str) or not uri.startswith("data:") or "," not in uri:
        raise DecodeError(f"not a data: URI: {uri!r:.80}")
    header, payload = uri[5:].split(",", 1)
    params = [p.strip().lower() for p in header.split(";")]
    if params[0] not in ("", "text/plain", "text/markdown"):
        raise UnsupportedError(f"protocol sources are text, not {params[0]!r:.40}")
    try:
        raw = base64.b64decode(payload, validate=True) if "base64" in params else None
        return raw.decode() if raw is not None else unquote(payload, errors="strict")
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"a data: URI does not decode: {exc}") from exc


def conversation_url(base: str, conversation_id: str) -> str:
    """Where the follow-ups of a multiround conversation go."""
    return f"{base.rstrip('/')}/conversations/{quote(conversation_id, safe='')}"


_CONVERSATION_PATH = re.compile(r"(?:^|/)conversations/([^/]+)/?$")


def conversation_id_of(path: str) -> str | None:
    """The conversation id in a ``.../conversations/{id}`` path, else None."""
    match = _CONVERSATION_PATH.search(path)
    return unquote(match.group(1)) if match else None


# -- the wire messages ------------------------------------------------------------------


class AgoraRequest(msgspec.Struct, omit_defaults=True):
    body: str
    protocolHash: str | None = None
    protocolSources: list[str] = msgspec.field(default_factory=list)
    multiround: bool = False
    metadata: dict[str, Any] | None = None  # the rest of the envelope (appendix G.2)


class AgoraReply(msgspec.Struct, omit_defaults=True):
    status: Literal["success", "failure", "error"]
    body: str | None = None
    error: Any = None
    message: Any = None
    conversationId: str | None = None
    conversationExpires: str | int | float | None = None


def agora_facts(env: Envelope) -> dict[str, Any]:
    """What a decoded message left in ``meta["agora"]``."""
    facts = (env.meta.model_extra or {}).get("agora")
    return facts if isinstance(facts, dict) else {}


def body_text(content: Any) -> str:
    """Envelope content as an Agora body: text as is, None as "", other JSON
    data as its JSON text. Bytes have no faithful text form: EncodeError."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, bytes | bytearray):
        raise EncodeError("an Agora body is text; bytes content cannot be sent over Agora")
    return json_text(content)


# -- encode -----------------------------------------------------------------------------


def encode_request(env: Envelope, *, style: HashStyle | None = None) -> dict[str, Any]:
    """An Agora request for an envelope, under the protocol ``meta["agora"]``
    names (natural language when it names none). The hash is written in the form
    it arrived in, else ``style`` (default hex, the spec's; SDK receivers compare
    base64 strings, so talk to them with ``style="base64"``)."""
    facts = agora_facts(env)
    given = facts.get("protocolHash")
    digest = None
    if isinstance(given, str):
        hex_digest = normalize_hash(given)
        form = style or facts.get("hashStyle") or "hex"
        digest = (
            hex_digest if form == "hex" else base64.b64encode(bytes.fromhex(hex_digest)).decode()
        )
    sources = facts.get("protocolSources")
    return {
        "body": body_text(env.content),
        "protocolHash": digest,
        "protocolSources": list(sources) if isinstance(sources, list) else [],
        "multiround": bool(facts.get("multiround")) or env.context.session_id is not None,
    } | ({} if facts.get("metadata") is False else {"metadata": _metadata(env)})


def _metadata(env: Envelope) -> dict[str, Any]:
    """The envelope but its content (and the Agora facts the message itself holds)."""
    fields = envelope_fields(env)
    meta = fields.get("meta")
    if meta is not None:
        meta = {k: v for k, v in meta.items() if k not in ("agora", "protocol_hint")}
        if meta:
            fields["meta"] = meta
        else:
            del fields["meta"]
    if not isinstance(env.content, str) and env.content is not None:
        fields["contentType"] = "json"
    return fields


def encode_reply(
    env: Envelope,
    *,
    conversation_id: str | None = None,
    expires: str | int | float | None = None,
    style: Literal["spec", "sdk"] = "spec",
) -> dict[str, Any]:
    """An Agora reply for an actor's reply envelope (error envelopes give an
    error reply); ``conversationId`` defaults to the envelope's session."""
    if env.intent == INTENT_ERROR:
        return error_reply(envelope_error(env), style=style)
    reply: dict[str, Any] = {"status": "success", "body": body_text(env.content)}
    conversation = conversation_id or env.context.session_id
    if conversation is not None:
        reply["conversationId"] = conversation
        until = expires if expires is not None else agora_facts(env).get("conversationExpires")
        if until is not None:
            reply["conversationExpires"] = until
    return reply


def encode(env: Envelope) -> dict[str, Any]:
    """The codec's encode: an error reply for ``$error``, else a request."""
    if env.intent == INTENT_ERROR:
        return error_to(envelope_error(env))
    return encode_request(env)


# -- decode -----------------------------------------------------------------------------


def _native(content: str, facts: dict[str, Any], session_id: str | None) -> Envelope:
    data: dict[str, Any] = {
        "ts": 0,
        "dst": "",
        "intent": "text",
        "content": content,
        "meta": {"protocol_hint": "agora"} | ({"agora": facts} if facts else {}),
    }
    if session_id is not None:
        data["context"] = {"session_id": session_id}
    return build_envelope(data, "an Agora message")


def decode_request(obj: Any, *, conversation_id: str | None = None) -> Envelope:
    """An Agora request -> envelope; ``conversation_id`` is the id in the URL a
    follow-up was posted to (it becomes the session)."""
    req = convert(obj, AgoraRequest, "Agora request")
    facts: dict[str, Any] = {
        "protocolHash": None,
        "protocolSources": req.protocolSources,
        "multiround": req.multiround,
    }
    if req.protocolHash is not None:
        facts["protocolHash"] = normalize_hash(req.protocolHash)
        facts["hashStyle"] = hash_style(req.protocolHash)
    if req.metadata is None:  # an Agora client's: re-encoded, it stays without one
        return _native(req.body, {**facts, "metadata": False}, conversation_id)
    return _with_metadata(req.body, req.metadata, facts, conversation_id)


def _with_metadata(
    body: str, metadata: dict[str, Any], facts: dict[str, Any], conversation_id: str | None
) -> Envelope:
    """A request an actorbus edge sent: the envelope its ``metadata`` holds."""
    data = {k: v for k, v in metadata.items() if k != "contentType"}
    content: Any = body
    if metadata.get("contentType") == "json":
        content = json_value(body, "an Agora body marked JSON")
    meta = data.get("meta")
    data["meta"] = {**(meta if isinstance(meta, dict) else {}), "protocol_hint": "agora"}
    data["meta"]["agora"] = facts
    if conversation_id is not None:
        context = data.get("context")
        data["context"] = {**(context if isinstance(context, dict) else {})}
        data["context"]["session_id"] = conversation_id
    data.setdefault("dst", "")
    data.setdefault("intent", "text")
    return build_envelope({**data, "content": content}, "an Agora request's metadata")


def decode_reply(obj: Any) -> Envelope:
    """An Agora reply -> reply envelope (``$error`` for either error shape)."""
    reply = convert(obj, AgoraReply, "Agora reply")
    if reply.status != "success":
        return error_envelope(error_from(obj))
    if reply.body is None:
        raise DecodeError("a successful Agora reply has no body")
    facts: dict[str, Any] = {}
    if reply.conversationExpires is not None:
        facts["conversationExpires"] = reply.conversationExpires
    return _native(reply.body, facts, reply.conversationId)


def decode(obj: Any) -> Envelope:
    """The codec's decode: a reply (it has ``status``) or a request -> envelope."""
    if not isinstance(obj, dict):
        raise DecodeError(f"an Agora message is a JSON object, not {type(obj).__name__}")
    if "status" in obj:
        return decode_reply(obj)
    if "body" in obj:
        return decode_request(obj)
    raise DecodeError("not an Agora message: no body or status")


# -- errors -----------------------------------------------------------------------------
#
# Agora's error is one string. actorbus writes "E_CODE: message" so another
# actorbus edge gets the same typed error back; an error without that prefix is
# the remote agent's own failure (RemoteError).

_CODED = re.compile(r"(E_[A-Z_]+): (.*)", re.DOTALL)


def error_text(err: ActorBusError) -> str:
    """``E_CODE: message``: Agora's one error string, with the code recoverable."""
    return f"{err.code}: {err.to_wire()['message']}"


def error_reply(err: ActorBusError, *, style: Literal["spec", "sdk"] = "spec") -> dict[str, Any]:
    """An error reply: the spec's ``failure``/``error`` or the SDK's ``error``/``message``."""
    if style == "sdk":
        return {"status": "error", "message": error_text(err)}
    return {"status": "failure", "error": error_text(err)}


def error_to(err: ActorBusError) -> dict[str, Any]:
    """The codec's error form: the spec's failure reply."""
    return error_reply(err)


def error_from(obj: Any) -> ActorBusError:
    """Either error shape (or a bare string) -> the typed error; never raises."""
    text: Any = obj
    if isinstance(obj, Mapping):
        text = obj.get("error") if obj.get("error") is not None else obj.get("message")
    if isinstance(text, Mapping):  # some agents send {"error": {"message": ...}}
        text = text.get("message")
    if not isinstance(text, str):
        return ProtocolError(f"malformed Agora error: {obj!r:.200}")
    coded = _CODED.fullmatch(text)
    if coded is not None:
        return rebuild_error(coded.group(1), coded.group(2))
    return RemoteError(text, remote_type="AgoraError")


CODEC = register(
    Codec(
        name="agora",
        encode=encode,
        decode=decode,
        error_to=error_to,
        error_from=error_from,
        carries=ENVELOPE_FIELDS_BUT_HINT,
    )
)
