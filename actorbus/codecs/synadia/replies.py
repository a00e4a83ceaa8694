"""The Synadia reply stream (chunks, the end marker, errors) and the error mapping;
the codec registration."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from actorbus.codecs.common import (
    ENVELOPE_FIELDS_BUT_HINT,
    content_intent,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    ProtocolError,
    error_for_code,
)
from actorbus.codecs.synadia.prompt import (
    attachment_bytes,
    attachment_of,
    check_attachments,
    decode,
    encode,
    envelope_of,
    ext_dict,
    fill_ext,
)
from actorbus.codecs.synadia.service import (
    ERROR_CODE_HEADER,
    ERROR_HEADER,
    EXTENSION_KEY,
    MAX_ERROR_DESCRIPTION,
    PROTOCOL,
    dumps,
    json_decode,
    loads,
)

# -- the reply stream ---------------------------------------------------------------------------

_INTENT_ERROR, _INTENT_END = "$error", "$end"


@dataclass(frozen=True)
class Frame:
    """One message of a reply stream: its body and its headers."""

    data: bytes
    headers: dict[str, str] | None = None

    @property
    def is_end(self) -> bool:
        return not self.data and not self.headers

    @property
    def is_error(self) -> bool:
        return bool(self.headers) and ERROR_CODE_HEADER in (self.headers or {})


ACK_FRAME = Frame(b'{"type":"status","data":"ack"}')
END_FRAME = Frame(b"")


def reply_chunk(env: Envelope) -> dict[str, Any]:
    """A reply or stream item envelope as a ``response`` chunk; what the envelope
    has beyond its text rides the chunk's ``actorbus`` field (clients ignore it)."""
    ext: dict[str, Any] = {}
    content = env.content
    data: Any
    if isinstance(content, str):
        data = content
    elif isinstance(content, bytes | bytearray | memoryview):
        ext["content"] = "bytes"
        data = {"text": "", "attachments": [attachment_of(content)]}
    else:
        ext["content"] = "json"
        data = dumps(content).decode("utf-8")
    chunk: dict[str, Any] = {"type": "response", "data": data}
    fill_ext(env, ext, content_intent(content))
    chunk[EXTENSION_KEY] = ext
    return chunk


def reply_frames(env: Envelope) -> list[Frame]:
    """The frames for one envelope of a reply: an error frame and the end marker for
    ``$error``, the end marker for ``$end``, else one response chunk."""
    if env.intent == _INTENT_ERROR:
        return [error_frame(env.content), END_FRAME]
    if env.intent == _INTENT_END:
        return [END_FRAME]
    return [Frame(dumps(reply_chunk(env)))]


def reply_stream(items: Iterable[Envelope], *, ack: bool = True) -> Iterator[Frame]:
    """A whole reply: the leading ack, every item's frames, the end marker once."""
    if ack:
        yield ACK_FRAME
    for env in items:
        frames = reply_frames(env)
        yield from frames
        if frames[-1].is_end:
            return
    yield END_FRAME


def status_chunk(token: str = "ack") -> Frame:
    """A ``status`` chunk (``ack`` is the leading ack and the keep-alive)."""
    return Frame(dumps({"type": "status", "data": token}))


def query_chunk(query_id: str, reply_subject: str, prompt: str) -> Frame:
    """A mid-stream question; the caller answers once on ``reply_subject``."""
    data = {"id": query_id, "reply_subject": reply_subject, "prompt": prompt}
    return Frame(dumps({"type": "query", "data": data}))


ChunkKind = Literal["response", "status", "query", "ignored", "error", "end"]


@dataclass(frozen=True)
class ReplyEvent:
    """One frame of an agent's reply, read: ``chunk`` for response/status/query,
    ``error`` for an error frame."""

    kind: ChunkKind
    chunk: dict[str, Any] | None = None
    error: ActorBusError | None = None

    @property
    def text(self) -> str | None:
        if self.kind != "response" or self.chunk is None:
            return None
        data = self.chunk["data"]
        return data if isinstance(data, str) else str(data["text"])


def read_frame(data: bytes, headers: Mapping[str, str] | None = None) -> ReplyEvent:
    """Classify one reply frame (error, end marker, chunk) and check its chunk."""
    if headers and ERROR_CODE_HEADER in headers:
        return ReplyEvent("error", error=error_from(Frame(data, dict(headers))))
    if not data and not headers:
        return ReplyEvent("end")
    chunk = loads(data, "reply chunk")
    if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
        raise DecodeError("a Synadia reply chunk must be an object with a string 'type'")
    kind = chunk["type"]
    if kind not in ("response", "status", "query"):
        return ReplyEvent("ignored", chunk)  # the protocol says: drop unknown types
    _CHUNK_CHECKS[kind](chunk.get("data"))
    return ReplyEvent(kind, chunk)


def _check_response(data: Any) -> None:
    if isinstance(data, str):
        return
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise DecodeError("a response chunk's data must be text or {text, attachments}")
    check_attachments(data.get("attachments"), "response")


def _check_status(data: Any) -> None:
    if not isinstance(data, str):
        raise DecodeError("a status chunk's data must be a string")


def _check_query(data: Any) -> None:
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("id", "reply_subject", "prompt")
    ):
        raise DecodeError("a query chunk's data needs string id, reply_subject and prompt")
    check_attachments(data.get("attachments"), "query")


_CHUNK_CHECKS = {"response": _check_response, "status": _check_status, "query": _check_query}


def chunk_to_envelope(chunk: Mapping[str, Any], request: Envelope) -> Envelope:
    """A ``response`` chunk as the reply envelope to ``request`` (its fields from the
    chunk's extension when an actorbus agent sent it)."""
    if not isinstance(chunk, Mapping) or chunk.get("type") != "response":
        raise DecodeError("only a Synadia response chunk becomes a reply envelope")
    data = chunk.get("data")
    _check_response(data)
    ext = chunk.get(EXTENSION_KEY)
    ext = ext if isinstance(ext, dict) else {}
    form = ext.get("content")
    content: Any
    if isinstance(data, dict):
        attachments = data.get("attachments") or []
        if form == "bytes" and attachments:
            content = attachment_bytes(attachments[0])
        else:  # text with attachments stays the {text, attachments} object
            content = dict(data) if attachments else data.get("text")
    elif form == "json" and isinstance(data, str):
        content = loads(data, "chunk marked as JSON")
    else:
        content = data
    fields: dict[str, Any] = {"content": content, "intent": content_intent(content)}
    if ext:  # an actorbus agent said exactly who and what
        fields.update(src="", dst="")
        fields.update({k: ext[k] for k in ("id", "ts", "src", "dst", "intent") if k in ext})
        context = ext_dict(ext, "context")
    else:  # any other agent: the reply to the request
        fields.update(src=request.dst, dst=request.src)
        context = {"trace_id": request.context.trace_id, "parent_id": request.id}
    meta = ext_dict(ext, "meta")
    meta.setdefault("protocol_hint", PROTOCOL)
    return envelope_of(fields, {k: v for k, v in context.items() if v is not None}, meta)


@dataclass
class ReplyStream:
    """Reads an agent's reply stream in order (pure; feed it every frame).

    The rules of the host: chunks until the end marker; an error frame is
    followed only by the end marker; nothing comes after the end marker.
    ``responses`` counts response chunks, ``acked`` says a status ack arrived.
    """

    ended: bool = False
    failed: ActorBusError | None = None
    acked: bool = False
    responses: int = 0
    events: list[ReplyEvent] = field(default_factory=list)

    def feed(self, data: bytes, headers: Mapping[str, str] | None = None) -> ReplyEvent:
        if self.ended:
            raise ProtocolError("Synadia reply stream: a frame after the end marker")
        event = read_frame(data, headers)
        if self.failed is not None and event.kind != "end":
            raise ProtocolError(f"Synadia reply stream: {event.kind} after the error frame")
        if event.kind == "end":
            self.ended = True
        elif event.kind == "error":
            self.failed = event.error
        elif event.kind == "status" and event.chunk and event.chunk["data"] == "ack":
            self.acked = True
        elif event.kind == "response":
            self.responses += 1
        self.events.append(event)
        return event


# -- errors ----------------------------------------------------------------------------------------

#: taxonomy code -> Nats-Service-Error-Code (HTTP style; an unknown code is 500)
TAXONOMY_TO_STATUS: dict[str, str] = {
    "E_DECODE": "400",
    "E_VALIDATION": "400",
    "E_PROTOCOL": "400",
    "E_ADDRESS": "400",
    "E_AUTH": "401",
    "E_NOT_FOUND": "404",
    "E_NO_RESPONDERS": "404",
    "E_EXPIRED": "408",
    "E_TOO_LARGE": "413",
    "E_RATE_LIMIT": "429",
    "E_CANCELLED": "499",
    "E_ENCODE": "500",
    "E_HANDLER": "500",
    "E_INTERNAL": "500",
    "E_UNSUPPORTED": "501",
    "E_STOPPED": "503",
    "E_CONN": "503",
    "E_TIMEOUT": "504",
}
#: Nats-Service-Error-Code -> taxonomy code, for agents that send no actorbus body.
STATUS_TO_TAXONOMY: dict[str, str] = {
    "400": "E_VALIDATION",
    "401": "E_AUTH",
    "403": "E_AUTH",
    "404": "E_NOT_FOUND",
    "408": "E_EXPIRED",
    "413": "E_TOO_LARGE",
    "429": "E_RATE_LIMIT",
    "499": "E_CANCELLED",
    "501": "E_UNSUPPORTED",
    "503": "E_STOPPED",
    "504": "E_TIMEOUT",
}


def describe(text: str) -> str:
    """A ``Nats-Service-Error`` value: one line, ASCII ``...`` past 200 characters."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= MAX_ERROR_DESCRIPTION else flat[: MAX_ERROR_DESCRIPTION - 3] + "..."


def error_to(err: ActorBusError) -> dict[str, str]:
    """The two micro-service error headers for an error."""
    return _error_headers(_error_body_of(err))


def _error_body_of(err: ActorBusError) -> dict[str, Any]:
    body = err.to_wire()
    retry = getattr(err, "retry_after", None)
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        body["retry_after"] = retry
    return body


def _error_headers(body: Mapping[str, Any]) -> dict[str, str]:
    code = TAXONOMY_TO_STATUS.get(str(body.get("code", "E_HANDLER")), "500")
    return {
        ERROR_HEADER: describe(str(body.get("message", "")) or "error"),
        ERROR_CODE_HEADER: code,
    }


def error_frame(err: ActorBusError | Any) -> Frame:
    """An error frame: the headers, and the actorbus error body as JSON context."""
    body = _error_body_of(err) if isinstance(err, ActorBusError) else err
    if not isinstance(body, dict):
        body = {"code": "E_HANDLER", "type": "Exception", "message": str(body)}
    return Frame(dumps(body), _error_headers(body))


def error_from(obj: Any) -> ActorBusError:
    """The typed error for an error frame (:class:`Frame`) or its headers.

    The JSON body an actorbus agent sends gives the exact error; otherwise the
    status code decides (:data:`STATUS_TO_TAXONOMY`; others are remote errors).
    Malformed input gives a ProtocolError (returned, not raised).
    """
    headers = obj.headers if isinstance(obj, Frame) else obj
    if not isinstance(headers, Mapping) or not isinstance(headers.get(ERROR_CODE_HEADER), str):
        return ProtocolError(f"not a Synadia error frame: {obj!r:.200}")
    status = headers[ERROR_CODE_HEADER]
    description = str(headers.get(ERROR_HEADER, ""))
    body = _body_of(obj.data) if isinstance(obj, Frame) else None
    if body is None:
        body = {"code": STATUS_TO_TAXONOMY.get(status, "E_HANDLER"), "message": description}
        body["type"] = f"ServiceError{status}"
    return _error_instance(body)


def _body_of(data: bytes) -> dict[str, Any] | None:
    """The actorbus error body an error frame carries, if it carries one."""
    try:
        body = json_decode(data) if data else None
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("code"), str) and isinstance(body.get("message"), str):
        return body
    return None


def _error_instance(body: Mapping[str, Any]) -> ActorBusError:
    code, message = str(body["code"]), str(body["message"])
    err = error_for_code(code, message, str(body.get("type") or code))
    retry = body.get("retry_after")
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        err.retry_after = retry  # type: ignore[attr-defined]
    return err


CODEC = register(
    Codec(PROTOCOL, encode, decode, error_to, error_from, carries=ENVELOPE_FIELDS_BUT_HINT)
)
