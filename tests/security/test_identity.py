"""Identities, credentials and the replay window, without a broker."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from actorbus.codecs.errors import AuthError, ClockSkewError, DecodeError, ReplayError
from actorbus.security.credentials import Authority, read_credential
from actorbus.security.identity import Identity, PublicIdentity, did_key, verify_key_of
from actorbus.security.replay import ReplayWindow

NS = "ab"


def test_an_identity_round_trips_through_its_file_which_only_its_owner_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ids" / "system.key"
    with caplog.at_level(logging.DEBUG, logger="actorbus"):
        made = Identity.load(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = Identity.load(path)
    assert again.public == made.public
    assert made.sign(b"x") == again.sign(b"x")  # Ed25519 is deterministic: same key
    text = path.read_text()
    assert "PRIVATE KEY" not in caplog.text
    assert text not in caplog.text
    assert repr(made) == f"Identity({made.did})"  # no key material in a repr


def test_a_file_that_is_no_identity_is_an_error_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "x.key"
    path.write_text("not a key")
    with pytest.raises(DecodeError, match="not an actorbus identity"):
        Identity.load(path)
    assert path.read_text() == "not a key"


def test_did_key_names_the_signing_key_and_a_public_identity_checks_it() -> None:
    me = Identity.generate()
    assert me.did.startswith("did:key:z6Mk")
    assert verify_key_of(me.did) == me.public.verify_key
    assert PublicIdentity.from_json(me.public.to_json()) == me.public
    other = Identity.generate().public
    forged = {**me.public.to_json(), "did": other.did}
    with pytest.raises(DecodeError, match="did:key of its verify key"):
        PublicIdentity.from_json(forged)
    with pytest.raises(DecodeError):
        verify_key_of("did:key:zQ3s" + "1" * 40)
    doc = me.public.did_document("did:wba:example.com:agents:echo")
    assert doc["keyAgreement"] == ["did:wba:example.com:agents:echo#agree"]
    assert doc["verificationMethod"][0]["publicKeyMultibase"] == did_key(
        me.public.verify_key
    ).removeprefix("did:key:")


def test_an_authoritys_credential_reads_back_and_nothing_else_passes() -> None:
    authority = Authority(Identity.generate(), NS)
    trusted = {authority.public.did: authority.public}
    member = Identity.generate()
    token = authority.issue(member.public, ["echo"], ttl=60, now=1_000_000)
    cred = read_credential(token, trusted, NS, now=1_000_010)
    assert cred.subject == member.public
    assert cred.may_send_as("echo/1")
    assert cred.may_send_as(f"client/{member.kid}")  # its own client address
    assert not cred.may_send_as("client/x")  # not another member's
    assert not cred.may_send_as("bank/1")
    with pytest.raises(AuthError, match="expired"):
        read_credential(token, trusted, NS, now=1_000_061)
    with pytest.raises(AuthError, match="namespace"):
        read_credential(token, trusted, "other", now=1_000_010)
    with pytest.raises(AuthError, match="revoked"):
        read_credential(token, trusted, NS, revoked={cred.jti}, now=1_000_010)
    rogue = Authority(Identity.generate(), NS)  # a self-made authority: not trusted
    with pytest.raises(AuthError, match="untrusted issuer"):
        read_credential(rogue.issue(member.public, ["*"]), trusted, NS)
    # A rogue signing with its own key but naming the trusted issuer: bad signature.
    rogue_claiming = Authority(rogue.identity, NS)
    sig = rogue_claiming.issue(member.public, ["*"]).split(".")[2]
    real_head, real_claims, _ = authority.issue(member.public, ["*"]).split(".")
    with pytest.raises(AuthError, match="does not verify"):
        read_credential(f"{real_head}.{real_claims}.{sig}", trusted, NS)
    with pytest.raises(AuthError, match="compact JWT"):
        read_credential("garbage", trusted, NS)


def test_the_replay_window_takes_each_id_once_and_only_fresh_stamps() -> None:
    window = ReplayWindow(skew_ms=30_000)
    window.check("a", 100_000, now_ms=100_000)
    with pytest.raises(ReplayError):
        window.check("a", 100_000, now_ms=100_001)
    with pytest.raises(ClockSkewError, match="behind"):
        window.check("b", 100_000, now_ms=130_001)
    with pytest.raises(ClockSkewError, match="ahead"):
        window.check("c", 200_000, now_ms=100_000)
    window.check("d", 129_000, now_ms=129_500)
    assert len(window) == 2
    window.check("e", 200_000, now_ms=200_000)  # a and d have left the window
    assert len(window) == 1


def test_a_stored_message_delivered_again_in_its_place_is_no_replay() -> None:
    """After a broker restart that lost its consumers' progress, a stored message
    comes again with nothing to say so: the same place in the same stream. A copy
    published again has a place of its own, and a live message has none."""
    window = ReplayWindow(skew_ms=30_000)
    window.check("a", 100_000, now_ms=100_000, stored_at="actorbus-ns-d-t:7")
    window.check("a", 100_000, now_ms=100_000, stored_at="actorbus-ns-d-t:7")
    with pytest.raises(ReplayError):
        window.check("a", 100_000, now_ms=100_100, stored_at="actorbus-ns-d-t:9")
    with pytest.raises(ReplayError):
        window.check("a", 100_000, now_ms=100_100, stored_at="actorbus-ns-d-other:7")
    with pytest.raises(ReplayError):
        window.check("a", 100_000, now_ms=100_100)
    window.check("live", 100_000, now_ms=100_000)
    with pytest.raises(ReplayError):  # a live message published into a stream
        window.check("live", 100_000, now_ms=100_100, stored_at="actorbus-ns-d-t:8")


def test_a_flooded_replay_window_never_lets_a_replay_through() -> None:
    window = ReplayWindow(skew_ms=30_000, max_ids=100)
    for i in range(100):
        window.check(f"m{i}", 100_000 + i, now_ms=100_200)
    window.check("new", 100_200, now_ms=100_200)  # full: the oldest ten are dropped
    with pytest.raises(ClockSkewError):
        window.check("m0", 100_000, now_ms=100_201)  # dropped, but refused all the same
    with pytest.raises(ReplayError):
        window.check("m50", 100_050, now_ms=100_201)
