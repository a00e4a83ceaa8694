"""The Synadia prompt request: its shape, checking it, and envelope <-> prompt."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from actorbus.codecs.common import (
    add_extension,
    content_intent,
    meta_builder,
)
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    DecodeError,
)
from actorbus.codecs.synadia.service import (
    ATTACHMENT_NAME,
    BINARY_PROMPT,
    DEFAULT_SESSION,
    EXTENSION_KEY,
    FACTS_KEY,
    PROTOCOL,
    SENDER_HEADER,
    SENDER_KEY,
    dumps,
    loads,
    parse_subject,
)

# -- the prompt (request) --------------------------------------------------------------------------


def parse_request(data: bytes) -> dict[str, Any]:
    """A prompt body as the request object (JSON, or plain text as ``{"prompt": text}``)."""
    if not data:
        raise DecodeError("a Synadia prompt cannot be empty")
    if data.lstrip(b" \t\r\n")[:1] != b"{":
        try:
            return {"prompt": data.decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise DecodeError("a Synadia prompt is neither JSON nor UTF-8 text") from exc
    return check_request(loads(data, "prompt"))


def check_request(obj: Any) -> dict[str, Any]:
    """The request object's protocol fields checked (``prompt`` non-empty text;
    ``attachments`` a list of ``{filename, content}`` strings)."""
    if not isinstance(obj, dict):
        raise DecodeError("a Synadia prompt must be a JSON object")
    if not isinstance(obj.get("prompt"), str) or not obj["prompt"]:
        raise DecodeError("a Synadia prompt needs a non-empty string 'prompt'")
    check_attachments(obj.get("attachments"), "prompt")
    return obj


def check_attachments(value: Any, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, list) or not all(
        isinstance(a, dict)
        and isinstance(a.get("filename"), str)
        and isinstance(a.get("content"), str)
        for a in value
    ):
        raise DecodeError(f"Synadia {what} attachments must be [{{filename, content}}] strings")


def encode(env: Envelope) -> dict[str, Any]:
    """An envelope as a prompt object (see the module docstring)."""
    ext: dict[str, Any] = {}
    facts = _facts(env.meta)
    out = _prompt_fields(env.content, ext, facts)
    extras = facts.get("extras")
    if isinstance(extras, dict):
        out = {**extras, **out}
    fill_ext(env, ext, content_intent(env.content))
    if ext:
        out[EXTENSION_KEY] = ext
    return out


def encode_request(env: Envelope) -> bytes:
    """The prompt body to publish (compact JSON)."""
    return dumps(encode(env))


def request_headers(env: Envelope) -> dict[str, str] | None:
    """The request's headers: ``Agent-Sender`` when the envelope carries one."""
    extra = env.meta.model_extra
    sender = extra.get(SENDER_KEY) if extra else None
    return {SENDER_HEADER: sender} if isinstance(sender, str) else None


def _prompt_fields(content: Any, ext: dict[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(content, str) and content:
        return {"prompt": content}
    if isinstance(content, bytes | bytearray | memoryview):
        ext["content"] = "bytes"
        return {"prompt": BINARY_PROMPT, "attachments": [attachment_of(content)]}
    if facts.get("form") == "prompt" and _is_prompt_object(content):
        return dict(content)
    ext["content"] = "json"
    return {"prompt": dumps(content).decode("utf-8")}


def _is_prompt_object(content: Any) -> bool:
    try:
        check_request(content)
    except DecodeError:
        return False
    return set(content) <= {"prompt", "attachments"}


def attachment_of(data: bytes | bytearray | memoryview) -> dict[str, str]:
    return {"filename": ATTACHMENT_NAME, "content": base64.b64encode(data).decode("ascii")}


def _facts(meta: EnvelopeMeta) -> dict[str, Any]:
    extra = meta.model_extra
    facts = extra.get(FACTS_KEY) if extra else None
    return facts if isinstance(facts, dict) else {}


_META_NATIVE = frozenset({FACTS_KEY, SENDER_KEY})


def fill_ext(env: Envelope, ext: dict[str, Any], default_intent: str) -> None:
    """Every envelope field the prompt has no slot for, when it is not a default."""
    ext.update(id=env.id, ts=env.ts)
    for key in ("src", "dst"):
        if getattr(env, key):
            ext[key] = getattr(env, key)
    if env.intent != default_intent:
        ext["intent"] = env.intent
    add_extension(ext, env, PROTOCOL, _META_NATIVE)


def decode(obj: Any) -> Envelope:
    """A prompt (request object, or its raw body as bytes / text) as an envelope."""
    if isinstance(obj, bytes | bytearray):
        request = parse_request(bytes(obj))
    elif isinstance(obj, str):
        request = check_request({"prompt": obj})
    else:
        request = check_request(obj)
    return _request_envelope(request, {})


def request_to_envelope(
    data: bytes,
    *,
    subject: str,
    dst: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Envelope:
    """A prompt as it arrived on an actorbus actor's ``prompt`` endpoint.

    ``dst`` is the actor address (the ``agent`` token when not given); the
    subject's session becomes ``context.session_id`` unless it is ``default``;
    an ``Agent-Sender`` header is kept in ``meta.agent_sender``, unchanged.
    """
    _, agent = parse_subject(subject)
    given: dict[str, Any] = {"default_dst": agent.agent}
    if dst is not None:
        given["dst"] = dst
    if agent.session != DEFAULT_SESSION:
        given["session_id"] = agent.session
    sender = (headers or {}).get(SENDER_HEADER)
    if sender is not None:
        given[SENDER_KEY] = sender
    return _request_envelope(parse_request(data), given)


def _request_envelope(request: dict[str, Any], given: dict[str, Any]) -> Envelope:
    ext = request.get(EXTENSION_KEY)
    if ext is not None and not isinstance(ext, dict):
        raise DecodeError("the prompt's 'actorbus' field must be an object")
    ext = ext or {}
    facts: dict[str, Any] = {}
    extras = {k: v for k, v in request.items() if k not in ("prompt", "attachments", EXTENSION_KEY)}
    if extras:
        facts["extras"] = extras
    content = _content_of(request, ext, facts)
    fields: dict[str, Any] = {"dst": given.get("default_dst", ""), "content": content}
    fields["intent"] = content_intent(content)
    for key in ("id", "ts", "src", "dst", "intent"):
        if key in ext:
            fields[key] = ext[key]
    if "dst" in given:  # where it arrived wins over what the sender wrote
        fields["dst"] = given["dst"]
    context = ext_dict(ext, "context")
    if "session_id" in given:
        context.setdefault("session_id", given["session_id"])
    meta = ext_dict(ext, "meta")
    meta.setdefault("protocol_hint", PROTOCOL)
    if SENDER_KEY in given:
        meta[SENDER_KEY] = given[SENDER_KEY]
    if facts:
        meta[FACTS_KEY] = facts
    return envelope_of(fields, context, meta)


def ext_dict(ext: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = ext.get(key, {})
    if not isinstance(value, dict):
        raise DecodeError(f"the 'actorbus' extension's {key!r} must be an object")
    return dict(value)


# Every envelope decoded with just the protocol hint shares one meta.
_meta = meta_builder(PROTOCOL)


def envelope_of(fields: dict[str, Any], context: dict[str, Any], meta: dict[str, Any]) -> Envelope:
    try:
        if context:
            fields["context"] = EnvelopeContext.model_validate(context)
        fields["meta"] = _meta(meta)
        return Envelope.model_validate(fields)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DecodeError(
            f"Synadia message does not make an envelope: {where}: {err['msg']}"
        ) from exc


def _content_of(request: Mapping[str, Any], ext: Mapping[str, Any], facts: dict[str, Any]) -> Any:
    form = ext.get("content")
    prompt = request["prompt"]
    attachments = request.get("attachments")
    if form == "bytes":
        if not attachments:
            raise DecodeError("a prompt marked as bytes has no attachment")
        return attachment_bytes(attachments[0])
    if form == "json":
        return loads(prompt, "prompt marked as JSON")
    if attachments is not None:
        facts["form"] = "prompt"
        return {"prompt": prompt, "attachments": attachments}
    return prompt


def attachment_bytes(attachment: Mapping[str, Any]) -> bytes:
    try:
        return base64.b64decode(attachment["content"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"Synadia attachment content is not base64: {exc}") from exc
