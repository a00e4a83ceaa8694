"""Envelope <-> ACP message, runs, events and SSE, and the error mapping; the codec
registration."""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from actorbus.codecs.acp.models import (
    ENVELOPE_PART_TYPE,
    EVENT_MODEL,
    EVENT_OF_STATUS,
    ROLE_RE,
    ErrorCode,
    ErrorEvent,
    Message,
    MessageEvent,
    MessagePartEvent,
    Part,
    Run,
    RunCreateRequest,
    RunEvent,
    RunMode,
    RunResumeRequest,
    RunStatus,
    content_by_form,
    content_parts,
    is_url_ref,
    parts_content,
)

# Shared with the other edge codecs (actorbus.codecs.common); re-exported, as
# they were first written here.
from actorbus.codecs.common import (
    ENVELOPE_FIELDS,
    INTENT_ERROR,
    build_envelope,
    content_intent,
    convert,
    envelope_error,
    envelope_fields,
    error_envelope,
    json_text,
    json_value,
    rebuild_error,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.envelope import Envelope, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    EncodeError,
    ForbiddenError,
    ProtocolError,
    RemoteError,
    UnsupportedError,
)

# -- envelope <-> message ---------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _iso_seconds(secs: int) -> str | None:
    """``YYYY-MM-DDTHH:MM:SS`` for a Unix second (cached: messages come in bursts)."""
    try:
        t = time.gmtime(secs)
    except (OverflowError, OSError, ValueError):
        return None
    if not 1 <= t.tm_year <= 9999:
        return None
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
        f"T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    )


def _iso(ts_ms: int) -> str | None:
    """RFC 3339 UTC with milliseconds, or None for a time outside years 1-9999."""
    secs, ms = divmod(ts_ms, 1000)
    prefix = _iso_seconds(secs)
    return None if prefix is None else f"{prefix}.{ms:03d}Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(moment: datetime | None) -> int | None:
    """Unix milliseconds, in integer arithmetic (float seconds * 1000 can be off
    by one)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def envelope_part(env: Envelope, form: str) -> Part:
    """The part that carries the envelope's own fields (all but content)."""
    data = envelope_fields(env)
    data["form"] = form
    return {"content_type": ENVELOPE_PART_TYPE, "content": json_text(data)}


def message_parts(env: Envelope, *, carry: bool = True) -> list[Part]:
    """The parts for an envelope: content, artifact refs, then the envelope part."""
    parts, form = content_parts(env.content)
    parts.extend({"content_url": ref} for ref in env.context.artifact_refs)
    if carry:
        parts.append(envelope_part(env, form))
    return parts


def agent_role(name: str) -> str:
    """``agent/{name}`` when the name fits ACP's role pattern, else ``agent``."""
    role = f"agent/{name}"
    return role if ROLE_RE.match(role) else "agent"


def envelope_message(env: Envelope, *, role: str = "user", carry: bool = True) -> dict[str, Any]:
    """An ACP message dict for an envelope."""
    message: dict[str, Any] = {"role": role, "parts": message_parts(env, carry=carry)}
    created = _iso(env.ts)
    if created is not None:
        message["created_at"] = created
    return message


def _split_parts(
    messages: Iterable[dict[str, Any]],
) -> tuple[list[Part], list[str], Part | None]:
    """Content parts, URL refs and the (last) envelope part of some messages."""
    content: list[Part] = []
    refs: list[str] = []
    carried: Part | None = None
    for message in messages:
        for part in message["parts"]:
            if part.get("content_type") == ENVELOPE_PART_TYPE:
                carried = part
            elif is_url_ref(part):
                refs.append(part["content_url"])
            else:
                content.append(part)
    return content, refs, carried


def _from_carried(carried: Part, parts: list[Part], facts: dict[str, Any] | None) -> Envelope:
    data = json_value(carried.get("content") or "", "the ACP envelope part")
    if not isinstance(data, dict):
        raise DecodeError("the ACP envelope part is not a JSON object")
    form = data.pop("form", None)
    data["content"] = content_by_form(parts, form)
    if facts:  # the run's own facts are newer than what an earlier hop carried
        meta = data.get("meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        old = meta.get("acp")
        meta["acp"] = {**(old if isinstance(old, dict) else {}), **facts}
        data["meta"] = meta
    return build_envelope(data, "the ACP envelope part")


Native = Callable[[Any, list[str]], dict[str, Any]]


def messages_envelope(
    raw: list[dict[str, Any]],
    checked: list[Message],
    native: Native,
    facts: dict[str, Any] | None = None,
) -> Envelope:
    """An envelope from messages (as sent, and as checked): from the envelope part
    if one is there, else from ``native(content, refs)``, which supplies the
    protocol's own fields; ``facts`` (a run's id and status) go to ``meta["acp"]``."""
    parts, refs, carried = _split_parts(raw)
    if carried is not None:
        return _from_carried(carried, parts, facts)
    content = parts_content(parts)
    data = native(content, refs)
    data["content"] = content
    data.setdefault("intent", content_intent(content))
    data["meta"] = {"protocol_hint": "acp"} | ({"acp": facts} if facts else {})
    ts = _ms(checked[0].created_at) if checked else None
    # A codec reads no clock: without a time in the message, 0 means "not said".
    data["ts"] = ts if ts is not None else data.get("ts", 0)
    return build_envelope(data, "an ACP message")


def _context(
    refs: list[str], *, session_id: str | None = None, stream: bool = False
) -> dict[str, Any]:
    ctx: dict[str, Any] = {}
    if refs:
        ctx["artifact_refs"] = refs
    if session_id is not None:
        ctx["session_id"] = session_id
    if stream:
        ctx["stream"] = True
    return ctx


def acp_facts(env: Envelope) -> dict[str, Any]:
    """What a decoded run or resume left in ``meta["acp"]`` (run_id, status)."""
    facts = (env.meta.model_extra or {}).get("acp")
    return facts if isinstance(facts, dict) else {}


def _with_facts(env: Envelope, facts: dict[str, Any]) -> Envelope:
    """The envelope with ``meta["acp"]`` updated (a run's facts are the newest)."""
    if acp_facts(env) == facts:
        return env
    meta = env.meta.model_dump(exclude_defaults=True) | {"acp": acp_facts(env) | facts}
    return env.model_copy(update={"meta": EnvelopeMeta.model_validate(meta)})


def _bare(content: Any, refs: list[str]) -> dict[str, Any]:
    """The native fields of a message outside a run: only its URL refs."""
    return {"dst": "", "context": _context(refs)}


def _chunk(content: Any, refs: list[str]) -> dict[str, Any]:
    """A streamed part is one chunk of a stream."""
    return {"dst": "", "context": _context(refs, stream=True)}


_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def _uuid_or_none(value: str | None) -> str | None:
    """The session id when it is a UUID (the SDK's type for it), else None."""
    return value if value is not None and _UUID.fullmatch(value) else None


# -- encode -----------------------------------------------------------------------------


def encode_request(
    env: Envelope, *, mode: RunMode | None = None, carry: bool = True
) -> dict[str, Any]:
    """A ``RunCreateRequest`` (``POST /runs``) for an envelope."""
    request: dict[str, Any] = {
        "agent_name": env.dst,
        "input": [envelope_message(env, carry=carry)],
        "mode": mode or ("stream" if env.context.stream else "sync"),
    }
    session = _uuid_or_none(env.context.session_id)
    if session is not None:
        request["session_id"] = session
    return request


def encode_resume(
    env: Envelope, *, run_id: str | None = None, mode: RunMode = "sync", carry: bool = True
) -> dict[str, Any]:
    """A ``RunResumeRequest`` (``POST /runs/{run_id}``) answering an awaiting run."""
    body: dict[str, Any] = {
        "await_resume": {"type": "message", "message": envelope_message(env, carry=carry)},
        "mode": mode,
    }
    if run_id is not None:
        body["run_id"] = run_id
    return body


def run_from_envelope(
    env: Envelope,
    *,
    run_id: str | None = None,
    agent_name: str | None = None,
    status: RunStatus | None = None,
    carry: bool = True,
) -> dict[str, Any]:
    """A ``Run`` for an actor's reply (or ``$error``) envelope.

    ``run_id`` and ``status`` default to the ``meta["acp"]`` facts a decoded run
    leaves, then to a fresh UUID and ``completed`` (``failed`` for an ``$error``
    envelope). ``awaiting`` puts the message in ``await_request``.
    """
    facts = acp_facts(env)
    name = agent_name or env.src or "agent"
    run: dict[str, Any] = {
        "run_id": run_id or facts.get("run_id") or str(uuid.uuid4()),
        "agent_name": name,
        "status": status or facts.get("status") or "completed",
        "output": [],
        "await_request": None,
        "error": None,
    }
    session = _uuid_or_none(env.context.session_id)
    if session is not None:
        run["session_id"] = session
    created = _iso(env.ts)
    if created is not None:
        run["created_at"] = created
    _fill_run(run, env, name, carry)
    return run


def _fill_run(run: dict[str, Any], env: Envelope, name: str, carry: bool) -> None:
    if env.intent == INTENT_ERROR:
        run["status"] = "failed"
        run["error"] = error_to(envelope_error(env))
        return
    message = envelope_message(env, role=agent_role(name), carry=carry)
    if run["status"] == "awaiting":
        run["await_request"] = {"type": "message", "message": message}
    else:
        run["output"] = [message]


def encode(env: Envelope) -> dict[str, Any]:
    """The codec's encode: an ACP error object for ``$error``, else a run request."""
    if env.intent == INTENT_ERROR:
        return error_to(envelope_error(env))
    return encode_request(env)


# -- events and SSE -------------------------------------------------------------------


def run_event(run: Mapping[str, Any]) -> dict[str, Any]:
    """The ``run.*`` event for a run in its current status."""
    status = run.get("status")
    kind = EVENT_OF_STATUS.get(str(status))
    if kind is None:
        raise UnsupportedError(f"ACP has no event for run status {status!r}")
    return {"type": kind, "run": dict(run)}


def message_event(message: Mapping[str, Any], *, completed: bool = False) -> dict[str, Any]:
    """``message.created`` (the start of a streamed message) or ``message.completed``."""
    kind = "message.completed" if completed else "message.created"
    return {"type": kind, "message": dict(message)}


def part_event(part: Mapping[str, Any]) -> dict[str, Any]:
    """``message.part``: one streamed piece of the message being produced."""
    return {"type": "message.part", "part": dict(part)}


def error_event(err: ActorBusError) -> dict[str, Any]:
    """``error``: the stream failed (the SDK sends it before closing)."""
    return {"type": "error", "error": error_to(err)}


def sse_frame(event: Mapping[str, Any] | msgspec.Struct) -> bytes:
    """One SSE frame, ``data: {json}`` ended by a blank line (as the SDK writes).

    The blank line is what ends an event: clients drop a last event without it.
    """
    try:
        body = msgspec.json.encode(event)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"an ACP event is not JSON data: {exc}") from exc
    return b"data: " + body + b"\n\n"


def parse_sse(data: bytes | str) -> list[dict[str, Any]]:
    """The JSON events in an SSE body (or a chunk of whole frames).

    Multi-line ``data:`` fields are joined with newlines as the SSE spec says;
    comments, ``event:``/``id:`` fields and a trailing partial frame are skipped.
    """
    if isinstance(data, bytes):
        try:
            data = data.decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"an SSE stream is not UTF-8: {exc}") from exc
    text = data.replace("\r\n", "\n").replace("\r", "\n")
    events: list[dict[str, Any]] = []
    for frame in text.split("\n\n")[:-1]:
        lines = [ln[5:].removeprefix(" ") for ln in frame.split("\n") if ln.startswith("data:")]
        if lines:
            event = json_value("\n".join(lines), "an SSE data field")
            if not isinstance(event, dict):
                raise DecodeError("an ACP event is a JSON object")
            events.append(event)
    return events


# -- decode ---------------------------------------------------------------------------


def decode_request(obj: Any) -> Envelope:
    """A ``RunCreateRequest`` -> envelope (several input messages are joined)."""
    req = convert(obj, RunCreateRequest, "ACP run request")

    def native(content: Any, refs: list[str]) -> dict[str, Any]:
        ctx = _context(refs, session_id=req.session_id, stream=req.mode == "stream")
        return {"dst": req.agent_name, "context": ctx}

    return messages_envelope(obj["input"], req.input, native)


def decode_resume(obj: Any, *, run_id: str | None = None) -> Envelope:
    """A ``RunResumeRequest`` -> envelope; the run id (from the URL, where the SDK
    puts it) lands in ``meta["acp"]["run_id"]``."""
    req = convert(obj, RunResumeRequest, "ACP resume request")
    rid = run_id or req.run_id

    def native(content: Any, refs: list[str]) -> dict[str, Any]:
        return {"dst": "", "context": _context(refs, stream=req.mode == "stream")}

    raw = [obj["await_resume"]["message"]]
    facts = {"run_id": rid} if rid else None
    return messages_envelope(raw, [req.await_resume.message], native, facts)


def decode_run(obj: Any) -> Envelope:
    """A ``Run`` -> its reply envelope: output (or the awaited message) as content,
    ``$error`` for a failed run; ``meta["acp"]`` keeps ``run_id`` and ``status``."""
    return _run_envelope(obj, convert(obj, Run, "ACP run"))


def _run_envelope(raw: dict[str, Any], run: Run) -> Envelope:
    facts = {"run_id": run.run_id, "status": run.status}
    if run.status == "failed":
        err = error_from(raw.get("error") or {"code": "server_error", "message": "run failed"})
        return _with_facts(error_envelope(err, src=run.agent_name), facts)
    raw_messages, messages = raw.get("output") or [], run.output
    if run.status == "awaiting" and run.await_request is not None:
        raw_messages, messages = [raw["await_request"]["message"]], [run.await_request.message]

    def native(content: Any, refs: list[str]) -> dict[str, Any]:
        ctx = _context(refs, session_id=run.session_id)
        data: dict[str, Any] = {"src": run.agent_name, "dst": "", "context": ctx}
        created = _ms(run.created_at)  # the time of the output message wins
        if created is not None:
            data["ts"] = created
        return data

    return messages_envelope(raw_messages, messages, native, facts)


def decode_message(obj: Any) -> Envelope:
    """A bare ``Message`` -> envelope."""
    message = convert(obj, Message, "ACP message")
    return messages_envelope([obj], [message], _bare)


def decode_event(obj: Any) -> Envelope:
    """One stream event -> envelope: runs and messages as above, ``message.part``
    as a stream chunk with the part's content, ``error`` as ``$error``."""
    kind = obj.get("type") if isinstance(obj, dict) else None
    model = EVENT_MODEL.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise DecodeError(f"not an ACP event type: {kind!r:.80}")
    event = convert(obj, model, f"ACP {kind} event")
    if isinstance(event, RunEvent):
        return _run_envelope(obj["run"], event.run)
    if isinstance(event, MessageEvent):
        return messages_envelope([obj["message"]], [event.message], _bare)
    if isinstance(event, MessagePartEvent):
        part = Message(parts=[event.part])
        return messages_envelope([{"parts": [obj["part"]]}], [part], _chunk)
    if isinstance(event, ErrorEvent):
        return error_envelope(error_from(obj["error"]))
    return Envelope(dst="", ts=0, intent="dict", content=obj["generic"])


def decode(obj: Any) -> Envelope:
    """The codec's decode: any ACP object (request, resume, run, message, event,
    error) -> envelope, told apart by their required fields."""
    if not isinstance(obj, dict):
        raise DecodeError(f"an ACP object is a JSON object, not {type(obj).__name__}")
    if "type" in obj:
        return decode_event(obj)
    if "agent_name" in obj and "input" in obj:
        return decode_request(obj)
    if "await_resume" in obj:
        return decode_resume(obj)
    if "run_id" in obj and "status" in obj:
        return decode_run(obj)
    if "parts" in obj:
        return decode_message(obj)
    if "code" in obj and "message" in obj:
        return error_envelope(error_from(obj))
    raise DecodeError("not an ACP object: no agent_name/input, await_resume, run_id, parts or type")


# -- errors -----------------------------------------------------------------------------

#: actorbus code -> ACP error code; everything else is ``server_error``.
ACP_CODE_OF: dict[str, ErrorCode] = {
    "E_DECODE": "invalid_input",
    "E_VALIDATION": "invalid_input",
    "E_UNSUPPORTED": "invalid_input",
    "E_ADDRESS": "invalid_input",
    "E_TOO_LARGE": "invalid_input",
    "E_NOT_FOUND": "not_found",
    "E_NO_RESPONDERS": "not_found",
}
_CODE_OF_ACP = {"invalid_input": "E_VALIDATION", "not_found": "E_NOT_FOUND"}
#: HTTP status for an error, as the SDK server answers (404, 422, 500) plus the
#: statuses ACP leaves to HTTP (401, 429, 504...).
_HTTP_OF_CODE = {
    "E_AUTH": 401,
    "E_CLOCK_SKEW": 401,
    "E_REPLAY": 409,
    "E_RATE_LIMIT": 429,
    "E_TIMEOUT": 504,
    "E_CONN": 502,
    "E_TOO_LARGE": 413,
    "E_NO_RESPONDERS": 404,
    "E_NOT_FOUND": 404,
}


def http_status(err: ActorBusError) -> int:
    """The HTTP status to answer an ACP client with for this error."""
    if isinstance(err, ForbiddenError):
        return 403
    if err.code in _HTTP_OF_CODE:
        return _HTTP_OF_CODE[err.code]
    return 422 if ACP_CODE_OF.get(err.code) == "invalid_input" else 500


def error_to(err: ActorBusError) -> dict[str, Any]:
    """ACP's error object; ``data`` keeps the actorbus code and type."""
    return {
        "code": ACP_CODE_OF.get(err.code, "server_error"),
        "message": str(err) if not isinstance(err, RemoteError) else err.remote_message,
        "data": {"code": err.code, "type": err.to_wire()["type"]},
    }


def error_from(obj: Any) -> ActorBusError:
    """An ACP error object (or an ``error`` event) -> the typed error; never raises."""
    if isinstance(obj, dict) and obj.get("type") == "error" and isinstance(obj.get("error"), dict):
        obj = obj["error"]
    if not isinstance(obj, dict):
        return ProtocolError(f"malformed ACP error: {obj!r:.200}")
    message = str(obj.get("message", ""))
    data = obj.get("data")
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return rebuild_error(data["code"], message, str(data.get("type") or "Exception"))
    code = str(obj.get("code", "server_error"))
    if code in _CODE_OF_ACP:
        return rebuild_error(_CODE_OF_ACP[code], message)
    return RemoteError(message, remote_type=code)


CODEC = register(
    Codec(
        name="acp",
        encode=encode,
        decode=decode,
        error_to=error_to,
        error_from=error_from,
        carries=ENVELOPE_FIELDS,
    )
)
