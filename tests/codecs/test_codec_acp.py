"""The ACP edge codec: wire contracts from the official SDK, round trips, errors, fuzz.

The fixtures in ``fixtures/acp`` were produced with acp-sdk 1.0.3's own models
(``model_dump_json``), so they hold every field the SDK writes, nulls included.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from _codec_support import (
    FIXTURES_ROOT,
    SMALL_TAGS,
    TEXT_20,
    WORDS,
    contexts,
    decodes_or_raises_typed,
    envelopes as envelopes_of,
    fast,
    field_at,
    fixture_loader,
    json_values,
    metas,
    mutations,
    sample_errors,
    wire,
)
from hypothesis import given, strategies as st

from actorbus.codecs import acp, anp
from actorbus.codecs.common import envelope_error
from actorbus.codecs.edge import CODECS, bridge
from actorbus.codecs.envelope import Envelope, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    ActorNotFoundError,
    AskTimeoutError,
    AuthError,
    DecodeError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    UnsupportedError,
    ValidationFailedError,
)

FIXTURES = FIXTURES_ROOT / "acp"
RUN_ID = "6f2c1a5e-8f0b-4c1e-9a77-2d1f3b4c5d6e"
SESSION = "0b9e6f4a-1c2d-4e3f-8a9b-7c6d5e4f3a2b"
FAST = fast(60)
fixture = fixture_loader("acp")
get = field_at


# -- envelopes for the property tests --------------------------------------------------

json_data = json_values(TEXT_20, keys=st.text(max_size=8), max_size=4, max_leaves=12)
envelopes = envelopes_of(
    ids=WORDS,
    ts=st.integers(-(2**40), 2**45),
    src=TEXT_20,
    dst=TEXT_20,
    intent=WORDS,
    content=st.none() | st.text() | st.binary(max_size=40) | json_data,
    context=contexts(
        WORDS,
        trace_id=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
        session_id=WORDS | st.uuids().map(str),
        priority=(-5, 9),
        artifact_refs=st.lists(
            st.sampled_from(["s3://b/k", "https://x.example/a.pdf"]), max_size=2
        ),
        tags=SMALL_TAGS,
    ),
    meta=metas(
        WORDS,
        protocol_hint=st.sampled_from(["acp", "anp", "a2a"]),
        max_retries=5,
        cipher=st.sampled_from(["aes-256-gcm", "none"]),
    ),
)


# -- wire contracts ----------------------------------------------------------------------


def test_sdk_run_request_decodes_to_the_text_it_asks() -> None:
    env = acp.decode(fixture("run_create_sync.json"))
    assert env.dst == "echo"
    assert env.content == "What is the capital of France?"
    assert env.intent == "text"
    assert env.ts == 1748772000123  # the message's created_at, to the millisecond
    assert not env.context.stream
    assert env.meta.protocol_hint == "acp"


def test_stream_mode_and_uuid_session_are_native_fields() -> None:
    env = acp.decode(fixture("run_create_stream_session.json"))
    assert env.context.stream
    assert env.context.session_id == SESSION


def test_multipart_request_keeps_every_part_as_sent() -> None:
    raw = fixture("run_create_async_multipart.json")
    env = acp.decode(raw)
    assert env.intent == "dict"
    parts = env.content["parts"]
    assert parts == raw["input"][0]["parts"]  # nulls and all
    # A typed URL part is content; only untyped URL parts become artifact refs.
    assert env.context.artifact_refs == []


def test_bare_url_parts_become_artifact_refs_and_back() -> None:
    msg = {"role": "user", "parts": [{"content": "see"}, {"content_url": "https://x/y.bin"}]}
    env = acp.decode({"agent_name": "a", "input": [msg]})
    assert env.content == "see"
    assert env.context.artifact_refs == ["https://x/y.bin"]
    parts = acp.encode_request(env, carry=False)["input"][0]["parts"]
    assert parts == [
        {"content_type": "text/plain", "content": "see"},
        {"content_url": "https://x/y.bin"},
    ]


def test_completed_run_is_a_reply_with_its_facts_in_meta() -> None:
    env = acp.decode(fixture("run_completed.json"))
    assert (env.src, env.content, env.context.session_id) == ("echo", "Paris.", SESSION)
    assert env.meta.model_extra == {"acp": {"run_id": RUN_ID, "status": "completed"}}
    assert acp.acp_facts(env) == {"run_id": RUN_ID, "status": "completed"}


def test_awaiting_run_gives_the_question_asked() -> None:
    env = acp.decode(fixture("run_awaiting.json"))
    assert env.content == "Which date?"
    assert acp.acp_facts(env)["status"] == "awaiting"


def test_failed_run_is_an_error_envelope() -> None:
    env = acp.decode(fixture("run_failed.json"))
    assert env.intent == "$error"
    assert env.content["message"] == "model backend unavailable"
    assert acp.acp_facts(env) == {"run_id": RUN_ID, "status": "failed"}
    err = envelope_error(env)
    assert isinstance(err, RemoteError)
    assert err.remote_type == "server_error"


def test_resume_without_run_id_takes_it_from_the_url() -> None:
    body = fixture("run_resume.json")
    assert "run_id" not in body  # the SDK puts it only in the path
    env = acp.decode_resume(body, run_id=RUN_ID)
    assert env.content == "2025-07-14"
    assert acp.acp_facts(env) == {"run_id": RUN_ID}
    assert acp.decode(body).content == "2025-07-14"


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("error_not_found.json", ActorNotFoundError),
        ("error_invalid_input.json", ValidationFailedError),
    ],
)
def test_sdk_errors_map_to_the_taxonomy(name: str, cls: type[ActorBusError]) -> None:
    body = fixture(name)
    err = acp.error_from(body)
    assert type(err) is cls
    assert str(err) == body["message"]
    assert acp.decode(body).intent == "$error"


def test_sse_stream_decodes_in_order() -> None:
    events = acp.parse_sse((FIXTURES / "stream_events.sse").read_text())
    kinds = [e["type"] for e in events]
    assert kinds == [
        "run.created",
        "run.in-progress",
        "message.created",
        "message.part",
        "message.part",
        "message.completed",
        "run.completed",
    ]
    envs = [acp.decode(e) for e in events]
    chunks = [e.content for e in envs if e.context.stream]
    assert "".join(chunks) == "Paris."
    assert envs[-1].content == "Paris."
    assert [acp.acp_facts(e).get("status") for e in envs[:2]] == ["created", "in-progress"]


def test_sse_error_event_is_an_error_envelope() -> None:
    events = acp.parse_sse((FIXTURES / "stream_error.sse").read_bytes())
    assert acp.decode(events[-1]).content["message"] == "An unexpected error occurred"


def test_sse_frames_end_with_a_blank_line_and_parse_back() -> None:
    run = acp.run_from_envelope(Envelope(src="echo", dst="u", intent="text", content="hi"))
    events = [
        acp.run_event({**run, "status": "created", "output": []}),
        acp.message_event({"role": "agent/echo", "parts": []}),
        acp.part_event({"content": "hi"}),
        acp.message_event(run["output"][0], completed=True),
        acp.run_event(run),
        acp.error_event(AskTimeoutError("echo", "text", 1.0)),
    ]
    frames = [acp.sse_frame(e) for e in events]
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    assert acp.parse_sse(b"".join(frames)) == wire(events)
    assert acp.parse_sse(b"".join(frames) + b"data: {partial") == wire(events)


def test_run_event_has_no_kind_for_cancelling() -> None:
    with pytest.raises(UnsupportedError):
        acp.run_event({"status": "cancelling"})


# -- fixture round trips (protocol -> envelope -> protocol) ------------------------------


def _norm_part(part: dict[str, Any]) -> dict[str, Any]:
    defaults = {"content_type": "text/plain", "content_encoding": "plain"}
    return {k: v for k, v in part.items() if v is not None and defaults.get(k) != v}


def _norm_messages(messages: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(m.get("role", "user"), [_norm_part(p) for p in m["parts"]]) for m in messages]


@pytest.mark.parametrize(
    "name",
    ["run_create_sync.json", "run_create_stream_session.json", "run_create_async_multipart.json"],
)
def test_request_round_trip(name: str) -> None:
    raw = fixture(name)
    back = wire(acp.encode_request(acp.decode(raw), mode=raw["mode"], carry=False))
    assert back["agent_name"] == raw["agent_name"]
    assert back["mode"] == raw["mode"]
    assert back.get("session_id") == raw["session_id"]
    assert _norm_messages(back["input"]) == _norm_messages(raw["input"])
    assert back["input"][0]["created_at"][:23] == raw["input"][0]["created_at"][:23]


@pytest.mark.parametrize("name", ["run_completed.json", "run_awaiting.json", "run_failed.json"])
def test_run_round_trip(name: str) -> None:
    raw = fixture(name)
    back = wire(acp.run_from_envelope(acp.decode(raw), agent_name=raw["agent_name"], carry=False))
    for key in ("run_id", "agent_name", "status"):
        assert back[key] == raw[key]
    assert _norm_messages(back["output"]) == _norm_messages(raw["output"])
    if raw["await_request"]:
        got, sent = back["await_request"]["message"], raw["await_request"]["message"]
        assert _norm_messages([got]) == _norm_messages([sent])
    if raw["error"]:
        for key in ("code", "message"):
            assert back["error"][key] == raw["error"][key]


def test_resume_round_trip() -> None:
    raw = fixture("run_resume.json")
    back = wire(acp.encode_resume(acp.decode(raw), carry=False))
    assert back["mode"] == raw["mode"]
    got, sent = back["await_resume"]["message"], raw["await_resume"]["message"]
    assert _norm_messages([got]) == _norm_messages([sent])


def test_actorbus_run_round_trips_through_the_envelope_part() -> None:
    env = Envelope(
        src="echo",
        dst="gw",
        intent="Answer",
        content={"answer": 42},
        meta=EnvelopeMeta(signature="sig", key_id="did:wba:a.example#key-1", cipher="aes-256-gcm"),
    )
    run = wire(acp.run_from_envelope(env, run_id=RUN_ID, status="completed"))
    assert run["output"][0]["role"] == "agent/echo"
    back = acp.decode(run)
    assert back.model_dump(exclude={"meta"}) == env.model_dump(exclude={"meta"})
    assert back.meta.signature == "sig"
    assert back.meta.cipher == "aes-256-gcm"
    assert acp.acp_facts(back) == {"run_id": RUN_ID, "status": "completed"}


# -- content forms ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["", "héllo", b"\x00\xff", None, {"a": [1, 2.5]}, [1, "x"], 7, True, {"parts": "not parts"}],
)
def test_every_content_form_comes_back_exactly(value: Any) -> None:
    env = Envelope(dst="echo", intent="x", content=value)
    assert acp.decode(wire(acp.encode(env))) == env


def test_parts_shaped_content_is_sent_as_those_parts() -> None:
    parts = [{"content": "a"}, {"content": "YQ==", "content_encoding": "base64", "name": "a.bin"}]
    env = Envelope(dst="echo", intent="x", content={"parts": parts})
    sent = acp.encode_request(env)["input"][0]["parts"]
    assert sent[:2] == parts
    assert acp.decode(wire(acp.encode(env))) == env


def test_the_envelope_part_is_left_out_on_request() -> None:
    env = Envelope(dst="echo", intent="x", content="hi")
    parts = acp.encode_request(env, carry=False)["input"][0]["parts"]
    assert parts == [{"content_type": "text/plain", "content": "hi"}]
    assert acp.ENVELOPE_PART_TYPE in json.dumps(acp.encode_request(env))


# -- errors and states -----------------------------------------------------------------

TAXONOMY = sample_errors(ProtocolError)


@pytest.mark.parametrize("err", TAXONOMY, ids=lambda e: type(e).__name__)
def test_error_taxonomy_round_trips(err: ActorBusError) -> None:
    body = wire(acp.error_to(err))
    assert body["code"] in ("server_error", "invalid_input", "not_found")
    back = acp.error_from(body)
    assert type(back) is type(err)
    assert back.to_wire() == err.to_wire()
    assert acp.CODEC.error_from(acp.CODEC.error_to(err)).code == err.code


def test_error_codes_and_http_statuses() -> None:
    assert acp.error_to(ActorNotFoundError("x"))["code"] == "not_found"
    assert acp.error_to(DecodeError("x"))["code"] == "invalid_input"
    assert acp.error_to(AskTimeoutError("a", "b", 1))["code"] == "server_error"
    assert acp.http_status(ActorNotFoundError("x")) == 404
    assert acp.http_status(ValidationFailedError("x")) == 422
    assert acp.http_status(AuthError("x")) == 401
    assert acp.http_status(RateLimitedError("x")) == 429
    assert acp.http_status(RemoteError("x")) == 500
    odd = acp.error_from({"code": "quota", "message": "over"})
    assert isinstance(odd, RemoteError)
    assert odd.remote_type == "quota"


def test_an_error_envelope_encodes_as_the_native_error() -> None:
    env = Envelope(dst="", intent="$error", content=RateLimitedError("later").to_wire())
    assert acp.encode(env)["data"]["code"] == "E_RATE_LIMIT"
    assert acp.run_from_envelope(env)["status"] == "failed"


def test_run_states_map_to_task_states_and_back() -> None:
    for status in ("created", "in-progress", "awaiting", "completed", "failed", "cancelled"):
        assert acp.run_status(acp.task_state(status)) == status
    assert acp.task_state("cancelling") == "working"
    assert acp.run_status("auth-required") == "awaiting"
    assert acp.run_status("rejected") == "failed"
    with pytest.raises(UnsupportedError):
        acp.task_state("paused")


# -- properties --------------------------------------------------------------------------


@FAST
@given(envelopes)
def test_envelope_round_trip_keeps_every_carried_field(env: Envelope) -> None:
    back = acp.decode(wire(acp.encode(env)))
    for path in acp.CODEC.carries:
        assert get(back, path) == get(env, path), path


@FAST
@given(envelopes, st.sampled_from(["completed", "awaiting", "in-progress"]))
def test_reply_round_trip_keeps_every_field_but_adds_run_facts(env: Envelope, status: str) -> None:
    back = acp.decode(wire(acp.run_from_envelope(env, run_id=RUN_ID, status=status)))  # type: ignore[arg-type]
    for path in acp.CODEC.carries:
        assert get(back, path) == get(env, path), path
    assert acp.acp_facts(back) == {"run_id": RUN_ID, "status": status}


@FAST
@given(envelopes)
def test_bridging_acp_to_anp_and_back_changes_nothing(env: Envelope) -> None:
    acp_wire = wire(acp.encode(env))
    back = acp.decode(wire(bridge(wire(bridge(acp_wire, "acp", "anp")), "anp", "acp")))
    assert back == acp.decode(acp_wire)
    assert anp.decode(wire(bridge(acp_wire, "acp", "anp"))).meta == env.meta


# -- fuzz: malformed input raises typed errors, never anything else --------------------

DECODERS = [
    acp.decode,
    acp.decode_request,
    acp.decode_resume,
    acp.decode_run,
    acp.decode_message,
    acp.decode_event,
    CODECS["acp"].decode,
]


ALL_FIXTURES = [fixture(p.name) for p in sorted(FIXTURES.glob("*.json"))] + acp.parse_sse(
    (FIXTURES / "stream_events.sse").read_text()
)
junk = json_data | st.one_of(*(mutations(f, json_data) for f in ALL_FIXTURES))


@FAST
@given(junk, st.sampled_from(DECODERS))
def test_malformed_payloads_raise_only_typed_errors(obj: Any, decode: Any) -> None:
    decodes_or_raises_typed(decode, obj)


@FAST
@given(junk | st.text())
def test_error_from_and_parse_sse_never_raise_untyped(obj: Any) -> None:
    assert isinstance(acp.error_from(obj), ActorBusError)
    text = obj if isinstance(obj, str) else json.dumps(obj)
    with contextlib.suppress(ActorBusError):
        acp.parse_sse("data: " + text + "\n\n")


def test_bad_envelope_part_is_a_decode_error() -> None:
    part = {"content_type": acp.ENVELOPE_PART_TYPE, "content": '{"id": 5, "form": "text"}'}
    with pytest.raises(DecodeError):
        acp.decode({"agent_name": "a", "input": [{"parts": [{"content": "x"}, part]}]})
    part["content"] = "not json"
    with pytest.raises(DecodeError):
        acp.decode({"agent_name": "a", "input": [{"parts": [part]}]})


def test_content_and_url_together_are_refused() -> None:
    part = {"content": "x", "content_url": "https://x"}
    with pytest.raises(DecodeError, match="not both"):
        acp.decode({"agent_name": "a", "input": [{"parts": [part]}]})


def test_codec_is_registered() -> None:
    assert CODECS["acp"] is acp.CODEC
    assert acp.CODEC.carries == acp.ENVELOPE_FIELDS
