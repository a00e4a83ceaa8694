"""The Synadia Agent Protocol shapes: service info, heartbeats, prompts, reply streams, errors."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from _codec_support import (
    FIXTURES_ROOT,
    JSON,
    NON_EMPTY,
    envelopes as envelopes_of,
    fast,
    field_at,
    fixture_loader,
    mutated,
)
from hypothesis import given, strategies as st

from actorbus.codecs import synadia as sy
from actorbus.codecs.edge import bridge
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    AuthError,
    DecodeError,
    EncodeError,
    InvalidAddressError,
    MessageTooLargeError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    ValidationFailedError,
)

FIXTURES = FIXTURES_ROOT / "synadia"
FAST = fast(40)
fixture = fixture_loader("synadia")
path = field_at


def frames(name: str) -> list[sy.Frame]:
    out = []
    for item in fixture(name):
        data = b"" if item["data"] is None else json.dumps(item["data"]).encode()
        out.append(sy.Frame(data, item.get("headers")))
    return out


# -- strategies --

envelopes = envelopes_of(ts=st.integers(-(2**40), 2**50), intent=NON_EMPTY)


# -- service registration and discovery --


def test_service_config_for_an_actor_type() -> None:
    cfg = sy.service_config("TranslateAgent", owner="alice", description="translates")
    assert cfg["name"] == "agents"
    assert cfg["metadata"] == {
        "actorbus_type": "TranslateAgent",
        "agent": "translate-agent",
        "owner": "alice",
        "session": "default",
        "protocol_version": "0.3",
    }
    prompt, status = cfg["endpoints"]
    assert prompt == {
        "name": "prompt",
        "subject": "agents.prompt.translate-agent.alice.default",
        "queue_group": "agents",
        "metadata": {"max_payload": "1MB", "attachments_ok": "true", "min_sender_trust": "any"},
    }
    assert (status["name"], status["subject"]) == (
        "status",
        "agents.status.translate-agent.alice.default",
    )
    forced = sy.service_config("X", owner="o", extra_metadata={"agent": "fake", "team": "blue"})
    assert (forced["metadata"]["agent"], forced["metadata"]["team"]) == ("x", "blue")


def test_service_info_is_discoverable() -> None:
    info = sy.service_info(sy.service_config("Echo", owner="bob", session="s1"), "NUID9")
    assert info["type"] == "io.nats.micro.v1.info_response"
    agent = sy.parse_service_info(info)
    assert agent is not None
    assert (agent.instance_id, agent.actor_type, agent.max_payload) == ("NUID9", "Echo", 1 << 20)
    assert agent.subject == sy.AgentSubject("echo", "bob", "s1")


def test_discovery_fixture_from_the_host_sdk() -> None:
    agent = sy.parse_service_info(fixture("service_info.json"))
    assert agent is not None
    assert agent.prompt_subject == "agents.prompt.translator.alice.default"
    assert agent.status_subject == "agents.status.translator.alice.default"
    assert (agent.attachments_ok, agent.min_sender_trust, agent.actor_type) == (True, "any", None)
    other = fixture("service_info.json")
    other["name"] = "billing"
    assert sy.parse_service_info(other) is None
    no_prompt = fixture("service_info.json")
    no_prompt["endpoints"] = no_prompt["endpoints"][1:]
    assert sy.parse_service_info(no_prompt) is None


def test_subject_tokens() -> None:
    assert sy.agent_token("HTTPFetcher2") == "httpfetcher2"
    assert sy.agent_token("my_agent.v2") == "my-agent-v2"
    assert sy.subject_token("Alice Smith") == "QWxpY2UgU21pdGg"  # base64url, as the SDK
    subject = sy.AgentSubject.new("a", "o", "s")
    assert (subject.prompt, subject.heartbeat, subject.status) == (
        "agents.prompt.a.o.s",
        "agents.hb.a.o.s",
        "agents.status.a.o.s",
    )
    assert sy.parse_subject("agents.hb.a.o.s") == ("hb", subject)
    for bad in ("agents.prompt.a.o", "agents.x.a.o.s", "agents.prompt.A.o.s", "agents.prompt.a..s"):
        with pytest.raises(InvalidAddressError):
            sy.parse_subject(bad)
    with pytest.raises(InvalidAddressError):
        sy.agent_token("--")


def test_sizes() -> None:
    assert sy.parse_size("512kb") == 512 * 1024
    assert sy.format_size(8 * 1024 * 1024) == "8MB"
    assert sy.format_size(1000) == "1000B"
    with pytest.raises(DecodeError):
        sy.parse_size("1 TB")


# -- heartbeats --


def test_heartbeat_payload() -> None:
    subject = sy.AgentSubject.new("translator", "alice")
    meta = {"max_payload": "1MB", "attachments_ok": "true", "min_sender_trust": "any"}
    beat = sy.heartbeat_payload(
        subject,
        instance_id="SVCNUID0000000000000001",
        ts_ms=1_770_714_930_000,
        prompt_metadata=meta,
        extras={"load": 0.25},
    )
    assert beat == fixture("heartbeat.json")
    assert sy.parse_heartbeat(json.dumps(beat).encode()) == beat
    assert sy.is_alive(beat, 1_770_714_930_000 + 90_000)
    assert not sy.is_alive(beat, 1_770_714_930_000 + 90_001)
    with pytest.raises(EncodeError, match="interval_s"):
        sy.heartbeat_payload(subject, instance_id="i", ts_ms=0, extras={"interval_s": 1})


@FAST
@given(st.data())
def test_fuzz_heartbeat(data: st.DataObject) -> None:
    beat = mutated(fixture("heartbeat.json"), data)
    with contextlib.suppress(ActorBusError):
        sy.parse_heartbeat(beat)


# -- prompts --


def test_plain_text_prompt() -> None:
    body = (FIXTURES / "prompt_plain.txt").read_bytes()
    env = sy.request_to_envelope(
        body,
        subject="agents.prompt.translator.alice.conv-7",
        dst="Translator",
        headers={"Agent-Sender": '{"v":1,"account":"A","user":"U"}'},
    )
    assert (env.dst, env.intent, env.content) == ("Translator", "text", "Bonjour, qui es-tu ?")
    assert env.context.session_id == "conv-7"
    assert env.meta.protocol_hint == "synadia"
    assert sy.request_headers(env) == {"Agent-Sender": '{"v":1,"account":"A","user":"U"}'}


def test_prompt_with_attachments_and_unknown_fields_round_trips() -> None:
    request = fixture("prompt_attachments.json")
    env = sy.decode(json.dumps(request).encode())
    assert env.intent == "dict"
    assert env.content["attachments"][0]["filename"] == "notes.txt"
    again = sy.encode(env)
    assert {k: v for k, v in again.items() if k != "actorbus"} == request


@FAST
@given(envelopes)
def test_envelope_round_trip_keeps_every_carried_field(env: Envelope) -> None:
    back = sy.decode(sy.encode_request(env))
    for field in sy.CODEC.carries:
        assert path(back, field) == path(env, field), field


@FAST
@given(envelopes)
def test_reply_chunk_round_trip(env: Envelope) -> None:
    request = Envelope(src="caller/1", dst="agent/1", intent="text", content="q")
    for frame in sy.reply_frames(env) if not env.intent.startswith("$") else []:
        event = sy.read_frame(frame.data, frame.headers)
        assert event.kind == "response"
        assert event.chunk is not None
        back = sy.chunk_to_envelope(event.chunk, request)
        for field in sy.CODEC.carries:
            assert path(back, field) == path(env, field), field


def test_bridge_keeps_security_fields() -> None:
    meta = EnvelopeMeta(signature="sig", key_id="kid", cipher="x25519+aes-256-gcm")
    env = Envelope(src="a", dst="b", intent="Q", content={"q": 1}, meta=meta)
    once = sy.encode(env)
    assert bridge(once, "synadia", "synadia") == once
    back = sy.decode(once)
    assert (back.meta.signature, back.meta.key_id, back.meta.cipher) == (
        "sig",
        "kid",
        "x25519+aes-256-gcm",
    )


def test_bytes_and_json_contents() -> None:
    raw = sy.encode(Envelope(dst="b", intent="bytes", content=b"\x00\xff"))
    assert raw["attachments"][0] == {"filename": "content.bin", "content": "AP8="}
    assert sy.decode(raw).content == b"\x00\xff"
    data = sy.encode(Envelope(dst="b", intent="Q", content={"x": [1, 2]}))
    assert json.loads(data["prompt"]) == {"x": [1, 2]}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b'{"prompt": ""}',
        b'{"prompt": 3}',
        b"\xff\xfe",
        b'{"prompt": "x", "attachments": [1]}',
    ],
)
def test_bad_prompts(body: bytes) -> None:
    with pytest.raises(DecodeError):
        sy.parse_request(body)


@FAST
@given(st.data())
def test_fuzz_prompt_objects(data: st.DataObject) -> None:
    base = sy.encode(
        Envelope(
            src="a", dst="b", intent="Q", content=b"x", context=EnvelopeContext(tags={"k": "v"})
        )
    )
    for obj in (mutated(base, data), mutated(fixture("prompt_attachments.json"), data)):
        with contextlib.suppress(ActorBusError):
            sy.decode(obj)
        with contextlib.suppress(ActorBusError):
            sy.decode(json.dumps(obj).encode())


@FAST
@given(st.binary(max_size=64), JSON)
def test_fuzz_bytes_and_json(data: bytes, obj: Any) -> None:
    for fn in (sy.parse_request, sy.read_frame, sy.parse_heartbeat, sy.decode):
        with contextlib.suppress(ActorBusError):
            fn(data)
    for fn2 in (sy.decode, sy.check_request, sy.parse_heartbeat):
        with contextlib.suppress(ActorBusError):
            fn2(obj)
    if not isinstance(obj, dict) or obj.get("name") != sy.SERVICE_NAME:
        assert sy.parse_service_info(obj) is None  # only a protocol agent's info is one
    assert isinstance(sy.error_from(obj), ActorBusError)


@FAST
@given(JSON, st.data())
def test_fuzz_helpers(obj: Any, data: st.DataObject) -> None:
    request = Envelope(src="a", dst="b", intent="text", content="q")
    chunk = mutated(json.loads(sy.reply_frames(request)[0].data), data)
    cases: list[tuple[Callable[[Any], Any], Any]] = [
        (sy.parse_size, obj),
        (sy.parse_subject, obj),
        (sy.heartbeat_ms, {"ts": obj}),
        (lambda c: sy.chunk_to_envelope(c, request), chunk),
        (lambda c: sy.chunk_to_envelope(c, request), obj),
    ]
    for fn, arg in cases:
        with contextlib.suppress(ActorBusError):
            fn(arg)


# -- reply streams --


def test_reply_stream_fixture() -> None:
    stream = sy.ReplyStream()
    kinds = [stream.feed(f.data, f.headers).kind for f in frames("reply_stream.json")]
    assert kinds == ["status", "response", "response", "query", "ignored", "status", "end"]
    assert (stream.acked, stream.responses, stream.ended) == (True, 2, True)
    assert [e.text for e in stream.events[1:3]] == ["Je suis ", "un agent."]
    with pytest.raises(ProtocolError, match="after the end marker"):
        stream.feed(b"")


def test_error_stream_fixture() -> None:
    stream = sy.ReplyStream()
    first, end = frames("error_stream.json")
    event = stream.feed(first.data, first.headers)
    assert event.kind == "error"
    assert isinstance(event.error, ValidationFailedError)
    assert isinstance(stream.failed, ValidationFailedError)
    with pytest.raises(ProtocolError, match="after the error frame"):
        sy.ReplyStream(failed=event.error).feed(b'{"type":"response","data":"x"}')
    assert stream.feed(end.data, end.headers).kind == "end"


def test_actor_replies_become_frames() -> None:
    items = [
        Envelope(dst="c", intent="text", content="part 1"),
        Envelope(dst="c", intent="Answer", content={"n": 2}),
    ]
    out = list(sy.reply_stream(items))
    assert out[0] == sy.ACK_FRAME
    assert out[-1].is_end
    assert len(out) == 4
    err = RateLimitedError("busy")
    failing = list(sy.reply_stream([Envelope(dst="c", intent="$error", content=err.to_wire())]))
    assert [f.is_error for f in failing] == [False, True, False]
    assert failing[1].headers == {"Nats-Service-Error": "busy", "Nats-Service-Error-Code": "429"}
    assert list(sy.reply_stream([Envelope(dst="c", intent="$end")], ack=False)) == [sy.END_FRAME]
    assert sy.status_chunk("ack") == sy.ACK_FRAME
    query = sy.read_frame(sy.query_chunk("q", "_INBOX.r", "why?").data)
    assert query.chunk is not None
    assert query.chunk["data"]["reply_subject"] == "_INBOX.r"


@pytest.mark.parametrize(
    "chunk",
    [
        b'{"type": "response", "data": 3}',
        b'{"type": "status", "data": {}}',
        b'{"type": "query", "data": {"id": "q"}}',
        b'{"data": "x"}',
        b"[]",
    ],
)
def test_malformed_chunks(chunk: bytes) -> None:
    with pytest.raises(DecodeError):
        sy.read_frame(chunk)


# -- errors --


@pytest.mark.parametrize(
    ("err", "status"),
    [
        (ValidationFailedError("bad"), "400"),
        (AuthError("who?"), "401"),
        (MessageTooLargeError("prompt", 9, 1), "413"),
        (RateLimitedError("slow"), "429"),
        (AskTimeoutError("a/1", "Q", 2.0), "504"),
        (RemoteError("boom", remote_type="KeyError"), "500"),
    ],
)
def test_errors_map_to_service_error_headers_and_back(err: ActorBusError, status: str) -> None:
    assert sy.error_to(err)["Nats-Service-Error-Code"] == status
    frame = sy.error_frame(err)
    back = sy.error_from(frame)
    assert type(back) is type(err)
    bare = sy.error_from(frame.headers)
    assert bare.code == err.code or isinstance(bare, RemoteError)


def test_foreign_service_errors_and_retry_after() -> None:
    err = RateLimitedError("slow")
    err.retry_after = 3  # type: ignore[attr-defined]
    assert sy.error_from(sy.error_frame(err)).retry_after == 3  # type: ignore[attr-defined]
    refused = sy.error_from(
        {"Nats-Service-Error": "sender rejected", "Nats-Service-Error-Code": "403"}
    )
    assert isinstance(refused, AuthError)
    crashed = sy.error_from(
        sy.Frame(b"", {"Nats-Service-Error": "x", "Nats-Service-Error-Code": "502"})
    )
    assert isinstance(crashed, RemoteError)
    assert crashed.remote_type == "ServiceError502"
    assert isinstance(sy.error_from({"Nats-Service-Error": "x"}), ProtocolError)
    assert sy.describe("line one\nline two") == "line one | line two"
    assert len(sy.describe("x" * 500)) == 200


# -- the official SDK, when it is importable (pip download + PYTHONPATH; not a dependency) --


def test_official_sdk_accepts_these_shapes() -> None:
    agents = pytest.importorskip("synadia_ai.agents")
    build_agent_info = pytest.importorskip("synadia_ai.agents.discovery").build_agent_info
    HeartbeatPayload = pytest.importorskip("synadia_ai.agents.heartbeat").HeartbeatPayload
    decode_chunk = pytest.importorskip("synadia_ai.agents.messages").decode_chunk

    cfg = sy.service_config("TranslateAgent", owner="Alice Smith", session="s 1")
    info = build_agent_info(sy.service_info(cfg, "N1"))
    assert info is not None
    assert (
        info.prompt_endpoint.subject
        == agents.AgentSubject.new("translate-agent", "Alice Smith", "s 1").prompt
    )
    assert HeartbeatPayload.model_validate(fixture("heartbeat.json")).extras == {"load": 0.25}
    env = Envelope(src="a", dst="b", intent="Q", content={"x": 1})
    sdk_env = agents.decode(sy.encode_request(env))
    assert sy.decode(agents.encode(sdk_env)).content == {"x": 1}
    for frame in sy.reply_stream([Envelope(dst="c", intent="bytes", content=b"zz")]):
        if not frame.is_end:
            assert decode_chunk(frame.data) is not None
    assert (
        base64.b64decode(
            sy.encode(Envelope(dst="b", intent="bytes", content=b"q"))["attachments"][0]["content"]
        )
        == b"q"
    )
