"""Session headers, message tags and sealed content, without a broker."""

from __future__ import annotations

import os
import sys

import pytest

from actorbus.codecs.errors import AuthError
from actorbus.security.credentials import Authority, Credential, read_credential
from actorbus.security.identity import Identity
from actorbus.security.sessions import (
    SESSION_LIFETIME_MS,
    OutboundSession,
    accept_session,
    check_body,
    fresh_nonce,
    seal,
    sealing_aad,
    session_signer,
    tag_body,
    unseal,
)

NS = "ab"
NOW = 1_700_000_000_000


class Members:
    """An authority and the credentials it issued, as a receiver resolves them."""

    def __init__(self) -> None:
        self.authority = Authority(Identity.generate(), NS)
        self.trusted = {self.authority.public.did: self.authority.public}
        self.by_kid: dict[str, str] = {}

    def join(self, types: list[str]) -> Identity:
        me = Identity.generate()
        self.by_kid[me.kid] = self.authority.issue(me.public, types)
        return me

    def credential_of(self, kid: str) -> Credential:
        token = self.by_kid.get(kid)
        if token is None:
            raise AuthError(f"no credential for {kid}")
        return read_credential(token, self.trusted, NS)


@pytest.fixture
def members() -> Members:
    return Members()


def test_both_ends_derive_the_same_keys_and_a_tag_checks(members: Members) -> None:
    sender, recipient = members.join(["caller"]), members.join(["echo"])
    out = OutboundSession(sender, recipient.public, NOW)
    assert session_signer(out.header) == sender.kid
    got = accept_session(out.header, recipient, members.credential_of, NOW)
    assert got.sender.subject == sender.public
    body = b"\x85an envelope"
    check_body(got.keys.forward, body, tag_body(out.keys.forward, body))
    check_body(out.keys.back, body, tag_body(got.keys.back, body))  # the answer back
    with pytest.raises(AuthError, match="forged"):
        check_body(got.keys.forward, body + b"!", tag_body(out.keys.forward, body))
    with pytest.raises(AuthError, match="forged"):  # a direction is its own key
        check_body(got.keys.back, body, tag_body(out.keys.forward, body))
    with pytest.raises(AuthError, match="without"):
        check_body(got.keys.forward, body, None)


def test_a_session_header_is_refused_when_anything_in_it_is_wrong(members: Members) -> None:
    sender, recipient, other = members.join(["a"]), members.join(["b"]), members.join(["c"])
    header = OutboundSession(sender, recipient.public, NOW).header
    with pytest.raises(AuthError, match="not this recipient"):
        accept_session(header, other, members.credential_of, NOW)
    with pytest.raises(AuthError, match="expired"):
        accept_session(header, recipient, members.credential_of, NOW + SESSION_LIFETIME_MS)
    kid, rkid, eph, expires, sig = header.split(".")
    later = ".".join((kid, rkid, eph, str(int(expires) + 1), sig))
    with pytest.raises(AuthError, match="does not verify"):
        accept_session(later, recipient, members.credential_of, NOW)
    outsider = Identity.generate()  # not vouched for by the authority
    header = OutboundSession(outsider, recipient.public, NOW).header
    with pytest.raises(AuthError, match="no credential"):
        accept_session(header, recipient, members.credential_of, NOW)
    # An outsider claiming a member's key id cannot sign for it.
    claimed = ".".join((sender.kid, *header.split(".")[1:]))
    with pytest.raises(AuthError, match="does not verify"):
        accept_session(claimed, recipient, members.credential_of, NOW)
    for bad in ("", "a.b.c", "a.b.c.d.e", f"{kid}.{rkid}.!!.{expires}.{sig}"):
        with pytest.raises(AuthError, match=r"malformed|not this recipient"):
            accept_session(bad, recipient, members.credential_of, NOW)


def test_sealed_content_opens_only_in_its_own_envelope(members: Members) -> None:
    sender, recipient = members.join(["a"]), members.join(["b"])
    out = OutboundSession(sender, recipient.public, NOW)
    got = accept_session(out.header, recipient, members.credential_of, NOW)
    aad = sealing_aad("id-1", "a/1", "b/1", NOW, "greet")
    sealed = seal(out.keys.forward, b"secret 4111-1111", aad)
    assert b"4111" not in sealed
    assert unseal(got.keys.forward, sealed, aad) == b"secret 4111-1111"
    moved = sealing_aad("id-2", "a/1", "b/1", NOW, "greet")
    with pytest.raises(AuthError, match="does not open"):
        unseal(got.keys.forward, sealed, moved)
    with pytest.raises(AuthError, match="too short"):
        unseal(got.keys.forward, b"short", aad)


def test_a_nonce_is_never_used_twice_in_a_process_nor_shared_with_a_forked_child(
    members: Members,
) -> None:
    """GCM leaks the key stream when a nonce repeats under one key: each sealed
    content starts with a nonce this process has not used before, and a forked
    child (a restarted worker) counts from a start of its own."""
    sender, recipient = members.join(["a"]), members.join(["b"])
    out = OutboundSession(sender, recipient.public, NOW)
    aad = sealing_aad("id-1", "a/1", "b/1", NOW, "greet")
    nonces = [seal(out.keys.forward, b"same", aad)[:12] for _ in range(5_000)]
    nonces += [fresh_nonce() for _ in range(5_000)]
    assert len(set(nonces)) == len(nonces)
    assert {len(n) for n in nonces} == {12}
    if sys.platform == "win32":  # pragma: no cover - no fork there
        return
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, which reports through the pipe
        os.write(write, b"".join(fresh_nonce() for _ in range(100)))
        os._exit(0)
    os.close(write)
    got = b""
    while chunk := os.read(read, 4096):
        got += chunk
    os.close(read)
    assert os.waitpid(child, 0)[1] == 0
    in_child = {got[i : i + 12] for i in range(0, len(got), 12)}
    in_parent = [fresh_nonce() for _ in range(100)]
    # Had the child gone on with the parent's count, both would now hand out the same.
    assert len(in_child) == 100
    assert in_child.isdisjoint(nonces + in_parent)


def test_the_sealed_fields_are_written_as_every_version_writes_them() -> None:
    """The bytes a sealed content is bound to are part of the wire: a process of
    another version must compute the very same ones. None and False leave a
    field out; 0 and True are written; a shorter context is the same as one
    padded with None."""
    full = ("t" * 32, "p-1", "s-1", "k-1", 0, True)
    assert sealing_aad("id-1", "client/z6Mk", "b/1", NOW, "greet", full) == (
        b"id-1\x1fclient/z6Mk\x1fb/1\x1f1700000000000\x1fgreet\x1ftrace_id="
        + b"t" * 32
        + b"\x1fparent_id=p-1\x1fsession_id=s-1\x1fidempotency_key=k-1\x1fttl_ms=0\x1fstream=True"
    )
    some = ("t1", None, None, None, 5000, False)
    assert (
        sealing_aad("i", "a", "b", 7, "x", some)
        == b"i\x1fa\x1fb\x1f7\x1fx\x1ftrace_id=t1\x1fttl_ms=5000"
    )
    padded = ("t1", None, None, None, None, None)
    assert sealing_aad("i", "a", "b", 7, "x", ["t1"]) == sealing_aad("i", "a", "b", 7, "x", padded)
    assert sealing_aad("i", "a", "b", 7, "x") == b"i\x1fa\x1fb\x1f7\x1fx"
