"""ANP (Agent Network Protocol, PyPI ``anp`` 1.x) at the edge of the bus.

Three things an ANP peer needs from actorbus, all pure functions (no I/O, no
clock: callers pass ``now``; the gateway fetches documents and keeps nonces):

- **Identity**: ``did:wba`` DIDs and DID documents, the ``Authorization: DIDWba``
  header and RFC 9421 signatures live in ``actorbus.security`` (``did``,
  ``didwba``, ``http_signatures``), the one home of identity and signature code.
- **Discovery**: the agent description document (``ad.json``, ``protocolType``
  ANP) whose interface is an OpenRPC document (:func:`agent_description`).
- **Messages**: JSON-RPC 2.0 on the agent's rpc endpoint, the codec below.

Envelope <-> JSON-RPC (the paper's field alignment: request_id, source and
target DIDs, payload, trace, idempotency and session all travel):

=========================  ==================================================
envelope                   JSON-RPC request
=========================  ==================================================
id                         ``id`` (request_id)
intent                     ``method`` (the OpenRPC method the actor serves)
content (a dict)           ``params`` by name
content (anything else)    ``params.payload`` (bytes as base64)
src, dst, ts, context,     ``params._meta`` (src is the caller's DID once the
meta                       gateway has checked it; dst the target DID)
=========================  ==================================================

``_meta`` (not ``meta``) because business params may well have a ``meta`` key,
and ``_meta`` is the reserved-key convention JSON-RPC agent protocols (MCP) use.
A reply is a JSON-RPC response whose ``id`` is the request's id (the reply
envelope's ``context.parent_id``); a dict result carries ``_meta`` the same way.
Every envelope field survives envelope -> ANP -> envelope.

Errors are JSON-RPC error objects: the standard codes, ANP's server codes
(-32000 unauthenticated, -32001 forbidden, -32002 not found, -32005 rate
limited), actorbus codes for the rest, and ``data.code`` with the exact actorbus
code (see :data:`RPC_CODE_OF`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from actorbus.codecs.common import (
    ENVELOPE_FIELDS,
    INTENT_ERROR,
    build_envelope,
    content_intent,
    convert,
    envelope_error,
    envelope_fields,
    error_envelope,
    rebuild_error,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    ProtocolError,
    RemoteError,
    UnsupportedError,
)

# -- the agent description (ad.json) and its OpenRPC interface ------------------------

OPENRPC_VERSION = "1.3.2"


def openrpc_document(
    title: str,
    rpc_url: str,
    methods: Sequence[str | Mapping[str, Any]],
    *,
    version: str = "1.0.0",
    description: str = "",
) -> dict[str, Any]:
    """An OpenRPC document for the agent's JSON-RPC endpoint; a method given by
    name takes any params by name and returns any result."""
    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    return {
        "openrpc": OPENRPC_VERSION,
        "info": info,
        "servers": [{"name": title, "url": rpc_url}],
        "methods": [_openrpc_method(m) for m in methods],
    }


def _openrpc_method(method: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(method, str):
        return {
            "name": method,
            "paramStructure": "by-name",
            "params": [],
            "result": {"name": "result", "schema": {}},
        }
    out = dict(method)
    out.setdefault("params", [])
    return out


def agent_description(
    *,
    name: str,
    did: str,
    url: str,
    rpc_url: str,
    methods: Sequence[str | Mapping[str, Any]] = (),
    description: str = "",
    openrpc_url: str | None = None,
    created: str | None = None,
    version: str = "1.0.0",
) -> dict[str, Any]:
    """The ANP agent description document served at ``url`` (``/agent/ad.json``).

    One ``StructuredInterface`` of protocol ``openrpc``: linked when
    ``openrpc_url`` is given, else embedded; DIDWba as the security scheme.
    ``did`` is the agent's, checked by whoever made it.
    """
    interface: dict[str, Any] = {
        "type": "StructuredInterface",
        "protocol": "openrpc",
        "version": OPENRPC_VERSION,
        "description": f"JSON-RPC 2.0 interface of {name}",
    }
    if openrpc_url is not None:
        interface["url"] = openrpc_url
    else:
        interface["content"] = openrpc_document(name, rpc_url, methods, version=version)
    ad: dict[str, Any] = {
        "protocolType": "ANP",
        "protocolVersion": "1.0.0",
        "type": "AgentDescription",
        "url": url,
        "name": name,
        "did": did,
        "description": description,
        "securityDefinitions": {
            "didwba_sc": {"scheme": "didwba", "in": "header", "name": "Authorization"}
        },
        "security": "didwba_sc",
        "interfaces": [interface],
    }
    if created is not None:
        ad["created"] = created
    return ad


# -- JSON-RPC ------------------------------------------------------------------------

JSONRPC = "2.0"
RpcId = str | int | None


class RpcRequest(msgspec.Struct, omit_defaults=True):
    jsonrpc: Literal["2.0"]
    method: str
    params: dict[str, Any] | list[Any] | None = None
    id: RpcId = None


class RpcErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class RpcResponse(msgspec.Struct, omit_defaults=True):
    jsonrpc: Literal["2.0"]
    id: RpcId
    result: Any = None
    error: RpcErrorObject | None = None


def rpc_request(method: str, params: Any, request_id: RpcId) -> dict[str, Any]:
    """A JSON-RPC 2.0 request (a notification when ``request_id`` is None)."""
    out: dict[str, Any] = {"jsonrpc": JSONRPC, "method": method, "params": params}
    if request_id is not None:
        out["id"] = request_id
    return out


def rpc_result(request_id: RpcId, result: Any) -> dict[str, Any]:
    """A JSON-RPC 2.0 success response."""
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def rpc_error(request_id: RpcId, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response with a code of the caller's choosing."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": JSONRPC, "id": request_id, "error": error}


# -- envelope <-> params / result ----------------------------------------------------

META_KEY = "_meta"
_CARRIED = ("id", "ts", "src", "dst", "intent", "context", "meta")


def _carried_meta(env: Envelope, form: str | None, *, skip: tuple[str, ...]) -> dict[str, Any]:
    meta = envelope_fields(env)
    for name in skip:
        del meta[name]
    if form is not None:
        meta["form"] = form
    return meta


def _wrap(env: Envelope, carry: bool, skip: tuple[str, ...]) -> Any:
    """Content as params/result: a dict by name, anything else under ``payload``;
    with ``carry``, the envelope's other fields under ``_meta``."""
    content = env.content
    if isinstance(content, dict) and META_KEY not in content:
        if not carry:
            return content
        return {**content, META_KEY: _carried_meta(env, None, skip=skip)}
    if not carry and isinstance(content, list):
        return content
    form = "bytes" if isinstance(content, bytes) else "payload"
    payload = base64.b64encode(content).decode() if isinstance(content, bytes) else content
    if not carry:
        return {"payload": payload}
    return {"payload": payload, META_KEY: _carried_meta(env, form, skip=skip)}


def _unwrap(value: Any) -> tuple[Any, dict[str, Any]]:
    """params/result -> (content, the carried envelope fields)."""
    if not isinstance(value, dict) or not isinstance(value.get(META_KEY), dict):
        return value, {}
    meta = dict(value[META_KEY])
    form = meta.pop("form", None)
    if form is None:
        return {k: v for k, v in value.items() if k != META_KEY}, meta
    payload = value.get("payload")
    if form == "bytes":
        if not isinstance(payload, str):
            raise DecodeError("an ANP bytes payload is not a base64 string")
        try:
            return base64.b64decode(payload, validate=True), meta
        except (binascii.Error, ValueError) as exc:
            raise DecodeError(f"an ANP bytes payload is not base64: {exc}") from exc
    if form != "payload":
        raise DecodeError(f"unknown ANP payload form {form!r:.40}")
    return payload, meta


def _envelope_data(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {name: meta[name] for name in _CARRIED if name in meta}


def _native_defaults(data: dict[str, Any], carried: Mapping[str, Any]) -> None:
    """What a message from a plain JSON-RPC peer (no ``_meta``) cannot say: no
    time (0: a codec reads no clock), no target, and replies should go back in
    ANP."""
    data.setdefault("dst", "")
    data.setdefault("ts", 0)
    if not carried:
        data["meta"] = {"protocol_hint": "anp"}


# -- encode / decode ----------------------------------------------------------------


def encode_request(env: Envelope, *, carry: bool = True) -> dict[str, Any]:
    """A JSON-RPC request: ``method`` = intent, ``id`` = envelope id."""
    return rpc_request(env.intent, _wrap(env, carry, ("id", "intent")), env.id)


def encode_response(
    env: Envelope, *, request_id: RpcId = None, carry: bool = True
) -> dict[str, Any]:
    """A JSON-RPC response for a reply envelope (an ``$error`` one gives an error
    response); the id is ``request_id`` or the reply's ``context.parent_id``."""
    rid = request_id if request_id is not None else env.context.parent_id
    if env.intent == INTENT_ERROR:
        return error_response(envelope_error(env), rid)
    return rpc_result(rid, _wrap(env, carry, ()))


def encode(env: Envelope) -> dict[str, Any]:
    """The codec's encode: an error response for ``$error``, else a request."""
    if env.intent == INTENT_ERROR:
        return encode_response(env)
    return encode_request(env)


def decode_request(obj: Any) -> Envelope:
    """A JSON-RPC request -> envelope (a notification gets a fresh id)."""
    req = convert(obj, RpcRequest, "JSON-RPC request")
    if not req.method:
        raise DecodeError("a JSON-RPC request needs a method")
    content, meta = _unwrap(obj.get("params"))
    data = _envelope_data(meta)
    data["intent"] = req.method
    data["content"] = content
    _native_defaults(data, meta)
    if req.id is not None:
        data["id"] = str(req.id)
    return build_envelope(data, "an ANP request")


def decode_response(obj: Any) -> Envelope:
    """A JSON-RPC response -> reply envelope (``$error`` for an error response);
    ``context.parent_id`` is the request id."""
    resp = convert(obj, RpcResponse, "JSON-RPC response")
    parent = None if resp.id is None else str(resp.id)
    if resp.error is not None:
        return error_envelope(error_from(obj["error"]), parent_id=parent)
    content, meta = _unwrap(obj.get("result"))
    data = _envelope_data(meta)
    data["content"] = content
    data.setdefault("intent", content_intent(content))
    _native_defaults(data, meta)
    if parent is not None and not meta:  # a plain peer: the id is what we asked
        data["context"] = {"parent_id": parent}
    return build_envelope(data, "an ANP response")


def decode(obj: Any) -> Envelope:
    """The codec's decode: a JSON-RPC request or response -> envelope."""
    if isinstance(obj, list):
        raise UnsupportedError("JSON-RPC batches are not supported")
    if not isinstance(obj, dict):
        raise DecodeError(f"a JSON-RPC message is an object, not {type(obj).__name__}")
    if "method" in obj:
        return decode_request(obj)
    if "result" in obj or "error" in obj:
        return decode_response(obj)
    raise DecodeError("not a JSON-RPC message: no method, result or error")


# -- errors -----------------------------------------------------------------------------

#: actorbus code -> JSON-RPC error code. Standard codes first, then ANP's server
#: codes, then codes of actorbus's own in the server range (-32010...).
RPC_CODE_OF: dict[str, int] = {
    "E_DECODE": -32700,
    "E_PROTOCOL": -32600,
    "E_UNSUPPORTED": -32601,
    "E_VALIDATION": -32602,
    "E_ADDRESS": -32602,
    "E_INTERNAL": -32603,
    "E_HANDLER": -32603,
    "E_ENCODE": -32603,
    "E_AUTH": -32000,
    "E_NOT_FOUND": -32002,
    "E_NO_RESPONDERS": -32002,
    "E_RATE_LIMIT": -32005,
    "E_TIMEOUT": -32010,
    "E_CONN": -32011,
    "E_EXPIRED": -32012,
    "E_STOPPED": -32013,
    "E_CANCELLED": -32014,
    "E_TOO_LARGE": -32015,
}
#: JSON-RPC code -> actorbus code, for errors from peers that send no data.code.
CODE_OF_RPC: dict[int, str] = {
    -32700: "E_DECODE",
    -32600: "E_PROTOCOL",
    -32601: "E_UNSUPPORTED",
    -32602: "E_VALIDATION",
    -32000: "E_AUTH",
    -32001: "E_AUTH",
    -32002: "E_NOT_FOUND",
    -32004: "E_VALIDATION",
    -32005: "E_RATE_LIMIT",
    -32010: "E_TIMEOUT",
    -32011: "E_CONN",
    -32012: "E_EXPIRED",
    -32013: "E_STOPPED",
    -32014: "E_CANCELLED",
    -32015: "E_TOO_LARGE",
}


def _error_object(err: ActorBusError) -> dict[str, Any]:
    wire = err.to_wire()
    return {
        "code": RPC_CODE_OF.get(err.code, -32603),
        "message": wire["message"],
        "data": {"code": err.code, "type": wire["type"]},
    }


def error_response(err: ActorBusError, request_id: RpcId = None) -> dict[str, Any]:
    """The JSON-RPC error response for ``err`` to the request ``request_id``."""
    return {"jsonrpc": JSONRPC, "id": request_id, "error": _error_object(err)}


def error_to(err: ActorBusError) -> dict[str, Any]:
    """The codec's error form: an error response (id null; see error_response)."""
    return error_response(err)


def error_from(obj: Any) -> ActorBusError:
    """A JSON-RPC error response or error object -> the typed error; never raises."""
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        obj = obj["error"]
    if not isinstance(obj, dict) or not isinstance(obj.get("code"), int):
        return ProtocolError(f"malformed JSON-RPC error: {obj!r:.200}")
    message = str(obj.get("message", ""))
    data = obj.get("data")
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return rebuild_error(data["code"], message, str(data.get("type") or "Exception"))
    code = CODE_OF_RPC.get(obj["code"])
    if code is None:
        return RemoteError(message, remote_type=f"JSONRPCError{obj['code']}")
    return rebuild_error(code, message)


CODEC = register(
    Codec(
        name="anp",
        encode=encode,
        decode=decode,
        error_to=error_to,
        error_from=error_from,
        carries=ENVELOPE_FIELDS,
    )
)
