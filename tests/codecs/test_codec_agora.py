"""The Agora edge: protocol documents and hashes, requests, replies in both error
shapes, conversations, the (small) set of carried fields, fuzz.

The request/reply fixtures follow agora-protocol 0.2.0's sender and receiver
(``SimpleExternalConversation``, ``ReceiverServer``) and the spec's hex form.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from _codec_support import (
    FIXTURES_ROOT,
    TEXT_20,
    decodes_or_raises_typed,
    fast,
    field_at,
    fixture_loader,
    json_values,
    sample_errors,
    top_level_junk,
    wire,
)
from hypothesis import given, strategies as st

from actorbus.codecs import agora
from actorbus.codecs.common import ENVELOPE_FIELDS_BUT_HINT
from actorbus.codecs.edge import CODECS
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    DecodeError,
    EncodeError,
    ProtocolError,
    RemoteError,
    UnknownIntentError,
    UnsupportedError,
)

FIXTURES = FIXTURES_ROOT / "agora"
FAST = fast(60)
WEATHER = (FIXTURES / "protocol_weather.md").read_text()
CHAT = (FIXTURES / "protocol_booking_chat.md").read_text()
HASHES = json.loads((FIXTURES / "hashes.json").read_text())
fixture = fixture_loader("agora")


# -- protocol documents and hashes -------------------------------------------------------


def test_protocol_documents_parse() -> None:
    doc = agora.parse_protocol_document(WEATHER)
    assert (doc.name, doc.multiround) == ("weather-forecast", False)
    assert doc.description == "Ask for the weather forecast of a city on a date."
    assert doc.body.startswith("# Weather forecast")
    assert doc.hash == HASHES["hex"]
    chat = agora.parse_protocol_document(CHAT)
    assert chat.multiround is True
    assert chat.description == (  # a folded block keeps its final newline, as in YAML
        "A multi-turn conversation that books a table: the receiver asks for what it needs.\n"
    )


def test_front_matter_agrees_with_yaml() -> None:
    yaml = pytest.importorskip("yaml")  # not a dependency: a cross-check where present
    for text in (WEATHER, CHAT, agora.protocol_document('a "b"', "c: d", "x", multiround=True)):
        front = text.split("---")[1]
        assert agora.parse_front_matter(front) == yaml.safe_load(front)


def test_documents_without_an_opening_fence_and_with_defaults() -> None:
    doc = agora.parse_protocol_document("name: x\nmultiround: yes\n---\nbody text\n")
    assert (doc.name, doc.multiround, doc.body) == ("x", True, "body text")
    bare = agora.parse_protocol_document("---\n# only a comment\n---\nhello")
    assert (bare.name, bare.description, bare.multiround) == (
        "Unnamed protocol",
        "No description provided",
        False,
    )


@pytest.mark.parametrize(
    "text",
    [
        "no front matter at all",
        "---\nname: x\n",
        "---\nmultiround: maybe\n---\n",
        "---\n- a\n---\n",
    ],
)
def test_bad_documents_are_decode_errors(text: str) -> None:
    with pytest.raises(DecodeError):
        agora.parse_protocol_document(text)


def test_built_documents_round_trip() -> None:
    text = agora.protocol_document("n", "d: with colon", "Body.", multiround=True)
    doc = agora.parse_protocol_document(text)
    assert (doc.name, doc.description, doc.multiround, doc.body) == (
        "n",
        "d: with colon",
        True,
        "Body.",
    )


@pytest.mark.parametrize(
    "form", ["hex", "base64", "base64_unpadded", "base64_urlsafe", "hex_upper"]
)
def test_hash_is_accepted_as_hex_or_base64(form: str) -> None:
    assert agora.hash_matches(WEATHER, HASHES[form])
    assert agora.normalize_hash(HASHES[form]) == HASHES["hex"]


def test_hash_styles_and_wrong_hashes() -> None:
    assert agora.protocol_hash(WEATHER) == HASHES["hex"]
    assert agora.protocol_hash(WEATHER, style="base64") == HASHES["base64"]
    assert not agora.hash_matches(WEATHER, agora.protocol_hash(CHAT))
    assert not agora.hash_matches(WEATHER + " ", HASHES["hex"])
    assert not agora.hash_matches(WEATHER, HASHES["hex"][:-1] + "0")
    for bad in ("", "xyz", HASHES["hex"][:39], None, 40, "=" * 28):
        assert not agora.hash_matches(WEATHER, bad)
        with pytest.raises(DecodeError):
            agora.normalize_hash(bad)


def test_data_uri_sources() -> None:
    uri = agora.data_uri(WEATHER)
    assert agora.read_data_uri(uri) == WEATHER
    sdk_source = fixture("request_protocol_sdk_base64.json")["protocolSources"][0]
    assert agora.read_data_uri(sdk_source) == WEATHER
    b64 = "data:text/plain;charset=utf-8;base64,aGVsbG8="
    assert agora.read_data_uri(b64) == "hello"
    with pytest.raises(UnsupportedError):
        agora.read_data_uri("data:image/png;base64,AAAA")
    with pytest.raises(DecodeError):
        agora.read_data_uri("https://x/p.md")


# -- requests and replies ---------------------------------------------------------------


def test_natural_language_request() -> None:
    env = agora.decode(fixture("request_natural_language.json"))
    assert env.content == "What's the weather like in Paris tomorrow?"
    assert env.intent == "text"
    assert env.ts == 0
    assert env.meta.protocol_hint == "agora"
    assert agora.agora_facts(env) == {
        "protocolHash": None,
        "protocolSources": [],
        "multiround": False,
        "metadata": False,  # an Agora client's request: re-encoded without metadata
    }


@pytest.mark.parametrize(
    ("name", "style"),
    [("request_protocol_sdk_base64.json", "base64"), ("request_protocol_spec_hex.json", "hex")],
)
def test_protocol_requests_normalise_the_hash(name: str, style: str) -> None:
    env = agora.decode(fixture(name))
    facts = agora.agora_facts(env)
    assert facts["protocolHash"] == HASHES["hex"]
    assert facts["hashStyle"] == style


@pytest.mark.parametrize(
    "name",
    [
        "request_natural_language.json",
        "request_protocol_sdk_base64.json",
        "request_protocol_spec_hex.json",
        "request_multiround.json",
    ],
)
def test_request_round_trip_is_exact(name: str) -> None:
    raw = fixture(name)
    back = wire(agora.encode(agora.decode(raw)))
    assert back == {"multiround": False, **raw}  # the hash keeps the form it came in


def test_hash_style_can_be_chosen_for_sdk_peers() -> None:
    env = agora.decode(fixture("request_protocol_spec_hex.json"))
    assert agora.encode_request(env, style="base64")["protocolHash"] == HASHES["base64"]


def test_multiround_conversation() -> None:
    opened = agora.decode(fixture("reply_multiround.json"))
    conversation = "3f1c7b2e-9a4d-4f6b-8c2e-5d7a9b1c3e5f"
    assert opened.context.session_id == conversation
    assert agora.agora_facts(opened)["conversationExpires"] == "2025-06-01T10:05:00Z"
    url = agora.conversation_url("https://agent.example.com/agora/", conversation)
    assert url == f"https://agent.example.com/agora/conversations/{conversation}"
    assert agora.conversation_id_of("/agora/conversations/" + conversation) == conversation
    assert agora.conversation_id_of("/agora/") is None
    followup = agora.decode_request(fixture("followup.json"), conversation_id=conversation)
    assert followup.context.session_id == conversation
    # An actor's answer in that session goes back with the conversation id.
    answer = Envelope(
        dst="",
        intent="text",
        content="BOOKED R-17",
        context=EnvelopeContext(session_id=conversation),
    )
    assert agora.encode_reply(answer) == {
        "status": "success",
        "body": "BOOKED R-17",
        "conversationId": conversation,
    }
    assert agora.encode_request(answer)["multiround"] is True


def test_reply_round_trips() -> None:
    for name in ("reply_success.json", "reply_multiround.json"):
        raw = fixture(name)
        assert agora.encode_reply(agora.decode(raw)) == raw


@pytest.mark.parametrize(
    "name", ["reply_failure_spec.json", "reply_error_sdk.json", "reply_not_found_sdk.json"]
)
def test_both_error_shapes_are_read(name: str) -> None:
    raw = fixture(name)
    env = agora.decode(raw)
    assert env.intent == "$error"
    err = agora.error_from(raw)
    assert isinstance(err, RemoteError)
    assert err.remote_type == "AgoraError"
    assert str(err.remote_message) == (raw.get("error") or raw.get("message"))


def test_error_shapes_written() -> None:
    err = AskTimeoutError("weather", "text", 5.0)
    spec = agora.error_reply(err)
    sdk = agora.error_reply(err, style="sdk")
    assert spec["status"] == "failure"
    assert spec["error"].startswith("E_TIMEOUT: ")
    assert sdk == {"status": "error", "message": spec["error"]}
    failed = Envelope(dst="", intent="$error", content=err.to_wire())
    assert agora.encode(failed) == spec
    assert agora.encode_reply(failed, style="sdk") == sdk


TAXONOMY = sample_errors(UnknownIntentError, ProtocolError)


@pytest.mark.parametrize("err", TAXONOMY, ids=lambda e: type(e).__name__)
def test_error_taxonomy_round_trips_in_both_shapes(err: ActorBusError) -> None:
    for style in ("spec", "sdk"):
        back = agora.error_from(wire(agora.error_reply(err, style=style)))
        assert back.code == err.code
        assert back.to_wire()["message"] == err.to_wire()["message"]


# -- what Agora can and cannot carry -----------------------------------------------------


def test_non_text_content_goes_as_json_text_and_bytes_not_at_all() -> None:
    env = Envelope(dst="x", intent="Query", content={"city": "Paris"})
    sent = agora.encode(env)
    assert sent["body"] == '{"city":"Paris"}'
    assert sent["metadata"]["contentType"] == "json"
    assert agora.decode(wire(sent)).content == {"city": "Paris"}  # marked: parsed back
    bare = {k: v for k, v in sent.items() if k != "metadata"}  # an Agora client's
    assert agora.decode(wire(bare)).content == '{"city":"Paris"}'
    assert agora.encode(env.model_copy(update={"content": None}))["body"] == ""
    with pytest.raises(EncodeError):
        agora.encode(env.model_copy(update={"content": b"\x00"}))


def test_a_request_carries_the_envelope_in_its_metadata() -> None:
    """The appendix's field alignment (G.2): Agora's message holds the rest of
    the envelope under ``metadata``, so a bridge through Agora keeps it."""
    assert agora.CODEC.carries == ENVELOPE_FIELDS_BUT_HINT
    env = Envelope(
        id="m-1",
        ts=5,
        src="a/1",
        dst="b/1",
        intent="Query",
        content="hi",
        context=EnvelopeContext(trace_id="t" * 32, idempotency_key="k-1", session_id="s-1"),
        meta=EnvelopeMeta(signature="c2ln", key_id="did:key:z#k", cipher="A256GCM"),
    )
    back = agora.decode(wire(agora.encode(env)))
    assert (back.id, back.ts, back.src, back.dst, back.intent) == ("m-1", 5, "a/1", "b/1", "Query")
    assert back.context.idempotency_key == "k-1"
    assert (back.meta.signature, back.meta.key_id, back.meta.cipher) == (
        "c2ln",
        "did:key:z#k",
        "A256GCM",
    )
    with pytest.raises(DecodeError, match="metadata"):
        agora.decode({"body": "x", "metadata": {"ts": "not a time"}})


envelopes = st.builds(
    Envelope,
    id=st.text(min_size=1, max_size=10),
    src=st.text(max_size=10),
    dst=st.text(max_size=10),
    intent=st.text(min_size=1, max_size=10),
    content=st.text(),
    context=st.builds(EnvelopeContext, trace_id=st.none() | st.text(max_size=8)),
    meta=st.builds(EnvelopeMeta, signature=st.none() | st.text(max_size=8)),
)


@FAST
@given(envelopes)
def test_envelope_round_trip_keeps_every_carried_field(env: Envelope) -> None:
    back = agora.decode(wire(agora.encode(env)))
    for path in agora.CODEC.carries:
        assert field_at(back, path) == field_at(env, path), path


@FAST
@given(envelopes, st.sampled_from([None, "c-1"]))
def test_reply_round_trip_keeps_content_and_conversation(env: Envelope, conversation: Any) -> None:
    env.context.session_id = conversation
    back = agora.decode(wire(agora.encode_reply(env)))
    assert (back.content, back.context.session_id) == (env.content, conversation)


@FAST
@given(
    st.sampled_from([WEATHER, CHAT]),
    st.sampled_from(["hex", "base64"]),
    st.text(max_size=3),
)
def test_request_with_any_hash_form_decodes_to_hex(
    doc: str, style: agora.HashStyle, body: str
) -> None:
    req = {
        "body": body,
        "protocolHash": agora.protocol_hash(doc, style=style),
        "protocolSources": [],
    }
    facts = agora.agora_facts(agora.decode(req))
    assert facts["protocolHash"] == agora.protocol_hash(doc)
    assert agora.hash_matches(doc, req["protocolHash"])


# -- fuzz ----------------------------------------------------------------------------------

json_data = json_values(
    TEXT_20, keys=st.text(max_size=8), bound=None, floats=False, max_size=4, max_leaves=10
)
MESSAGES = [fixture(p.name) for p in sorted(FIXTURES.glob("re*.json"))]
junk = top_level_junk(MESSAGES, ["status", "body"], json_data)
DECODERS = [agora.decode, agora.decode_request, agora.decode_reply, CODECS["agora"].decode]


@FAST
@given(junk, st.sampled_from(DECODERS))
def test_malformed_messages_raise_only_typed_errors(obj: Any, decode: Any) -> None:
    decodes_or_raises_typed(decode, obj)


@FAST
@given(
    json_data
    | st.text()
    | st.text(alphabet="-:\n abc|>#'\"", max_size=60).map(lambda t: t + "\n---\n")
)
def test_parsers_raise_only_typed_errors(obj: Any) -> None:
    assert isinstance(agora.error_from(obj), ActorBusError)
    for parse in (agora.parse_protocol_document, agora.normalize_hash, agora.read_data_uri):
        with contextlib.suppress(ActorBusError):
            parse(obj)
    assert agora.hash_matches(WEATHER, obj) in (True, False)


def test_codec_is_registered() -> None:
    assert CODECS["agora"] is agora.CODEC
