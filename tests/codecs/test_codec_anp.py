"""The ANP edge: did:wba, the DIDWba header, ad.json, JSON-RPC messages, errors, fuzz.

``fixtures/anp/sdk_*`` were produced by the official ``anp`` 1.0.7 package
(``create_did_wba_document`` + ``generate_auth_header``, profiles e1 and k1), so
verifying them here is verifying interoperability with ANP's own SDK.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
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
    sample_errors,
    top_level_junk,
    wire,
)
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from hypothesis import given, strategies as st

from actorbus.codecs import acp, anp
from actorbus.codecs.edge import CODECS
from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.errors import (
    ActorBusError,
    AskTimeoutError,
    AuthError,
    DecodeError,
    EncodeError,
    RateLimitedError,
    UnknownIntentError,
    UnsupportedError,
)
from actorbus.security.did import (
    VerificationMethod,
    did_document,
    did_document_url,
    e1_did,
    e1_fingerprint,
    k1_fingerprint,
    parse_did,
    parse_did_document,
    public_key_of,
)
from actorbus.security.didwba import (
    DidWbaAuthError,
    build_auth_header,
    parse_auth_header,
    signing_input,
    verify_auth_header,
)
from actorbus.security.jcs import jcs
from actorbus.security.multibase import b58decode, b58encode, b64url, b64url_decode

FIXTURES = FIXTURES_ROOT / "anp"
FAST = fast(60)
AUD = "api.example.com"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
KEY = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
fixture = fixture_loader("anp")
get = field_at


def replay_guard() -> Callable[[str, str], bool]:
    """A nonce store as the gateway would keep one: True when seen before."""
    seen: set[tuple[str, str]] = set()

    def seen_nonce(did: str, nonce: str) -> bool:
        key = (did, nonce)
        if key in seen:
            return True
        seen.add(key)
        return False

    return seen_nonce


@pytest.fixture
def alice() -> tuple[str, dict[str, Any]]:
    did = e1_did("agents.example.com", ["user", "alice"], KEY.public_key())
    return did, did_document(did, KEY.public_key())


# -- did:wba ------------------------------------------------------------------------------


@pytest.mark.parametrize(("did", "url"), fixture("did_urls.json")["valid"])
def test_did_resolves_to_its_document_url(did: str, url: str) -> None:
    assert did_document_url(did) == url


@pytest.mark.parametrize("did", fixture("did_urls.json")["invalid"])
def test_malformed_dids_are_refused(did: str) -> None:
    with pytest.raises(DecodeError):
        parse_did(did)


def test_parsed_did_parts() -> None:
    parsed = parse_did("did:wba:Example.COM%3A8443:agents:travel")
    assert (parsed.host, parsed.port, parsed.path) == ("example.com", 8443, ("agents", "travel"))


def test_an_ipv6_host_is_a_did_authority_and_back() -> None:
    from actorbus.security.did import wba_authority

    did = f"did:wba:{wba_authority('::1', 8480)}:anp:echo"
    assert did == "did:wba:%5B%3A%3A1%5D%3A8480:anp:echo"
    parsed = parse_did(did)
    assert (parsed.host, parsed.port) == ("[::1]", 8480)
    assert parsed.document_url == "https://[::1]:8480/anp/echo/did.json"
    assert parse_did(f"did:wba:{wba_authority('[::1]', None)}").host == "[::1]"
    for bad in ("did:wba:%5Bnot-ip%5D", "did:wba:%5B%3A%3A1%5Dx"):
        with pytest.raises(DecodeError):
            parse_did(bad)


def test_document_id_must_equal_the_did() -> None:
    doc = fixture("sdk_e1_did_document.json")
    assert parse_did_document(doc, doc["id"]).id == doc["id"]
    with pytest.raises(DecodeError, match="not"):
        parse_did_document(doc, "did:wba:agents.example.com:user:mallory")


def test_sdk_documents_parse_with_their_keys() -> None:
    e1 = parse_did_document(fixture("sdk_e1_did_document.json"))
    key = public_key_of(e1.verificationMethod[0])
    assert isinstance(key, ed25519.Ed25519PublicKey)
    assert e1.id.endswith("e1_" + e1_fingerprint(key))
    k1 = parse_did_document(fixture("sdk_k1_did_document.json"))
    assert isinstance(public_key_of(k1.verificationMethod[0]), ec.EllipticCurvePublicKey)
    assert k1.keyAgreement == [k1.id + "#key-3"]


def test_did_document_builder(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    parsed = parse_did_document(doc, did)
    method = parsed.method(did + "#key-1")
    assert method is not None
    assert (method.publicKeyMultibase or "").startswith("z6Mk")
    assert parsed.authenticates(did + "#key-1")
    with_agreement = did_document(did, KEY.public_key(), agreement_key=b"\x01" * 32)
    assert with_agreement["keyAgreement"] == [did + "#key-x25519"]


def test_jwk_keys_are_read() -> None:
    method = VerificationMethod(
        id="did:wba:x.example#k",
        type="JsonWebKey2020",
        publicKeyJwk={"kty": "OKP", "crv": "Ed25519", "x": b64url(bytes(32))},
    )
    assert isinstance(public_key_of(method), ed25519.Ed25519PublicKey)
    method.publicKeyJwk = {"kty": "RSA", "n": "x"}
    with pytest.raises(DecodeError):
        public_key_of(method)


# -- JCS -----------------------------------------------------------------------------------


def test_jcs_matches_rfc_8785_examples() -> None:
    assert jcs({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'.encode()
    numbers = [0.0, -0.0, 1e21, 1e20, 1e-7, 1e-6, 333333333.3333333, 4.5, 2e-3, -1.5e300]
    expected = (
        "[0,0,1e+21,100000000000000000000,1e-7,0.000001,333333333.3333333,4.5,0.002,-1.5e+300]"
    )
    assert jcs(numbers) == expected.encode()
    assert jcs('\u0001\n\u2028"') == b'"\\u0001\\n\xe2\x80\xa8\\""'
    # Keys sort by UTF-16 code units: U+1F600 (surrogates D83D...) before U+FB33.
    assert jcs({"\ufb33": 1, "\U0001f600": 2}).startswith('{"\U0001f600"'.encode())


@pytest.mark.parametrize("bad", [float("nan"), {1: 2}, "\ud800", object()])
def test_jcs_refuses_what_it_cannot_canonicalise(bad: Any) -> None:
    with pytest.raises(EncodeError):
        jcs(bad)


def test_base58_round_trip() -> None:
    for data in (b"", b"\0\0\x01", bytes(range(40))):
        assert b58decode(b58encode(data)) == data
    with pytest.raises(DecodeError):
        b58decode("0OIl")


# -- the DIDWba header ------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["e1", "k1"])
def test_headers_made_by_the_anp_sdk_verify(profile: str) -> None:
    doc = fixture(f"sdk_{profile}_did_document.json")
    sample = fixture(f"sdk_{profile}_auth.json")
    now = datetime.fromisoformat(sample["now"]) + timedelta(seconds=3)
    auth = verify_auth_header(sample["header"], doc, aud=sample["aud"], now=now)
    assert auth.did == doc["id"]
    assert auth.version == "1.1"


def test_sign_and_verify_round_trip(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    header = build_auth_header(did, KEY, AUD, now=NOW)
    assert header.startswith('DIDWba v="1.1", did="')
    auth = verify_auth_header(
        header, doc, aud=AUD, now=NOW + timedelta(seconds=30), seen_nonce=replay_guard()
    )
    assert auth.did == did
    assert auth.timestamp == "2026-03-01T12:00:00Z"
    parsed = parse_auth_header(header)
    assert verify_auth_header(parsed, parse_did_document(doc), aud=AUD, now=NOW) == parsed


def test_secp256k1_keys_sign_too() -> None:
    key = ec.generate_private_key(ec.SECP256K1())
    did = "did:wba:example.com:user:k1_" + k1_fingerprint(key.public_key())
    nums = key.public_key().public_numbers()
    jwk = {
        "kty": "EC",
        "crv": "secp256k1",
        "x": b64url(nums.x.to_bytes(32, "big")),
        "y": b64url(nums.y.to_bytes(32, "big")),
    }
    method = {
        "id": did + "#key-1",
        "type": "EcdsaSecp256k1VerificationKey2019",
        "publicKeyJwk": jwk,
    }
    doc = {"id": did, "verificationMethod": [method], "authentication": [method["id"]]}
    header = build_auth_header(did, key, AUD, now=NOW)
    assert verify_auth_header(header, doc, aud=AUD, now=NOW).did == did


def _tamper(header: str, field: str, value: str) -> str:
    fields = parse_auth_header(header)
    old = getattr(fields, field)
    return header.replace(f'{field}="{old}"', f'{field}="{value}"')


def _fails(problem: str, header: str, doc: Any, **kwargs: Any) -> DidWbaAuthError:
    options: dict[str, Any] = {"aud": AUD, "now": NOW} | kwargs
    with pytest.raises(DidWbaAuthError) as info:
        verify_auth_header(header, doc, **options)
    err = info.value
    assert isinstance(err, AuthError)
    assert err.code == "E_AUTH"
    assert err.problem == problem, str(err)
    assert err.www_authenticate.startswith(f'DIDWba realm="{options["aud"]}", error="{problem}"')
    return err


def test_tampered_signature_is_refused(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    header = build_auth_header(did, KEY, AUD, now=NOW)
    sig = parse_auth_header(header).signature
    flipped = ("A" if sig[0] != "A" else "B") + sig[1:]
    _fails("invalid_signature", _tamper(header, "signature", flipped), doc)
    _fails("invalid_signature", _tamper(header, "nonce", "0" * 32), doc)
    _fails("invalid_signature", header, doc, aud="other.example.com")


def test_expired_and_future_timestamps_are_refused(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    header = build_auth_header(did, KEY, AUD, now=NOW)
    _fails("invalid_timestamp", header, doc, now=NOW + timedelta(minutes=6))
    _fails("invalid_timestamp", header, doc, now=NOW - timedelta(minutes=2))
    verify_auth_header(header, doc, aud=AUD, now=NOW + timedelta(minutes=4, seconds=59))
    _fails("invalid_timestamp", _tamper(header, "timestamp", "yesterday"), doc)


def test_replayed_nonce_is_refused(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    guard = replay_guard()
    header = build_auth_header(did, KEY, AUD, now=NOW)
    verify_auth_header(header, doc, aud=AUD, now=NOW, seen_nonce=guard)
    _fails("invalid_nonce", header, doc, seen_nonce=guard)
    fresh = build_auth_header(did, KEY, AUD, now=NOW)  # a new nonce
    verify_auth_header(fresh, doc, aud=AUD, now=NOW, seen_nonce=guard)


def test_a_bad_signature_does_not_burn_the_nonce(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    guard = replay_guard()
    header = build_auth_header(did, KEY, AUD, now=NOW, nonce="ab" * 16)
    sig = parse_auth_header(header).signature
    forged = _tamper(header, "signature", ("A" if sig[0] != "A" else "B") + sig[1:])
    _fails("invalid_signature", forged, doc, seen_nonce=guard)
    verify_auth_header(header, doc, aud=AUD, now=NOW, seen_nonce=guard)


def test_wrong_did_is_refused(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    other_key = ed25519.Ed25519PrivateKey.generate()
    other = e1_did("agents.example.com", ["user", "mallory"], other_key.public_key())
    # Mallory signs as herself but presents Alice's document.
    _fails("invalid_did", build_auth_header(other, other_key, AUD, now=NOW), doc)
    # Mallory puts her key in a document claiming Alice's e1 DID: the binding fails.
    forged = did_document(did, other_key.public_key())
    _fails("invalid_did", build_auth_header(did, other_key, AUD, now=NOW), forged)
    # Not a did:wba DID at all.
    header = build_auth_header(did, KEY, AUD, now=NOW)
    _fails("invalid_did", header.replace("did:wba:", "did:web:", 1), doc)


def test_method_must_be_listed_for_authentication(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    header = build_auth_header(did, KEY, AUD, now=NOW, verification_method="key-9")
    _fails("invalid_verification_method", header, doc)
    no_auth = {**doc, "authentication": []}
    err = _fails("invalid_verification_method", build_auth_header(did, KEY, AUD, now=NOW), no_auth)
    assert err.status == 403


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "Bearer abc",
        'DIDWba did="x"',
        'DIDWba v="1.1", did="a", did="b", nonce="n", timestamp="t", '
        'verification_method="k", signature="s"',
        'DIDWba v="1.1" did="a"',
    ],
)
def test_malformed_headers_are_invalid_requests(
    value: Any, alice: tuple[str, dict[str, Any]]
) -> None:
    _fails("invalid_request", value, alice[1])


def test_version_1_0_signs_service_instead_of_aud(alice: tuple[str, dict[str, Any]]) -> None:
    did, doc = alice
    header = build_auth_header(did, KEY, AUD, now=NOW, version="1.0")
    assert verify_auth_header(header, doc, aud=AUD, now=NOW).version == "1.0"
    assert signing_input("n", "t", AUD, did, "1.0") != signing_input("n", "t", AUD, did)


# -- agent description ------------------------------------------------------------------


def test_agent_description_has_the_spec_shape(alice: tuple[str, dict[str, Any]]) -> None:
    did, _ = alice
    ad = anp.agent_description(
        name="Travel",
        did=did,
        url="https://agents.example.com/agent/ad.json",
        rpc_url="https://agents.example.com/agent/rpc",
        methods=["searchHotels", {"name": "book", "params": [{"name": "id", "schema": {}}]}],
    )
    sample = fixture("agent_description.json")
    for key in ("protocolType", "protocolVersion", "type", "securityDefinitions", "security"):
        assert ad[key] == sample[key]
    interface = ad["interfaces"][0]
    assert (interface["type"], interface["protocol"]) == ("StructuredInterface", "openrpc")
    doc = interface["content"]
    assert doc["servers"][0]["url"] == "https://agents.example.com/agent/rpc"
    assert [m["name"] for m in doc["methods"]] == ["searchHotels", "book"]
    linked = anp.agent_description(
        name="T", did=did, url="u", rpc_url="r", openrpc_url="https://x/interface.json"
    )
    assert linked["interfaces"][0]["url"] == "https://x/interface.json"


# -- JSON-RPC messages -------------------------------------------------------------------


def test_rpc_request_fixtures_decode() -> None:
    env = anp.decode(fixture("rpc_request.json"))
    assert (env.id, env.intent, env.content["city"]) == ("req-7f3a", "searchHotels", "Paris")
    assert env.meta.protocol_hint == "anp"
    assert env.ts == 0
    positional = anp.decode(fixture("rpc_request_positional.json"))
    assert (positional.id, positional.content) == ("42", [2, 3])
    note = anp.decode(fixture("rpc_notification.json"))
    assert note.intent == "heartbeat"
    assert note.id


def test_rpc_response_and_errors_decode() -> None:
    reply = anp.decode(fixture("rpc_response.json"))
    assert reply.context.parent_id == "req-7f3a"
    assert reply.content["total"] == 1
    missing = anp.decode(fixture("rpc_error_method_not_found.json"))
    assert missing.intent == "$error"
    assert missing.context.parent_id == "req-7f3b"
    assert type(anp.error_from(fixture("rpc_error_method_not_found.json"))) is UnknownIntentError
    assert type(anp.error_from(fixture("rpc_error_unauthenticated.json"))) is AuthError
    assert type(anp.error_from(fixture("rpc_error_rate_limited.json"))) is RateLimitedError


@pytest.mark.parametrize(
    "name", ["rpc_request.json", "rpc_request_positional.json", "rpc_response.json"]
)
def test_rpc_fixture_round_trips(name: str) -> None:
    raw = fixture(name)
    env = anp.decode(raw)
    if "method" in raw:
        back = anp.encode_request(env, carry=False)
        assert (back["method"], back["params"]) == (raw["method"], raw["params"])
        assert back["id"] == str(raw["id"])  # JSON-RPC ids come back as strings
    else:
        back = anp.encode_response(env, request_id=raw["id"], carry=False)
        assert back == raw


def test_carried_meta_goes_in_params_meta() -> None:
    env = Envelope(
        src="did:wba:a.example",
        dst="did:wba:b.example",
        intent="search",
        content={"q": "x"},
        context=EnvelopeContext(trace_id="t" * 32, idempotency_key="once", session_id="s-9"),
        meta=EnvelopeMeta(signature="sig", key_id="did:wba:a.example#key-1", cipher="aes-256-gcm"),
    )
    params = anp.encode(env)["params"]
    assert params["q"] == "x"
    assert params["_meta"]["src"] == "did:wba:a.example"
    assert params["_meta"]["meta"] == {
        "signature": "sig",
        "key_id": "did:wba:a.example#key-1",
        "cipher": "aes-256-gcm",
    }
    assert anp.decode(wire(anp.encode(env))) == env


def test_reply_id_is_the_request_id() -> None:
    reply = Envelope(
        dst="gw", intent="Answer", content="done", context=EnvelopeContext(parent_id="req-1")
    )
    out = anp.encode_response(reply)
    assert out["id"] == "req-1"
    assert out["result"]["payload"] == "done"
    assert anp.decode(wire(out)) == reply
    failed = Envelope(
        dst="gw",
        intent="$error",
        content=AskTimeoutError("x", "y", 1).to_wire(),
        context=EnvelopeContext(parent_id="req-2"),
    )
    assert anp.encode(failed)["id"] == "req-2"
    assert anp.encode(failed)["error"]["code"] == -32010


# -- errors -----------------------------------------------------------------------------

TAXONOMY = sample_errors()


@pytest.mark.parametrize("err", TAXONOMY, ids=lambda e: type(e).__name__)
def test_error_taxonomy_round_trips(err: ActorBusError) -> None:
    response = wire(anp.error_to(err))
    assert response["jsonrpc"] == "2.0"
    assert "error" in response
    assert response["error"]["code"] == anp.RPC_CODE_OF.get(err.code, -32603)
    back = anp.error_from(response)
    assert type(back) is type(err)
    assert back.to_wire() == err.to_wire()
    bare = {k: v for k, v in response["error"].items() if k != "data"}
    assert anp.error_from(bare).code == anp.CODE_OF_RPC.get(bare["code"], "E_HANDLER")


def test_batches_are_unsupported() -> None:
    with pytest.raises(UnsupportedError):
        anp.decode([fixture("rpc_request.json")])


# -- properties ---------------------------------------------------------------------------

json_data = json_values(TEXT_20, keys=st.text(max_size=8), max_size=4, max_leaves=12)
envelopes = envelopes_of(
    ids=WORDS,
    ts=st.integers(-(2**40), 2**45),
    src=TEXT_20,
    dst=TEXT_20,
    intent=WORDS,
    content=st.none() | st.text() | st.binary(max_size=40) | json_data,
    context=contexts(WORDS, priority=(-5, 9), tags=SMALL_TAGS),
    meta=metas(WORDS, protocol_hint=WORDS, max_retries=5),
)


@FAST
@given(envelopes)
def test_envelope_round_trip_keeps_every_carried_field(env: Envelope) -> None:
    back = anp.decode(wire(anp.encode(env)))
    for path in anp.CODEC.carries:
        assert get(back, path) == get(env, path), path


@FAST
@given(envelopes)
def test_reply_round_trip_keeps_every_field(env: Envelope) -> None:
    back = anp.decode(wire(anp.encode_response(env, request_id="r-1")))
    for path in anp.CODEC.carries:
        assert get(back, path) == get(env, path), path


# -- fuzz ----------------------------------------------------------------------------------

RPC_FIXTURES = [fixture(p.name) for p in sorted(FIXTURES.glob("rpc_*.json"))]
junk = top_level_junk(RPC_FIXTURES, ["params", "_meta"], json_data)
DECODERS = [anp.decode, anp.decode_request, anp.decode_response, CODECS["anp"].decode]


@FAST
@given(junk, st.sampled_from(DECODERS))
def test_malformed_messages_raise_only_typed_errors(obj: Any, decode: Any) -> None:
    decodes_or_raises_typed(decode, obj)


@FAST
@given(json_data | st.text())
def test_parsers_raise_only_typed_errors(obj: Any) -> None:
    assert isinstance(anp.error_from(obj), ActorBusError)
    for parse in (parse_did, did_document_url, parse_did_document, b64url_decode):
        with contextlib.suppress(ActorBusError):
            parse(obj)
    with contextlib.suppress(ActorBusError):
        parse_auth_header(obj)


@FAST
@given(st.text(alphabet='DIDWbav=", _:.-abc01%3A', max_size=120))
def test_header_parser_and_verifier_raise_only_auth_errors(text: str) -> None:
    doc = fixture("sdk_e1_did_document.json")
    with pytest.raises(AuthError):
        verify_auth_header(text, doc, aud=AUD, now=NOW)


@FAST
@given(json_data)
def test_a_garbage_document_is_an_auth_error(doc: Any) -> None:
    sample = fixture("sdk_e1_auth.json")
    with pytest.raises(AuthError):
        verify_auth_header(sample["header"], doc if isinstance(doc, dict) else {}, aud=AUD, now=NOW)


def test_codec_is_registered() -> None:
    assert CODECS["anp"] is anp.CODEC
    assert anp.CODEC.carries == acp.ENVELOPE_FIELDS
