"""The envelope and its wire encodings: round trips, headers, size limits, decode errors."""

from __future__ import annotations

import json

import msgpack
import pytest

from actorbus import DecodeError, Encoding, Envelope, MessageTooLargeError, SizeLimits
from actorbus.codecs.envelope import EnvelopeContext, EnvelopeMeta, new_id, new_trace_id
from actorbus.codecs.errors import EncodeError
from actorbus.codecs.wire import (
    H_DST,
    H_ENC,
    H_ID,
    H_INTENT,
    H_PARENT,
    H_SRC,
    H_TRACE,
    decode_envelope,
    encode_envelope,
    encoding_from_header,
    routing_headers,
)


def full_envelope(content: object = None) -> Envelope:
    return Envelope(
        src="client/1",
        dst="echo/1",
        intent="Question",
        content={"text": "hi", "n": 3, "xs": [1, 2.5, None, True]} if content is None else content,
        context=EnvelopeContext(
            trace_id=new_trace_id(),
            parent_id="p1",
            session_id="s1",
            idempotency_key="k1",
            ttl_ms=5000,
            stream=True,
            priority=2,
            artifact_refs=["a1"],
            tags={"tenant": "acme"},
        ),
        meta=EnvelopeMeta(protocol_hint="a2a", retry_count=1, key_id="kid"),
    )


@pytest.mark.parametrize("encoding", list(Encoding))
def test_round_trip_keeps_every_field(encoding: Encoding) -> None:
    env = full_envelope()
    back = decode_envelope(encode_envelope(env, encoding), encoding)
    assert back == env
    assert back.context.tags == {"tenant": "acme"}
    assert back.meta.protocol_hint == "a2a"


@pytest.mark.parametrize("encoding", list(Encoding))
def test_round_trip_minimal_envelope(encoding: Encoding) -> None:
    env = Envelope(dst="a/b", intent="x")
    body = encode_envelope(env, encoding)
    back = decode_envelope(body, encoding)
    assert back == env
    # empty context and meta stay off the wire
    raw = msgpack.unpackb(body) if encoding is Encoding.MSGPACK else json.loads(body)
    assert "context" not in raw
    assert "meta" not in raw


def test_msgpack_keeps_bytes_and_json_is_readable() -> None:
    env = Envelope(dst="a/b", intent="bytes", content=b"\x00\xffraw")
    assert decode_envelope(encode_envelope(env)).content == b"\x00\xffraw"
    body = encode_envelope(Envelope(dst="a/b", intent="text", content="héllo"), Encoding.JSON)
    assert json.loads(body)["content"] == "héllo"


def test_meta_extra_fields_travel() -> None:
    env = Envelope(dst="a/b", intent="x", meta=EnvelopeMeta.model_validate({"edge": "acp"}))
    back = decode_envelope(encode_envelope(env))
    assert back.meta.model_extra == {"edge": "acp"}


def test_ids_are_unique_and_subject_safe() -> None:
    ids = {new_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(i.isalnum() for i in list(ids)[:100])
    trace = new_trace_id()
    assert len(trace) == 32
    int(trace, 16)


def test_routing_headers_carry_id_src_dst_intent_trace() -> None:
    env = full_envelope()
    headers = routing_headers(env)
    assert headers[H_ID] == env.id
    assert headers[H_SRC] == "client/1"
    assert headers[H_DST] == "echo/1"
    assert headers[H_INTENT] == "Question"
    assert headers[H_TRACE] == env.context.trace_id
    assert headers[H_PARENT] == "p1"
    assert H_ENC not in headers  # msgpack is the default: no header
    assert routing_headers(env, Encoding.JSON)[H_ENC] == "json"


def test_encoding_header_values() -> None:
    assert encoding_from_header(None) is Encoding.MSGPACK
    assert encoding_from_header("msgpack") is Encoding.MSGPACK
    assert encoding_from_header("json") is Encoding.JSON
    with pytest.raises(DecodeError, match="xml"):
        encoding_from_header("xml")


# -- size limits -----------------------------------------------------------


@pytest.mark.parametrize("encoding", list(Encoding))
def test_payload_over_900kb_is_rejected(encoding: Encoding) -> None:
    env = Envelope(dst="a/b", intent="text", content="x" * 900_100)
    with pytest.raises(MessageTooLargeError) as info:
        encode_envelope(env, encoding)
    assert info.value.what == "payload"
    assert info.value.limit == 900_000
    assert info.value.size > 900_000
    assert "payload" in str(info.value)
    assert info.value.code == "E_TOO_LARGE"


def test_payload_just_under_limit_passes() -> None:
    env = Envelope(dst="a/b", intent="bytes", content=b"x" * 899_000)
    body = encode_envelope(env)
    assert decode_envelope(body).content == env.content


def test_message_over_1mb_with_small_payload_is_rejected() -> None:
    # payload under 900 KB, but context tags push the whole message over 1 MB
    env = Envelope(
        dst="a/b",
        intent="bytes",
        content=b"x" * 800_000,
        context=EnvelopeContext(tags={"big": "y" * 250_000}),
    )
    with pytest.raises(MessageTooLargeError) as info:
        encode_envelope(env)
    assert info.value.what == "message"
    assert info.value.limit == 1_000_000


def test_custom_size_limits() -> None:
    limits = SizeLimits(max_message=2_000, max_payload=1_000)
    ok = Envelope(dst="a/b", intent="text", content="x" * 900)
    assert decode_envelope(encode_envelope(ok, limits=limits), limits=limits) == ok
    with pytest.raises(MessageTooLargeError) as info:
        encode_envelope(Envelope(dst="a/b", intent="text", content="x" * 1_100), limits=limits)
    assert (info.value.what, info.value.limit) == ("payload", 1_000)
    big_ctx = Envelope(
        dst="a/b", intent="text", content="x", context=EnvelopeContext(tags={"t": "y" * 2_500})
    )
    with pytest.raises(MessageTooLargeError) as info:
        encode_envelope(big_ctx, limits=limits)
    assert (info.value.what, info.value.limit) == ("message", 2_000)


def test_decode_checks_message_size_first() -> None:
    limits = SizeLimits(max_message=100, max_payload=50)
    body = encode_envelope(Envelope(dst="a/b", intent="text", content="x" * 200))
    with pytest.raises(MessageTooLargeError) as info:
        decode_envelope(body, limits=limits)
    assert info.value.what == "message"


@pytest.mark.parametrize(("message", "payload"), [(0, 0), (100, 0), (-1, -1), (100, 200)], ids=str)
def test_size_limits_reject_nonsense(message: int, payload: int) -> None:
    with pytest.raises(ValueError, match=r"limit|exceed"):
        SizeLimits(max_message=message, max_payload=payload)


# -- decoding garbage ------------------------------------------------------


def test_decode_garbage_msgpack_names_encoding() -> None:
    with pytest.raises(DecodeError, match="not valid msgpack"):
        decode_envelope(b"\xc1\xc1 not msgpack")


def test_decode_garbage_json_names_encoding() -> None:
    with pytest.raises(DecodeError, match="not valid json"):
        decode_envelope(b"{nope", Encoding.JSON)


def test_decode_truncated_msgpack() -> None:
    body = encode_envelope(full_envelope())
    with pytest.raises(DecodeError, match="msgpack"):
        decode_envelope(body[: len(body) // 2])


def test_decode_trailing_bytes_rejected() -> None:
    body = encode_envelope(full_envelope())
    with pytest.raises(DecodeError):
        decode_envelope(body + b"\x01")


@pytest.mark.parametrize("value", [[1, 2], "str", 42, None], ids=repr)
def test_decode_non_map_names_type(value: object) -> None:
    with pytest.raises(DecodeError, match=f"must be a map, got {type(value).__name__}"):
        decode_envelope(msgpack.packb(value))


def test_decode_missing_fields_names_them() -> None:
    with pytest.raises(DecodeError) as info:
        decode_envelope(msgpack.packb({"foo": 1}))
    text = str(info.value)
    assert "invalid envelope" in text
    assert "dst" in text
    assert "intent" in text
    assert info.value.code == "E_DECODE"


def test_decode_wrong_field_types() -> None:
    with pytest.raises(DecodeError, match="intent"):
        decode_envelope(msgpack.packb({"dst": "a/b", "intent": ""}))
    with pytest.raises(DecodeError, match="ttl_ms"):
        decode_envelope(msgpack.packb({"dst": "a/b", "intent": "x", "context": {"ttl_ms": -5}}))


def test_encode_unencodable_raises_encode_error() -> None:
    env = Envelope(dst="a/b", intent="x", content={"obj": object()})
    with pytest.raises(EncodeError, match="cannot encode"):
        encode_envelope(env)
