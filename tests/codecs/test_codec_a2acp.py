"""The A2ACP codec: wire fixtures, round trips, schema agreement, errors, the lifecycle."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from _codec_support import (
    FIXTURES_ROOT,
    JSON,
    envelopes as envelopes_of,
    fast,
    field_at,
    fixture_loader,
    metas,
    mutated,
)
from hypothesis import given, strategies as st

from actorbus.codecs import a2acp
from actorbus.codecs.a2acp.checker import Compiler, fast_checker
from actorbus.codecs.common import format_timestamp
from actorbus.codecs.edge import bridge, codec
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    AuthError,
    DecodeError,
    EncodeError,
    MessageTooLargeError,
    ProtocolError,
    RateLimitedError,
    RemoteError,
    UnknownIntentError,
    UnsupportedError,
    ValidationFailedError,
)

FIXTURES = FIXTURES_ROOT / "a2acp"
FAST = fast(40)
fixture = fixture_loader("a2acp")
path = field_at

MESSAGES = ["request.json", "response.json", "error_schema_mismatch.json", "event.json"]
MESSAGES += ["error_rate_limited.json"]

envelopes = envelopes_of(meta=metas(cipher=st.sampled_from(["aes256", "AES-256-GCM"])))


# -- fixtures and round trips --


@pytest.mark.parametrize("name", MESSAGES)
def test_fixture_is_schema_valid_for_jsonschema_and_the_fast_checker(name: str) -> None:
    msg = fixture(name)
    assert a2acp.schema_errors(msg) == []
    assert a2acp.validate_message(msg) is msg


@pytest.mark.parametrize("name", MESSAGES)
def test_fixture_round_trips_exactly(name: str) -> None:
    msg = fixture(name)
    assert a2acp.encode(a2acp.decode(msg)) == msg
    assert a2acp.loads(a2acp.dumps(msg)) == msg


def test_request_maps_onto_the_envelope() -> None:
    env = a2acp.decode(fixture("request.json"))
    assert (env.src, env.dst) == ("sdlc-test-agent", "dataset-provisioning-agent")
    assert env.intent == "provision_test_dataset"
    assert env.content["contract_id"] == "contract-456"
    assert env.ts == 1_769_524_200_000  # 2026-01-27T14:30:00Z
    assert env.meta.protocol_hint == "a2acp"
    assert env.meta.model_extra is not None
    assert env.meta.model_extra["auth_token"].startswith("eyJ")
    assert env.meta.model_extra["a2acp"]["target"] == {
        "domain": "medtronic_poc",
        "version": "2.1.0",
    }


def test_event_and_encryption_map_to_meta() -> None:
    env = a2acp.decode(fixture("event.json"))
    assert env.meta.cipher == "aes256"
    assert env.meta.model_extra is not None
    assert env.meta.model_extra["a2acp"]["message_type"] == "event"


def test_error_message_becomes_an_error_envelope() -> None:
    env = a2acp.decode(fixture("error_schema_mismatch.json"))
    assert env.intent == "$error"
    assert env.content["code"] == "E_VALIDATION"
    assert env.content["type"] == "ValidationFailedError"
    assert env.content["retry_after"] == 0
    assert env.content["correlation_id"] == "correlation-789"


@FAST
@given(envelopes)
def test_envelope_round_trip_keeps_every_carried_field(env: Envelope) -> None:
    wire = json.loads(json.dumps(a2acp.encode(env)))
    back = a2acp.decode(wire)
    for field in a2acp.CODEC.carries:
        assert path(back, field) == path(env, field), field


@FAST
@given(envelopes)
def test_encoded_messages_pass_the_reference_schema(env: Envelope) -> None:
    assert a2acp.schema_errors(a2acp.encode(env)) == []


def test_strict_peers_get_no_extension() -> None:
    env = Envelope(dst="b", intent="x", content=[1], context=EnvelopeContext(session_id="s"))
    msg = a2acp.to_message(env, extension=False)
    assert "actorbus" not in msg
    assert msg["payload"] == {"content": [1]}


def test_security_fields_are_carried_unchanged() -> None:
    meta = EnvelopeMeta.model_validate(
        {"signature": "sig", "key_id": "did:key:z6Mk#1", "cipher": "aes256", "auth_token": "jwt"}
    )
    env = Envelope(dst="b", intent="x", content={}, meta=meta)
    msg = a2acp.encode(env)
    assert msg["security"] == {"auth_token": "jwt", "encryption": "aes256"}
    back = a2acp.decode(msg)
    assert (back.meta.signature, back.meta.key_id, back.meta.cipher) == (
        "sig",
        "did:key:z6Mk#1",
        "aes256",
    )
    assert back.meta.model_extra is not None
    assert back.meta.model_extra["auth_token"] == "jwt"


def test_bridge_to_itself_is_identity() -> None:
    msg = fixture("request.json")
    assert bridge(msg, "a2acp", "A2ACP") == msg
    assert codec("a2acp") is a2acp.CODEC


def test_reply_to_swaps_agents_and_keeps_the_contract() -> None:
    req = fixture("request.json")
    reply = Envelope(src="x/1", dst="y", intent="Answer", content={"dataset_id": "d1"})
    msg = a2acp.reply_to(req, reply, extension=False)
    assert msg["message_type"] == "response"
    assert msg["intent"] == "provision_test_dataset"
    assert msg["source_agent"] == req["target_agent"]
    assert msg["target_agent"] == req["source_agent"]
    assert msg["payload"] == {
        "contract_id": "contract-456",
        "correlation_id": "correlation-789",
        "dataset_id": "d1",
    }
    err = Envelope(dst="y", intent="$error", content=RateLimitedError("slow").to_wire())
    failed = a2acp.reply_to(a2acp.parse_message(req), err)
    assert failed["message_type"] == "error"
    assert failed["payload"]["error"]["code"] == "RATE_LIMIT_EXCEEDED"
    assert failed["payload"]["error"]["correlation_id"] == "correlation-789"
    assert a2acp.schema_errors(failed) == []


@FAST
@given(JSON)
def test_fuzz_timestamps(obj: Any) -> None:
    with contextlib.suppress(ActorBusError):
        a2acp.parse_timestamp(obj)


def test_timestamps() -> None:
    assert format_timestamp(0) == "1970-01-01T00:00:00Z"
    assert format_timestamp(1_250) == "1970-01-01T00:00:01.250Z"
    assert a2acp.parse_timestamp("1970-01-01T01:00:00+01:00") == 0
    assert a2acp.parse_timestamp("1970-01-01T00:00:00.0019") == 1
    with pytest.raises(EncodeError):
        format_timestamp(10**16)
    with pytest.raises(DecodeError):
        a2acp.parse_timestamp("yesterday")


# -- validation and fuzz --


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda m: m.pop("message_id"), "message_id"),
        (lambda m: m.update(protocol_version="v1"), "protocol_version"),
        (lambda m: m["source_agent"].update(version="1.2"), "source_agent.version"),
        (lambda m: m.update(message_type="notice"), "message_type"),
        (lambda m: m["security"].update(encryption="rot13"), "security.encryption"),
        (lambda m: m.update(payload=[1]), "payload"),
        (lambda m: m["security"].pop("auth_token"), "auth_token"),
    ],
)
def test_schema_violations_are_named(mutate: Any, where: str) -> None:
    msg = fixture("request.json")
    mutate(msg)
    with pytest.raises(DecodeError, match=where.split(".")[-1]):
        a2acp.decode(msg)


def test_error_message_needs_retry_after() -> None:
    msg = fixture("error_schema_mismatch.json")
    del msg["payload"]["error"]["retry_after"]
    with pytest.raises(DecodeError, match="retry_after"):
        a2acp.decode(msg)


def test_unsupported_major_version() -> None:
    msg = fixture("request.json")
    msg["protocol_version"] = "2.0"
    with pytest.raises(UnsupportedError, match=r"2\.0"):
        a2acp.decode(msg)
    msg["protocol_version"] = "1.7"
    assert a2acp.encode(a2acp.decode(msg))["protocol_version"] == "1.7"


def test_oversized_and_non_json_bytes() -> None:
    with pytest.raises(MessageTooLargeError):
        a2acp.loads(b" " * (a2acp.MAX_MESSAGE_BYTES + 1))
    for junk in (b"{", b"\xff\xfe", b"[]", b"null"):
        with pytest.raises(DecodeError):
            a2acp.loads(junk)


@FAST
@given(st.data(), st.sampled_from(MESSAGES))
def test_fuzz_decoders_raise_only_actorbus_errors(data: st.DataObject, name: str) -> None:
    msg = mutated(fixture(name), data)
    for fn in (a2acp.decode, a2acp.parse_message, a2acp.validate_message):
        with contextlib.suppress(ActorBusError):
            fn(msg)
    assert isinstance(a2acp.error_from(msg), ActorBusError)


@FAST
@given(JSON)
def test_fuzz_arbitrary_json(obj: Any) -> None:
    for fn in (a2acp.decode, a2acp.parse_message):
        with pytest.raises(ActorBusError):
            fn(obj)
    assert isinstance(a2acp.error_from(obj), ActorBusError)


@FAST
@given(st.binary(max_size=64))
def test_fuzz_bytes(data: bytes) -> None:
    with pytest.raises(ActorBusError):
        a2acp.loads(data)


@FAST
@given(st.data(), st.sampled_from(MESSAGES))
def test_fast_checker_agrees_with_jsonschema(data: st.DataObject, name: str) -> None:
    msg = mutated(fixture(name), data)
    assert fast_checker()(msg) == (a2acp.schema_errors(msg) == [])


def test_schema_checker_refuses_keywords_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="oneOf"):
        Compiler({}).predicate({"oneOf": []})


# -- errors --


@pytest.mark.parametrize(
    ("err", "native", "retry"),
    [
        (AskTimeoutError("echo/1", "Q", 1.0), "TIMEOUT", a2acp.DEFAULT_RETRY_AFTER),
        (AuthError("no"), "AUTH_FAILED", 0),
        (UnknownIntentError("no handler"), "CAPABILITY_NOT_FOUND", 0),
        (ValidationFailedError("bad"), "SCHEMA_MISMATCH", 0),
        (ProtocolError("broke"), "CONTRACT_VIOLATION", 0),
        (RemoteError("boom", remote_type="KeyError"), "INTERNAL_ERROR", 1),
    ],
)
def test_error_round_trip(err: ActorBusError, native: str, retry: int) -> None:
    body = a2acp.error_to(err)
    assert body["code"] == native
    assert body["retry_after"] == retry
    back = a2acp.error_from(body)
    assert type(back) is type(err)
    assert back.retry_after == retry  # type: ignore[attr-defined]
    assert str(back) == str(err)  # the message crosses unchanged


def test_rate_limit_carries_retry_after_both_ways() -> None:
    err = RateLimitedError("slow down")
    err.retry_after = 12  # type: ignore[attr-defined]
    body = a2acp.error_to(err)
    assert (body["code"], body["retry_after"]) == ("RATE_LIMIT_EXCEEDED", 12)
    assert "details" not in body  # the native code says it all
    back = a2acp.error_from(fixture("error_rate_limited.json"))
    assert isinstance(back, RateLimitedError)
    assert back.retry_after == 30  # type: ignore[attr-defined]


def test_foreign_codes() -> None:
    sec = {"code": "SECURITY_POLICY_VIOLATION", "message": "cross-domain", "retry_after": 0}
    assert isinstance(a2acp.error_from(sec), AuthError)
    odd = a2acp.error_from({"code": "QUOTA", "message": "m", "retry_after": 5})
    assert isinstance(odd, RemoteError)
    assert odd.remote_type == "QUOTA"
    assert isinstance(a2acp.error_from(fixture("request.json")), ProtocolError)
    assert isinstance(a2acp.error_from({"code": 1}), ProtocolError)


# -- the lifecycle --


def test_broker_sees_the_whole_lifecycle() -> None:
    session = a2acp.A2acpSession()
    states = [session.observe(m) for m in fixture("flow_broker.json")]
    assert states == [
        "handshake_requested",
        "acceptance_requested",
        "accepted",
        "contracted",
        "contracted",
        "contracted",
        "closed",
    ]
    assert (session.contract_id, session.collaboration_id) == ("contract-456", "collab-001")
    assert session.timeout_s is None


def test_source_and_target_seats() -> None:
    flow = fixture("flow_broker.json")
    source = a2acp.A2acpSession()
    for m in (flow[0], flow[3], flow[4], flow[5]):
        source.observe(m)
    assert source.state == "contracted"
    assert source.timeout_s == a2acp.ROUTING_TIMEOUT_S
    target = a2acp.A2acpSession()
    for m in (flow[1], flow[2]):
        target.observe(a2acp.parse_message(m))
    assert target.state == "accepted"
    assert target.timeout_s == a2acp.HANDSHAKE_TIMEOUT_S


def test_rejection_and_errors() -> None:
    flow = fixture("flow_broker.json")
    no = copy.deepcopy(flow[2])
    no["payload"] = {"accepted": False, "reason": "busy"}
    session = a2acp.A2acpSession()
    for m in (flow[0], flow[1], no):
        session.observe(m)
    assert session.state == "rejected"
    with pytest.raises(ProtocolError, match="'rejected'"):
        session.observe(flow[3])
    failing = a2acp.A2acpSession()
    failing.observe(flow[0])
    assert failing.observe(fixture("error_rate_limited.json")) == "rejected"
    contracted = a2acp.A2acpSession()
    for m in (flow[0], flow[3]):
        contracted.observe(m)
    assert contracted.observe(fixture("error_rate_limited.json")) == "contracted"


@pytest.mark.parametrize(
    ("steps", "bad", "match"),
    [
        ([], 4, "starts with a handshake"),
        ([0], 4, "contract"),
        ([0, 3], 7, None),  # fine: closes
        ([1], 6, "accepted"),
        ([0, 3, 6], 0, "ended"),
    ],
)
def test_illegal_transitions_name_state_and_message(
    steps: list[int], bad: int, match: str | None
) -> None:
    flow = [*fixture("flow_broker.json"), fixture("request.json")]
    session = a2acp.A2acpSession()
    for i in steps:
        session.observe(flow[i])
    if match is None:
        session.observe(flow[6])
        return
    state = session.state.value
    with pytest.raises(ProtocolError, match=match) as info:
        session.observe(flow[bad])
    assert repr(state) in str(info.value)
    assert repr(flow[bad]["message_type"]) in str(info.value)


def test_routed_message_needs_the_contract_id() -> None:
    flow = fixture("flow_broker.json")
    session = a2acp.A2acpSession()
    for m in (flow[0], flow[3]):
        session.observe(m)
    stray = copy.deepcopy(flow[4])
    stray["payload"]["contract_id"] = "contract-999"
    with pytest.raises(ProtocolError, match="contract-456"):
        session.observe(stray)
    bad_handshake = copy.deepcopy(flow[0])
    del bad_handshake["payload"]["requested_intent"]
    with pytest.raises(ProtocolError, match="requested_intent"):
        a2acp.A2acpSession().observe(bad_handshake)
