"""The A2A codec (1.0 and 0.3): wire-contract fixtures, round trips, errors, fuzzing.

Fixtures in ``tests/fixtures/a2a/`` are named ``{v10|v03}_{kind}_{name}.json``,
kind being request, response, stream (an SSE frame's JSON-RPC response), error
or message (a bare A2A Message object). Every fixture must decode and encode
back to itself (errors: to the same code, message and reason).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from _codec_support import (
    FIXTURES_ROOT,
    TEXT,
    contexts,
    envelopes as envelopes_of,
    fast,
    field_at,
    json_scalars as json_scalars_of,
    json_values as json_values_of,
    key_paths,
    metas,
)
from hypothesis import HealthCheck, given, settings, strategies as st

from actorbus.codecs import a2a
from actorbus.codecs.a2a import CARRIES, V03, V10, A2AError, Method, TaskList
from actorbus.codecs.edge import bridge, codec
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    AuthError,
    ConnectionLostError,
    DecodeError,
    EncodeError,
    ExpiredError,
    ForbiddenError,
    InvalidAddressError,
    MessageTooLargeError,
    NoRespondersError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    StreamCancelledError,
    UnknownIntentError,
    UnsupportedError,
    ValidationFailedError,
)
from actorbus.codecs.tasks import (
    Artifact,
    ArtifactUpdate,
    Message,
    Part,
    StatusUpdate,
    Task,
    TaskState,
    TaskStatus,
    parts_from_content,
)

FIXTURES = FIXTURES_ROOT / "a2a"
VERSIONS = (V10, V03)


@functools.cache
def _text(name: str) -> str:
    return (FIXTURES / f"{name}.json").read_text()


def load(name: str) -> Any:
    """A fresh copy of a fixture (tests mutate them)."""
    return json.loads(_text(name))


def fixtures(kind: str) -> list[str]:
    names = sorted(p.stem for p in FIXTURES.glob("v*.json") if p.stem.split("_")[1] == kind)
    assert names, f"no {kind} fixtures"
    return names


def version_of(name: str) -> str:
    return V10 if name.startswith("v10_") else V03


def via_json(obj: Any) -> Any:
    """What the other side gets: the object through real JSON."""
    return msgspec.json.decode(msgspec.json.encode(obj))


# -- the codec in the edge tables ---------------------------------------------------------


def test_registered_in_edge_tables() -> None:
    assert codec("A2A") is a2a.CODEC
    every_field = {
        *(n for n in Envelope.model_fields if n not in ("context", "meta")),
        *(f"context.{n}" for n in EnvelopeContext.model_fields),
        *(f"meta.{n}" for n in EnvelopeMeta.model_fields),
    }
    assert every_field == CARRIES


# -- wire-contract fixtures ---------------------------------------------------------------


@pytest.mark.parametrize("name", fixtures("request"))
def test_request_fixture_round_trip(name: str) -> None:
    obj = load(name)
    request = a2a.decode_request(json.dumps(obj).encode(), version_of(name))
    assert request.version == version_of(name)
    assert request.id == obj["id"]
    assert a2a.encode_request(request) == obj


@pytest.mark.parametrize("name", fixtures("response") + fixtures("stream"))
def test_response_fixture_round_trip(name: str) -> None:
    obj = load(name)
    response = a2a.decode_response(obj, version_of(name))
    assert a2a.encode_response(response, version_of(name)) == obj


@pytest.mark.parametrize("name", fixtures("stream"))
def test_stream_fixtures_rebuild_with_stream_event(name: str) -> None:
    obj = load(name)
    response = a2a.decode_response(obj, version_of(name))
    assert not isinstance(response.result, TaskList)
    assert a2a.stream_event(response.id, response.result, version_of(name)) == obj


@pytest.mark.parametrize("name", fixtures("message"))
def test_message_fixture_round_trip_through_envelope(name: str) -> None:
    obj = load(name)
    env = a2a.decode(obj)
    assert env.id == obj["messageId"]
    assert env.context.session_id == obj.get("contextId")
    assert a2a.envelope_to_message(env, version_of(name)) == obj


@pytest.mark.parametrize("name", fixtures("error"))
def test_error_fixture_round_trip(name: str) -> None:
    obj = load(name)
    version = version_of(name)
    with pytest.raises(ActorBusError) as caught:
        a2a.decode_response(obj, version)
    err = caught.value
    assert a2a.error_from_response(obj).code == err.code
    again = a2a.error_response(err, obj["id"], version)
    assert again["id"] == obj["id"]
    assert again["error"]["code"] == obj["error"]["code"]
    assert again["error"]["message"] == obj["error"]["message"]
    sent = obj["error"].get("data")
    if version == V10 and sent:
        (info,) = again["error"]["data"]
        assert {k: info[k] for k in ("@type", "reason", "domain")} == {
            k: sent[0][k] for k in ("@type", "reason", "domain")
        }
        assert sent[0]["metadata"].items() <= info["metadata"].items()


def test_fixture_errors_are_the_a2a_classes() -> None:
    err = a2a.error_from_response(load("v10_error_task_not_found"))
    assert isinstance(err, a2a.TaskNotFoundError)
    assert isinstance(err, ActorNotFoundError)
    assert err.metadata == {"taskId": "task-123"}
    assert err.request_id == 3
    assert isinstance(a2a.error_from_response(load("v03_error_task_not_found")), ActorNotFoundError)
    assert isinstance(
        a2a.error_from_response(load("v10_error_version_not_supported")), UnsupportedError
    )
    internal = a2a.error_from_response(load("v03_error_internal"))
    assert isinstance(internal, RemoteError)
    assert internal.remote_message == "Internal error"


# -- requests: versions, methods, params --------------------------------------------------


@pytest.mark.parametrize(
    ("header", "version"),
    [
        (None, V03),
        ("", V03),
        ("0.3", V03),
        ("0.3.0", V03),
        ("1.0", V10),
        ("1", V10),
        ("1.0.2", V10),
    ],
)
def test_version_header(header: str | None, version: str) -> None:
    assert a2a.negotiate_version(header) == version


@pytest.mark.parametrize("header", ["2.0", "0.2", "1.1", "abc", "0"])
def test_unsupported_version_is_32009(header: str) -> None:
    with pytest.raises(a2a.VersionNotSupportedError) as caught:
        a2a.decode_request(load("v10_request_get_task"), header)
    assert caught.value.rpc_code == -32009
    assert caught.value.request_id == 3


def test_method_of_the_other_version_is_32009() -> None:
    # a 1.0 method name without the header is unambiguous: answered in 1.0
    assert a2a.decode_request(load("v10_request_send_message"), None).version == "1.0"
    with pytest.raises(a2a.VersionNotSupportedError, match=r"A2A-Version: 1\.0"):
        a2a.decode_request(load("v10_request_send_message"), "0.3")  # said 0.3 outright
    with pytest.raises(a2a.VersionNotSupportedError, match="SendMessage"):
        a2a.decode_request(load("v03_request_message_send"), "1.0")


def test_list_tasks_does_not_exist_in_03() -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {}}
    with pytest.raises(a2a.MethodNotFoundError) as caught:
        a2a.decode_request(body, "0.3")
    assert caught.value.rpc_code == -32601
    assert isinstance(caught.value, UnsupportedError)


@pytest.mark.parametrize(
    ("body", "cls", "fragment"),
    [
        (b"{not json", a2a.A2AParseError, "not valid JSON"),
        ([{"jsonrpc": "2.0"}], a2a.InvalidRequestError, "batch"),
        ("42", a2a.InvalidRequestError, "object"),
        ({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, a2a.InvalidRequestError, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1}, a2a.InvalidRequestError, "method"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}, a2a.InvalidRequestError, "id"),
        ({"jsonrpc": "2.0", "id": 1, "method": "Nope"}, a2a.MethodNotFoundError, "Nope"),
        ({"jsonrpc": "2.0", "id": 1, "method": "GetTask"}, a2a.InvalidParamsError, "params"),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]},
            a2a.InvalidParamsError,
            "object",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": ""}},
            a2a.InvalidParamsError,
            "params.id",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 500}},
            a2a.InvalidParamsError,
            "params.pageSize",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": "running"}},
            a2a.InvalidParamsError,
            "params.status",
        ),
    ],
)
def test_bad_requests_get_their_json_rpc_error(
    body: Any, cls: type[A2AError], fragment: str
) -> None:
    with pytest.raises(cls, match=fragment.replace(".", r"\.")):
        a2a.decode_request(body, "1.0")


def test_bad_params_name_the_field() -> None:
    body = load("v10_request_send_streaming_message")
    body["params"]["message"]["parts"][1]["raw"] = "not base64!"
    with pytest.raises(a2a.InvalidParamsError, match=r"params\.message\.parts\[1\]\.raw") as caught:
        a2a.decode_request(body, "1.0")
    assert caught.value.request_id == "req-0002"
    assert caught.value.code == ValidationFailedError.code

    body = load("v10_request_send_message")
    del body["params"]["message"]["messageId"]
    with pytest.raises(a2a.InvalidParamsError, match="messageId"):
        a2a.decode_request(body, "1.0")

    body = load("v10_request_send_message")
    body["params"]["message"]["parts"] = [{"text": "a", "data": {}}]
    with pytest.raises(a2a.InvalidParamsError, match=r"exactly one of .*got text, data"):
        a2a.decode_request(body, "1.0")

    body = load("v03_request_message_stream")
    body["params"]["message"]["parts"][1]["file"]["uri"] = "https://x"
    with pytest.raises(a2a.InvalidParamsError, match=r"parts\[1\]\.file"):
        a2a.decode_request(body, "0.3")


def test_decoded_requests_are_version_neutral() -> None:
    new = a2a.decode_request(load("v10_request_send_message"), "1.0")
    old = a2a.decode_request(load("v03_request_message_send"), "0.3")
    assert new.method is old.method is Method.SEND_MESSAGE
    assert isinstance(new.params, a2a.SendParams)
    assert isinstance(old.params, a2a.SendParams)
    assert new.params.message.parts == [
        Part(kind="text", value="What is the weather in Paris today?")
    ]
    assert old.params.configuration is not None
    assert not old.params.configuration.returns_immediately
    stream = a2a.decode_request(load("v10_request_send_streaming_message"), "1.0")
    assert stream.method.streaming
    assert isinstance(stream.params, a2a.SendParams)
    assert stream.params.configuration is not None
    assert stream.params.configuration.push_notification_config == {
        "url": "https://client.example.com/webhook",
        "token": "tok-123",
    }
    assert stream.params.message.parts[1].value.startswith(b"\x89PNG")
    listing = a2a.decode_request(load("v10_request_list_tasks"), "1.0")
    assert isinstance(listing.params, a2a.ListTasksParams)
    assert listing.params.status is TaskState.WORKING
    resub = a2a.decode_request(load("v03_request_tasks_resubscribe"), "0.3")
    assert resub.method is Method.SUBSCRIBE_TO_TASK
    assert isinstance(resub.params, a2a.TaskRef)


def test_notification_has_no_id() -> None:
    body = {"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "t"}}
    request = a2a.decode_request(body, "1.0")
    assert request.notification
    assert a2a.encode_request(request) == body


# -- envelope <-> A2A message ---------------------------------------------------------------


def full_envelope(content: Any) -> Envelope:
    return Envelope(
        id="m-1",
        ts=1_730_000_000_123,
        src="client/1",
        dst="echo/1",
        intent="qa/search",
        content=content,
        context=EnvelopeContext(
            trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
            parent_id="p-1",
            idempotency_key="k-1",
            session_id="s-123",
            priority=2,
            ttl_ms=30_000,
            stream=True,
            artifact_refs=["s3://bucket/a"],
            tags={"scenario": "GAIA"},
        ),
        meta=EnvelopeMeta.model_validate(
            {
                "protocol_hint": "acp",
                "retry_count": 1,
                "signature": "c2lnbmF0dXJl",
                "key_id": "did:key:z6Mk#1",
                "cipher": "AES-256-GCM",
                "acp": {"run_id": "r-9"},  # another codec's extra marker rides along too
            }
        ),
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("content", ["hello", b"\x00\xffbin", {"q": 1}, [1, "a"], None, 4.5, True])
def test_full_envelope_round_trip(version: str, content: Any) -> None:
    env = full_envelope(content)
    wire = via_json(a2a.envelope_to_message(env, version))
    assert wire["messageId"] == "m-1"
    assert wire["contextId"] == "s-123"
    back = a2a.message_to_envelope(wire, version=version)
    assert back.to_dict() == env.to_dict()


def test_content_mapping_1_0() -> None:
    def parts(content: Any) -> Any:
        return a2a.encode(Envelope(dst="", intent="x", content=content))["parts"]

    assert parts("hi") == [{"text": "hi"}]
    assert parts(b"\x01\x02") == [{"raw": "AQI="}]
    assert parts({"a": 1}) == [{"data": {"a": 1}}]
    assert parts([1, 2]) == [{"data": [1, 2]}]


def test_content_mapping_0_3() -> None:
    def parts(content: Any) -> Any:
        return a2a.envelope_to_message(Envelope(dst="", intent="x", content=content), "0.3")[
            "parts"
        ]

    assert parts("hi") == [{"kind": "text", "text": "hi"}]
    assert parts(b"\x01\x02") == [{"kind": "file", "file": {"bytes": "AQI="}}]
    assert parts({"a": 1}) == [{"kind": "data", "data": {"a": 1}}]
    assert parts([1, 2]) == [
        {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"actorbus": {"wrapped": True}}}
    ]


def test_plain_envelope_makes_a_plain_message() -> None:
    env = Envelope(id="m", ts=0, dst="", intent="text", content="hi")
    assert a2a.encode(env) == {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def test_foreign_message_gets_default_intent_and_no_clock() -> None:
    env = a2a.decode(load("v10_message_text"))
    assert (env.intent, env.content, env.ts, env.src, env.dst) == ("text", "hello", 0, "", "")
    env = a2a.decode(load("v03_message_data"))
    assert env.intent == "dict"
    assert env.content == {"answer": 42}
    assert env.meta.model_extra == {
        "a2a": {"role": "agent", "taskId": "t-3", "metadata": {"source": "calculator"}}
    }


def test_multipart_message_content_is_a_list_of_parts() -> None:
    env = a2a.decode(load("v10_message_agent_multipart"))
    assert env.content == [
        {"text": "Here is the chart:"},
        {
            "raw": b"GIF89a\x01\x00\x01\x00\x00\x00\x00,",
            "mediaType": "image/gif",
            "filename": "chart.gif",
        },
        {"data": [1, 2, 3], "metadata": {"unit": "ms"}},
    ]
    assert a2a.envelope_to_message(env, "0.3")["parts"][1] == {
        "kind": "file",
        "file": {"bytes": "R0lGODlhAQABAAAAACw=", "name": "chart.gif", "mimeType": "image/gif"},
    }


def test_gateway_keywords_override_what_the_client_wrote() -> None:
    wire = a2a.envelope_to_message(full_envelope("hi"), "1.0")  # claims src client/1, dst echo/1
    env = a2a.message_to_envelope(
        wire, src="gateway/alice", dst="weather/1", ts=5, session_id="ctx-9", task_id="t-1"
    )
    assert (env.src, env.dst, env.ts, env.context.session_id) == (
        "gateway/alice",
        "weather/1",
        5,
        "ctx-9",
    )
    assert env.meta.model_extra is not None
    assert env.meta.model_extra["a2a"]["taskId"] == "t-1"
    assert env.meta.signature == "c2lnbmF0dXJl"


@pytest.mark.parametrize("content", ["hi", {"op": "add", "a": 1}, [1, 2]])
def test_what_a_message_asks_for_is_what_its_envelope_carries(content: Any) -> None:
    """The gateway reads a message's intent and content without making an envelope:
    a message that names its intent, and one a plain client sent."""
    env = Envelope(id="m1", ts=1, src="c/1", dst="w/1", intent="weather", content=content)
    named = a2a.envelope_to_message(env, "1.0")
    part = {"text": content} if isinstance(content, str) else {"data": content}
    plain = {"messageId": "m2", "role": "ROLE_USER", "parts": [part]}
    for wire in (named, plain):
        message = a2a.message_from_wire(wire, "1.0")
        full = a2a.message_to_envelope(message)
        assert a2a.message_request(message) == (full.intent, full.content)


def test_reply_as_agent_with_task_ids() -> None:
    reply = Envelope(id="r-1", ts=0, dst="", intent="text", content="sunny")
    msg = a2a.envelope_to_message(reply, "1.0", role="agent", task_id="t-1", context_id="c-1")
    assert msg == {
        "messageId": "r-1",
        "role": "ROLE_AGENT",
        "parts": [{"text": "sunny"}],
        "contextId": "c-1",
        "taskId": "t-1",
    }


def test_bridge_keeps_content_and_security_fields() -> None:
    env = full_envelope({"question": "why?"})
    v10 = a2a.encode(env)
    assert bridge(v10, "a2a", "a2a") == v10
    v03 = a2a.envelope_to_message(a2a.decode(v10), "0.3")
    back = a2a.decode(via_json(v03))
    assert back.content == env.content
    assert back.meta == env.meta


def test_nested_bytes_cannot_become_json() -> None:
    with pytest.raises(EncodeError, match="bytes"):
        a2a.encode(Envelope(dst="", intent="x", content={"img": b"\x00"}))
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(EncodeError):
        a2a.encode(Envelope(dst="", intent="x", content=cyclic))


def test_bad_actorbus_block_names_the_field() -> None:
    wire: dict[str, Any] = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
    wire["metadata"] = {"actorbus": {"context": {"ttl_ms": -1}}}
    with pytest.raises(a2a.InvalidParamsError, match=r"metadata\.actorbus\.context\.ttl_ms"):
        a2a.decode(wire)
    wire["metadata"] = {"actorbus": "nope"}
    with pytest.raises(a2a.InvalidParamsError, match=r"metadata\.actorbus"):
        a2a.decode(wire)


def test_lenient_1_0_spellings_are_read_and_written_canonically() -> None:
    obj = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "statusUpdate": {
                "taskId": "t",
                "contextId": "c",
                "status": {
                    "state": "completed",
                    "message": {"messageId": "m", "role": "agent", "parts": [{"text": "ok"}]},
                },
                "final": True,
            }
        },
    }
    response = a2a.decode_response(obj, "1.0")
    out = a2a.encode_response(response, "1.0")["result"]["statusUpdate"]
    assert "final" not in out
    assert out["status"]["state"] == "TASK_STATE_COMPLETED"
    assert out["status"]["message"]["role"] == "ROLE_AGENT"


# -- tasks, states, streams ---------------------------------------------------------------------


def test_states_both_ways() -> None:
    expected_v10 = {
        TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
        TaskState.WORKING: "TASK_STATE_WORKING",
        TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
        TaskState.AUTH_REQUIRED: "TASK_STATE_AUTH_REQUIRED",
        TaskState.COMPLETED: "TASK_STATE_COMPLETED",
        TaskState.FAILED: "TASK_STATE_FAILED",
        TaskState.CANCELED: "TASK_STATE_CANCELED",
        TaskState.REJECTED: "TASK_STATE_REJECTED",
        TaskState.UNKNOWN: "TASK_STATE_UNSPECIFIED",
    }
    for state, wire in expected_v10.items():
        assert a2a.state_to_wire(state, "1.0") == wire
        assert a2a.state_from_wire(wire) is state
        assert a2a.state_from_wire(a2a.state_to_wire(state, "0.3")) is state
    assert a2a.state_to_wire(TaskState.INPUT_REQUIRED, "0.3") == "input-required"
    terminal = {s for s in TaskState if s.terminal}
    assert terminal == {
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.CANCELED,
        TaskState.REJECTED,
    }
    with pytest.raises(ValueError, match="running"):
        a2a.state_from_wire("running")


def task(state: TaskState, context_id: str | None = "c-1") -> Task:
    return Task(id="t-1", context_id=context_id, status=TaskStatus(state=state))


def test_task_to_wire_per_version() -> None:
    assert a2a.task_to_wire(task(TaskState.WORKING), "1.0") == {
        "id": "t-1",
        "contextId": "c-1",
        "status": {"state": "TASK_STATE_WORKING"},
    }
    assert a2a.task_to_wire(task(TaskState.WORKING, None), None) == {
        "kind": "task",
        "id": "t-1",
        "contextId": "",  # required in 0.3
        "status": {"state": "working"},
    }


@pytest.mark.parametrize(
    ("state", "final"),
    [(TaskState.WORKING, False), (TaskState.COMPLETED, True), (TaskState.INPUT_REQUIRED, True)],
)
def test_status_update_events(state: TaskState, final: bool) -> None:
    update = StatusUpdate(task_id="t-1", context_id="c-1", status=TaskStatus(state=state))
    assert a2a.stream_event(7, update, "1.0") == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "statusUpdate": {
                "taskId": "t-1",
                "contextId": "c-1",
                "status": {"state": a2a.state_to_wire(state, "1.0")},
            }
        },
    }
    event = a2a.stream_event(7, update, "0.3")["result"]
    assert event["kind"] == "status-update"
    assert event["final"] is final
    assert update.ends_stream is final


def test_artifact_update_and_send_results() -> None:
    artifact = Artifact(artifact_id="a-1", parts=parts_from_content({"n": 1}))
    update = ArtifactUpdate(task_id="t-1", context_id="c-1", artifact=artifact, last_chunk=True)
    assert a2a.stream_event(1, update, "1.0")["result"] == {
        "artifactUpdate": {
            "taskId": "t-1",
            "contextId": "c-1",
            "artifact": {"artifactId": "a-1", "parts": [{"data": {"n": 1}}]},
            "lastChunk": True,
        }
    }
    assert a2a.stream_event(1, update, "0.3")["result"]["kind"] == "artifact-update"
    msg = Message(message_id="m", role="agent", parts=[Part(kind="text", value="hi")])
    assert a2a.send_response(2, msg, "1.0")["result"] == {
        "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}
    }
    assert a2a.send_response(2, task(TaskState.SUBMITTED), "1.0")["result"]["task"]["id"] == "t-1"
    assert a2a.task_response(3, task(TaskState.SUBMITTED), "0.3")["result"]["kind"] == "task"
    with pytest.raises(a2a.UnsupportedOperationError):
        a2a.list_tasks_response(4, TaskList(tasks=[]), "0.3")


def test_sse_frame_ends_with_a_blank_line() -> None:
    frame = a2a.sse_frame(a2a.rpc_result(1, {"task": {}}))
    assert frame.startswith(b"data: {")
    assert frame.endswith(b"}\n\n")


# -- errors ---------------------------------------------------------------------------------


TAXONOMY_CASES: list[tuple[ActorBusError, int]] = [
    (DecodeError("bad bytes"), -32700),
    (ValidationFailedError("field x"), -32602),
    (InvalidAddressError("bad address"), -32602),
    (MessageTooLargeError("payload", 10, 5), -32600),
    (UnsupportedError("no streaming"), -32004),
    (UnknownIntentError("no handler"), -32004),
    (ActorNotFoundError("no such key"), -32001),
    (ProtocolError("out of order"), -32006),
    (EncodeError("cannot encode"), -32006),
    (AskTimeoutError("weather/1", "Ask", 2.0), -32603),
    (ConnectionLostError("nats gone"), -32603),
    (NoRespondersError("weather/1"), -32603),
    (ActorStoppedError("stopping"), -32603),
    (ExpiredError("too late"), -32603),
    (RateLimitedError("slow down"), -32603),
    (AuthError("who are you"), -32000),  # A2A: a custom auth code, not internal
    (StreamCancelledError("consumer left"), -32603),
    (ActorBusError("boom"), -32603),
]
A2A_CASES: list[ActorBusError] = [
    cls("it went wrong", metadata={"taskId": "t-9"}) for cls in a2a.A2A_ERRORS
]


@pytest.mark.parametrize(("err", "code"), TAXONOMY_CASES, ids=lambda v: type(v).__name__)
def test_taxonomy_to_json_rpc_code(err: ActorBusError, code: int) -> None:
    assert a2a.rpc_code(err) == code


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "err", [e for e, _ in TAXONOMY_CASES] + A2A_CASES, ids=lambda v: type(v).__name__
)
def test_errors_round_trip(err: ActorBusError, version: str) -> None:
    wire = via_json(a2a.error_response(err, "req-1", version))
    back = a2a.error_from_response(wire)
    assert back.code == err.code
    assert str(back) == str(err)
    if isinstance(err, A2AError):
        assert type(back) is type(err)
        assert isinstance(back, A2AError)
        assert back.metadata == {"taskId": "t-9"}
        assert back.request_id == "req-1"


def test_1_0_error_data_is_google_rpc_error_info() -> None:
    err = a2a.TaskNotFoundError("Task not found", metadata={"taskId": "t-1"})
    assert a2a.error_response(err, 3, "1.0") == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {
            "code": -32001,
            "message": "Task not found",
            "data": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "TASK_NOT_FOUND",
                    "domain": "a2a-protocol.org",
                    "metadata": {
                        "taskId": "t-1",
                        "actorbusCode": "E_NOT_FOUND",
                        "actorbusType": "TaskNotFoundError",
                    },
                }
            ],
        },
    }
    timeout = a2a.error_object(AskTimeoutError("w/1", "Ask", 1.0), "1.0")["data"][0]
    assert (timeout["reason"], timeout["domain"]) == ("TIMEOUT", "actorbus")
    assert a2a.error_object(err, "0.3")["data"] == {
        "taskId": "t-1",
        "actorbusCode": "E_NOT_FOUND",
        "actorbusType": "TaskNotFoundError",
    }


@pytest.mark.parametrize(
    ("cls", "reason"),
    [
        (a2a.TaskNotFoundError, "TASK_NOT_FOUND"),
        (a2a.TaskNotCancelableError, "TASK_NOT_CANCELABLE"),
        (a2a.PushNotificationNotSupportedError, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        (a2a.UnsupportedOperationError, "UNSUPPORTED_OPERATION"),
        (a2a.ContentTypeNotSupportedError, "CONTENT_TYPE_NOT_SUPPORTED"),
        (a2a.InvalidAgentResponseError, "INVALID_AGENT_RESPONSE"),
        (a2a.ExtendedAgentCardNotConfiguredError, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        (a2a.ExtensionSupportRequiredError, "EXTENSION_SUPPORT_REQUIRED"),
        (a2a.VersionNotSupportedError, "VERSION_NOT_SUPPORTED"),
    ],
)
def test_a2a_codes_and_reasons(cls: type[A2AError], reason: str) -> None:
    (info,) = a2a.error_object(cls(), "1.0")["data"]
    assert (info["reason"], info["domain"]) == (reason, "a2a-protocol.org")
    assert -32009 <= cls.rpc_code <= -32001
    assert str(cls())  # a default message


def test_remote_error_keeps_the_handler_type_and_message() -> None:
    err = RemoteError("division by zero", remote_type="ZeroDivisionError", address="calc/1")
    back = a2a.error_from_response(a2a.error_response(err, 1, "1.0"))
    assert isinstance(back, RemoteError)
    assert (back.remote_type, back.remote_message) == ("ZeroDivisionError", "division by zero")


@pytest.mark.parametrize(
    "obj",
    [
        None,
        5,
        "x",
        [],
        {"error": "x"},
        {"error": {"code": "1", "message": "m"}},
        {"code": True, "message": "m"},
    ],
)
def test_malformed_errors_are_invalid_agent_responses(obj: Any) -> None:
    assert isinstance(a2a.error_from_response(obj), a2a.InvalidAgentResponseError)


def test_unknown_foreign_code_is_a_remote_error() -> None:
    err = a2a.error_from_response({"code": -32099, "message": "quota"})
    assert isinstance(err, RemoteError)
    assert err.remote_type == "JSONRPCError(-32099)"


def test_http_status() -> None:
    assert a2a.http_status(a2a.TaskNotFoundError()) == 404
    assert a2a.http_status(a2a.TaskNotCancelableError()) == 409
    assert a2a.http_status(a2a.ContentTypeNotSupportedError()) == 415
    assert a2a.http_status(AuthError("no")) == 401
    assert a2a.http_status(ForbiddenError("not yours")) == 403
    assert a2a.http_status(RateLimitedError("no")) == 429
    assert a2a.http_status(AskTimeoutError("a", "b", 1)) == 504
    assert a2a.http_status(ActorBusError("x")) == 500


def test_codec_error_entries() -> None:
    obj = a2a.CODEC.error_to(a2a.TaskNotFoundError())
    assert obj["code"] == -32001
    assert isinstance(a2a.CODEC.error_from(obj), a2a.TaskNotFoundError)
    assert isinstance(
        a2a.CODEC.error_from({"jsonrpc": "2.0", "id": 1, "error": obj}), ActorNotFoundError
    )


# -- properties ------------------------------------------------------------------------------------

FAST = fast(60)

texts = TEXT
ids = st.text(min_size=1, max_size=16)
json_scalars = json_scalars_of(texts, bound=2**63)
json_values = json_values_of(texts, bound=2**63, max_size=4)
envelopes = envelopes_of(
    ids=ids,
    ts=st.integers(0, 2**45),
    src=texts,
    dst=texts,
    intent=ids,
    content=json_values | st.binary(max_size=48),
    context=contexts(
        ids,
        session_id=texts,
        priority=(-10, 10),
        artifact_refs=st.lists(texts, max_size=3),
        tags=st.dictionaries(texts, texts, max_size=3),
    ),
    meta=metas(
        ids,
        protocol_hint=st.sampled_from(["a2a", "acp", "anp", "agora"]),
        max_retries=20,
        cipher=st.sampled_from(["AES-256-GCM", "X25519+AES-GCM"]),
    ),
)
field = field_at


@FAST
@given(env=envelopes, version=st.sampled_from(VERSIONS))
def test_envelope_a2a_envelope_keeps_every_carried_field(env: Envelope, version: str) -> None:
    wire = via_json(a2a.envelope_to_message(env, version))
    back = a2a.message_to_envelope(wire, version=version)
    for path in CARRIES:
        assert field(back, path) == field(env, path), path


no_block = texts.filter(lambda k: k != "actorbus")
part_extras = {
    "media_type": st.none() | texts,
    "filename": st.none() | texts,
    "metadata": st.none() | st.dictionaries(no_block, json_values, min_size=1, max_size=2),
}
parts = (
    st.builds(Part, kind=st.just("text"), value=texts, **part_extras)
    | st.builds(Part, kind=st.just("raw"), value=st.binary(max_size=24), **part_extras)
    | st.builds(Part, kind=st.just("url"), value=texts, **part_extras)
    | st.builds(Part, kind=st.just("data"), value=json_values, **part_extras)
)
messages = st.builds(
    Message,
    message_id=ids,
    role=st.sampled_from(["user", "agent"]),
    parts=st.lists(parts, min_size=1, max_size=3),
    context_id=st.none() | texts,
    task_id=st.none() | texts,
    metadata=st.none() | st.dictionaries(no_block, json_values, max_size=3),
    extensions=st.none() | st.lists(texts, max_size=2),
    reference_task_ids=st.none() | st.lists(texts, max_size=2),
)


@FAST
@given(message=messages, version=st.sampled_from(VERSIONS))
def test_a2a_envelope_a2a_is_exact(message: Message, version: str) -> None:
    wire = via_json(a2a.message_to_wire(message, version))  # type: ignore[arg-type]
    env = a2a.message_to_envelope(wire, version=version)
    assert a2a.envelope_to_message(env, version) == wire
    assert a2a.message_from_wire(wire, version) == message  # type: ignore[arg-type]


# -- fuzzing: every decoder answers with a typed error, never another exception ---------------


def typed_only(fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(ActorBusError):
        fn(*args)


DECODERS: list[Callable[[Any], Any]] = [
    lambda v: a2a.decode_request(v, "1.0"),
    lambda v: a2a.decode_request(v, None),
    lambda v: a2a.decode_response(v, "1.0"),
    lambda v: a2a.decode_response(v, "0.3"),
    a2a.decode,
    lambda v: a2a.message_from_wire(v, V10),
    lambda v: a2a.message_from_wire(v, V03),
    lambda v: a2a.result_from_wire(v, V10),
    lambda v: a2a.result_from_wire(v, V03),
]
method_names = st.sampled_from(
    [
        *a2a.Method,
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/cancel",
        "tasks/resubscribe",
        "x",
    ]
)
requestish = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": method_names.map(str), "params": json_values},
    optional={"id": json_scalars},
)


@settings(max_examples=100, deadline=None)
@given(value=json_values | requestish | st.binary(max_size=40))
def test_random_values_get_typed_errors(value: Any) -> None:
    for decode in DECODERS:
        typed_only(decode, value)
    assert isinstance(a2a.error_from_response(value), ActorBusError)


ALL_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def paths(obj: Any) -> list[tuple[Any, ...]]:
    """Every key/index path inside ``obj`` (not the whole)."""
    return key_paths(obj)[1:]


def mutate(obj: Any, path: tuple[Any, ...], action: str, value: Any) -> None:
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    elif action == "wrap":
        parent[path[-1]] = [parent[path[-1]]]
    else:
        parent[path[-1]] = value


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_fixtures_get_typed_errors(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(ALL_FIXTURES))
    obj = load(name)
    path = data.draw(st.sampled_from(paths(obj)))
    action = data.draw(st.sampled_from(["delete", "wrap", "replace"]))
    mutate(obj, path, action, data.draw(json_values))
    version = version_of(name)
    kind = name.split("_")[1]
    if kind == "request":
        typed_only(a2a.decode_request, obj, version)
    elif kind == "message":
        typed_only(a2a.decode, obj)
    else:
        typed_only(a2a.decode_response, obj, version)
    assert isinstance(a2a.error_from_response(obj), ActorBusError)
