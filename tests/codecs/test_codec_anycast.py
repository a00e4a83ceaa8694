"""The AgentAnycast codec: proto3 JSON frames, round trips, errors, the task machine."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from _codec_support import (
    FIXTURES_ROOT,
    JSON,
    TEXT,
    contexts,
    envelopes as envelopes_of,
    fast,
    field_at,
    fixture_loader,
    mutated,
)
from hypothesis import given, strategies as st

from actorbus.codecs import anycast
from actorbus.codecs.anycast import AnycastTasks, TaskState
from actorbus.codecs.edge import bridge
from actorbus.codecs.envelope import Envelope, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    DecodeError,
    EncodeError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    StreamCancelledError,
    UnsupportedError,
)

FIXTURES = FIXTURES_ROOT / "anycast"
FAST = fast(40)
CANONICAL = sorted(p.name for p in FIXTURES.glob("*.json") if p.name != "send_task_snake.json")
fixture = fixture_loader("anycast")
path = field_at

envelopes = envelopes_of(
    dst=TEXT | st.just("peer:12D3KooW") | st.just("https://agent.example/a2a"),
    context=contexts(trace_id=TEXT | st.text("0123456789abcdef", min_size=32, max_size=32)),
)


# -- fixtures and round trips --


@pytest.mark.parametrize("name", CANONICAL)
def test_fixture_round_trips_exactly(name: str) -> None:
    frame = fixture(name)
    assert anycast.encode(anycast.decode(frame)) == frame


def test_lenient_input_spellings() -> None:
    frame = anycast.parse_frame(fixture("send_task_snake.json"))
    assert frame.type == "SEND_TASK"
    assert frame.payload["message"]["role"] == "USER"
    env = anycast.decode(fixture("send_task_snake.json"))
    assert (env.dst, env.content, env.intent) == ("echo", "hi", "text")
    assert env.ts == 1_772_359_200_123
    assert env.meta.model_extra is not None
    assert env.meta.model_extra["anycast"]["task_id"] == "task-s"


def test_send_task_maps_onto_the_envelope() -> None:
    env = anycast.decode(fixture("send_task.json"))
    assert env.id == "env-001"
    assert env.dst == "translate"  # skill anycast address
    assert env.context.session_id == "conv-42"
    assert env.context.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert (env.intent, env.content) == ("text", "Translate 'good morning' to French")
    assert env.meta.protocol_hint == "anycast"
    data = anycast.decode(fixture("send_task_data.json"))
    assert (data.intent, data.content["max_words"]) == ("dict", 100)


def test_control_frames_carry_their_payload() -> None:
    chunk = anycast.decode(fixture("stream_chunk_1.json"))
    assert chunk.intent == "$stream_chunk"
    assert chunk.content["data"] == b"le monde"
    assert chunk.context.parent_id == "task-7f3a"
    end = anycast.decode(fixture("stream_end.json"))
    assert (end.intent, end.content["reason"]) == ("$end", "COMPLETE")
    ack = anycast.decode(fixture("ack.json"))
    assert (ack.intent, ack.context.parent_id) == ("$ack", "env-001")
    done = anycast.decode(fixture("task_complete.json"))
    assert (done.content, done.context.parent_id) == ("Bonjour", "task-7f3a")


@FAST
@given(envelopes)
def test_envelope_round_trip_keeps_every_carried_field(env: Envelope) -> None:
    wire = json.loads(json.dumps(anycast.encode(env)))
    anycast.parse_frame(wire)
    back = anycast.decode(wire)
    for field in anycast.CODEC.carries:
        assert path(back, field) == path(env, field), field


@FAST
@given(envelopes)
def test_replies_and_failures_round_trip(env: Envelope) -> None:
    request = anycast.encode(Envelope(dst="skill", intent="text", content="q"))
    task_id = request["sendTask"]["taskId"]
    wire = json.loads(json.dumps(anycast.reply_to(request, env)))
    assert wire["taskComplete"]["taskId"] == task_id
    back = anycast.decode(wire)
    parent = env.context.parent_id
    assert back.context.parent_id == (parent if parent is not None else task_id)
    for field in anycast.CODEC.carries - {"context.parent_id"}:
        assert path(back, field) == path(env, field), field
    failure = env.model_copy(
        update={"intent": "$error", "content": {"code": "E_X", "message": "m"}}
    )
    wire = json.loads(json.dumps(anycast.reply_to(request, failure)))
    assert wire["taskFail"]["taskId"] == task_id
    back = anycast.decode(wire)
    assert (back.intent, back.content["code"], back.content["message"]) == ("$error", "E_X", "m")
    assert (back.src, back.dst) == (env.src, env.dst)
    assert back.context.model_copy(update={"parent_id": parent}) == env.context


def test_bridge_keeps_business_and_security_fields() -> None:
    meta = EnvelopeMeta(signature="sig", key_id="kid", cipher="aes-256-gcm")
    env = Envelope(src="a/1", dst="skill", intent="Q", content={"q": 1}, meta=meta)
    once = anycast.encode(env)
    assert bridge(once, "anycast", "anycast") == once
    back = anycast.decode(once)
    assert (back.meta.signature, back.meta.key_id, back.meta.cipher) == (
        "sig",
        "kid",
        "aes-256-gcm",
    )


def test_builders_and_addressing() -> None:
    start = anycast.stream_start(
        "t", "a", envelope_id="e1", total_chunks=2, media_type="text/plain", ts_ms=0
    )
    assert start["streamStart"]["totalChunks"] == 2
    assert start["timestamp"] == "1970-01-01T00:00:00Z"
    chunk = anycast.stream_chunk("t", "a", 1, b"xy", envelope_id="e2", is_last=True)
    assert chunk["streamChunk"] == {
        "taskId": "t",
        "artifactId": "a",
        "sequence": 1,
        "data": "eHk=",
        "isLast": True,
    }
    assert anycast.stream_end("t", "a", "CANCELED", envelope_id="e3")["streamEnd"]["reason"] == (
        "STREAM_END_REASON_CANCELED"
    )
    assert anycast.status_update("t", "WORKING", envelope_id="e4")["type"] == (
        "ENVELOPE_TYPE_TASK_STATUS_UPDATE"
    )
    assert anycast.ack("e1", envelope_id="e5")["ack"] == {"acknowledgedEnvelopeId": "e1"}
    with pytest.raises(EncodeError):
        anycast.frame("NOPE", {}, envelope_id="x")
    with pytest.raises(EncodeError):
        anycast.status_update("t", "DONE", envelope_id="x")
    for dst, kind in (("peer:12D3", "peerId"), ("https://a/x", "url"), ("translate", "skillId")):
        request = anycast.send_task_request(Envelope(dst=dst, intent="text", content="hi"))
        assert kind in request
        assert request["message"]["parts"] == [{"textPart": {"text": "hi"}}]


# -- fuzz --


@FAST
@given(st.data(), st.sampled_from([*CANONICAL, "send_task_snake.json"]))
def test_fuzz_decoders_raise_only_actorbus_errors(data: st.DataObject, name: str) -> None:
    frame = mutated(fixture(name), data)
    for fn in (anycast.decode, anycast.parse_frame, AnycastTasks().observe):
        with contextlib.suppress(ActorBusError):
            fn(frame)
    assert isinstance(anycast.error_from(frame), ActorBusError)


@FAST
@given(JSON)
def test_fuzz_arbitrary_json(obj: Any) -> None:
    with pytest.raises(ActorBusError):
        anycast.decode(obj)
    assert isinstance(anycast.error_from(obj), ActorBusError)


@FAST
@given(JSON)
def test_fuzz_timestamps(obj: Any) -> None:
    with contextlib.suppress(ActorBusError):
        anycast.parse_timestamp(obj)


def test_specific_rejections() -> None:
    both = fixture("task_cancel.json")
    both["getTask"] = {"taskId": "x"}
    with pytest.raises(DecodeError, match="exactly one payload"):
        anycast.decode(both)
    wrong = fixture("task_cancel.json")
    wrong["type"] = "ENVELOPE_TYPE_ACK"
    with pytest.raises(DecodeError, match="cannot carry"):
        anycast.decode(wrong)
    for field, value in (("sequence", 2**40), ("data", "***"), ("isLast", "yes")):
        bad = fixture("stream_chunk_1.json")
        bad["streamChunk"][field] = value
        with pytest.raises(DecodeError, match=field):
            anycast.decode(bad)
    late = fixture("ack.json")
    late["timestamp"] = "last tuesday"
    with pytest.raises(DecodeError, match="timestamp"):
        anycast.decode(late)


# -- errors --


def test_errors_round_trip_with_retry_after() -> None:
    err = RateLimitedError("slow")
    err.retry_after = 2.5  # type: ignore[attr-defined]
    payload = anycast.error_to(err)
    assert payload["errorMessage"] == "slow"
    back = anycast.error_from(payload)
    assert isinstance(back, RateLimitedError)
    assert back.retry_after == 2.5  # type: ignore[attr-defined]
    timeout = anycast.error_from(anycast.error_to(AskTimeoutError("a", "b", 1)))
    assert isinstance(timeout, AskTimeoutError)


def test_foreign_failures() -> None:
    plain = anycast.error_from(fixture("task_fail.json"))
    assert isinstance(plain, RemoteError)
    assert plain.remote_type == "TaskFailedError"
    assert "backend unavailable" in str(plain)
    detailed = anycast.error_from(fixture("task_fail_detail.json"))
    assert isinstance(detailed, RateLimitedError)
    assert detailed.retry_after == 8  # type: ignore[attr-defined]
    detail = {"code": "TASK_TIMEOUT", "message": "slow peer"}
    assert isinstance(anycast.error_from(detail), AskTimeoutError)
    assert isinstance(anycast.error_from(fixture("ack.json")), ProtocolError)
    assert isinstance(anycast.error_for_status("REJECTED"), UnsupportedError)
    assert isinstance(anycast.error_for_status("CANCELED"), StreamCancelledError)
    assert anycast.error_for_status("COMPLETED") is None


# -- the task state machine --

FLOW = [
    "send_task.json",
    "status_working.json",
    "stream_start.json",
    "stream_chunk_0.json",
    "stream_chunk_1.json",
    "stream_end.json",
    "get_task.json",
    "ack.json",
    "task_complete.json",
]


def test_streaming_flow_is_legal() -> None:
    tasks = AnycastTasks()
    states = [tasks.observe(fixture(n)) for n in FLOW]
    assert states[0] == TaskState.SUBMITTED
    assert states[1] == TaskState.WORKING
    assert states[7] is None  # ACK is about an envelope, not a task
    assert states[-1] == TaskState.COMPLETED
    assert tasks.observe(fixture("get_task_response.json")) == TaskState.COMPLETED


def test_multi_turn_and_cancel() -> None:
    tasks = AnycastTasks()
    for name in ("send_task.json", "status_working.json", "status_input_required.json"):
        tasks.observe(fixture(name))
    more = fixture("send_task.json")
    more["envelopeId"] = "env-100"
    assert tasks.observe(more) == TaskState.WORKING
    assert tasks.observe(fixture("task_cancel.json")) == TaskState.CANCELED


def test_duplicates_are_ignored() -> None:
    tasks = AnycastTasks(dedup_window=4)
    for name in ("send_task.json", "status_working.json", "send_task.json"):
        assert tasks.observe(fixture(name)) in (TaskState.SUBMITTED, TaskState.WORKING)
    assert tasks.tasks["task-7f3a"].state == TaskState.WORKING


def _run(names: list[str], edits: dict[int, Any] | None = None) -> AnycastTasks:
    tasks = AnycastTasks()
    for i, name in enumerate(names):
        frame = fixture(name)
        frame["envelopeId"] = f"e{i}"
        if edits and i in edits:
            edits[i](frame)
        tasks.observe(frame)
    return tasks


@pytest.mark.parametrize(
    ("names", "edits", "match"),
    [
        (["status_working.json"], None, "unknown task"),
        (["send_task.json", "send_task.json"], None, "more input only"),
        (["send_task.json", "task_complete.json", "task_cancel.json"], None, "has ended"),
        (["send_task.json", "stream_chunk_0.json"], None, "no open stream"),
        (["send_task.json", "stream_start.json", "stream_chunk_1.json"], None, "#1 where #0"),
        (
            ["send_task.json", "stream_start.json", "stream_chunk_0.json", "stream_end.json"],
            None,
            "after 1 chunks",
        ),
        (
            ["send_task.json", "stream_start.json", "stream_chunk_0.json", "task_complete.json"],
            None,
            "have not ended",
        ),
        (
            ["send_task.json", "status_working.json"],
            {1: lambda f: f["taskStatusUpdate"].update(status="TASK_STATUS_COMPLETED")},
            "does not follow",
        ),
        (
            ["send_task.json", "stream_start.json", "stream_chunk_0.json"],
            {2: lambda f: f["streamChunk"].update(sequence=0, isLast=True)},
            "totalChunks 2",
        ),
        (
            ["send_task.json", "status_working.json", "status_input_required.json"],
            {3: None},
            None,
        ),
        (
            ["send_task.json", "stream_start.json", "stream_start.json"],
            None,
            "already streamed",
        ),
    ],
)
def test_illegal_sequences_name_task_state_and_frame(
    names: list[str], edits: dict[int, Any] | None, match: str | None
) -> None:
    if match is None:
        tasks = _run(names)
        with pytest.raises(ProtocolError, match="INPUT_REQUIRED cannot take TASK_COMPLETE"):
            tasks.observe({**fixture("task_complete.json"), "envelopeId": "late"})
        return
    with pytest.raises(ProtocolError, match=match) as info:
        _run(names, edits)
    assert "AgentAnycast" in str(info.value)
