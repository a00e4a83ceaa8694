"""The security package against published test vectors, and the checks that make
its one verifier the strict one (RFC 8032 Ed25519, RFC 9421 B.2.6, the did:web
resolution examples did:wba adopts, key binding cross-checked with the anp SDK)."""

from __future__ import annotations

import base64

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from actorbus.codecs.errors import DecodeError
from actorbus.security.did import (
    did_document_url,
    e1_fingerprint,
    k1_fingerprint,
    key_bound,
    parse_did,
)
from actorbus.security.http_signatures import parse_http_signature, signature_base
from actorbus.security.keys import load_key
from actorbus.security.signatures import sign, verify

# RFC 8032, section 7.1: TEST 1, 2 and 3 (secret key, public key, message, signature).
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555f"
        "b8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da08"
        "5ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18"
        "ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_rfc8032_ed25519_vectors(secret: str, public: str, message: str, signature: str) -> None:
    key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    pub = ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(public))
    assert sign(key, bytes.fromhex(message)).hex() == signature
    verify(pub, bytes.fromhex(signature), bytes.fromhex(message))
    with pytest.raises(InvalidSignature):
        verify(pub, bytes.fromhex(signature), bytes.fromhex(message) + b"!")


# RFC 9421, Appendix B.1.4 (test-key-ed25519) and B.2.6 (signing a request with it).
B14_PRIVATE = b"""-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----
"""
B14_PUBLIC = b"""-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----
"""
B26_HEADERS = {
    "Date": "Tue, 20 Apr 2021 02:07:55 GMT",
    "Content-Type": "application/json",
    "Content-Length": "18",
    "Signature-Input": 'sig-b26=("date" "@method" "@path" "@authority" "content-type" '
    '"content-length");created=1618884473;keyid="test-key-ed25519#k"',
    "Signature": "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgw"
    "UPiu4A0w6vuQv5lIp5WPpBKRCw==:",
}
B26_BASE = (
    '"date": Tue, 20 Apr 2021 02:07:55 GMT\n'
    '"@method": POST\n'
    '"@path": /foo\n'
    '"@authority": example.com\n'
    '"content-type": application/json\n'
    '"content-length": 18\n'
    '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" '
    '"content-length");created=1618884473;keyid="test-key-ed25519"'
)


def test_rfc9421_b26_signature_base_and_signature() -> None:
    """Our parser and signature base give the RFC's bytes, and our verifier accepts
    the RFC's signature (the keyid carries a '#' here, as a DID URL must; the
    published base is checked with the RFC's own keyid)."""
    private = serialization.load_pem_private_key(B14_PRIVATE, password=None)
    public = serialization.load_pem_public_key(B14_PUBLIC)
    assert isinstance(private, ed25519.Ed25519PrivateKey)
    assert isinstance(public, ed25519.Ed25519PublicKey)
    sig = parse_http_signature(B26_HEADERS, realm="example.com")
    assert sig.created == 1618884473
    ours = signature_base(sig, "POST", "https://example.com/foo", B26_HEADERS, "example.com")
    published = B26_BASE.encode()
    assert ours == published.replace(b'"test-key-ed25519"', b'"test-key-ed25519#k"')
    expected = base64.b64decode(B26_HEADERS["Signature"].split(":")[1])
    assert sign(private, published) == expected  # Ed25519 is deterministic
    verify(public, expected, published)
    with pytest.raises(InvalidSignature):
        verify(public, expected, ours)  # a changed base never verifies


def test_ecdsa_signatures_are_raw_r_s_only() -> None:
    """One encoding, so one signature per message: DER is refused."""
    key = ec.generate_private_key(ec.SECP256K1())
    data = b"the bytes"
    raw = sign(key, data)
    assert len(raw) == 64
    verify(key.public_key(), raw, data)
    der = key.sign(data, ec.ECDSA(hashes.SHA256()))
    with pytest.raises(InvalidSignature):
        verify(key.public_key(), der, data)


def test_a_k1_did_binds_only_a_secp256k1_key() -> None:
    secp = ec.generate_private_key(ec.SECP256K1()).public_key()
    p256 = ec.generate_private_key(ec.SECP256R1()).public_key()
    assert key_bound(f"did:wba:example.com:k1_{k1_fingerprint(secp)}", secp)
    # The thumbprint of a P-256 key in a k1_ DID: the curve is wrong, refused.
    assert not key_bound(f"did:wba:example.com:k1_{k1_fingerprint(p256)}", p256)


def test_key_files_are_private(tmp_path) -> None:
    path = tmp_path / "keys" / "agent.pem"
    key = load_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_key(path).public_key() == key.public_key()  # loaded, not replaced


# The did:web method specification's resolution examples (section 3.2.1), which
# the did:wba specification adopts unchanged: a DID and the URL of its document.
DID_URLS = [
    ("did:wba:w3c-ccg.github.io", "https://w3c-ccg.github.io/.well-known/did.json"),
    ("did:wba:w3c-ccg.github.io:user:alice", "https://w3c-ccg.github.io/user/alice/did.json"),
    ("did:wba:example.com%3A3000:user:alice", "https://example.com:3000/user/alice/did.json"),
]


@pytest.mark.parametrize(("did", "url"), DID_URLS)
def test_did_wba_resolves_to_the_specs_urls(did: str, url: str) -> None:
    assert did_document_url(did) == url


@pytest.mark.parametrize(
    "bad",
    ["did:web:example.com", "did:wba:", "did:wba:exa mple.com", "did:wba:example.com%3A99999"],
)
def test_malformed_dids_are_refused_by_name(bad: str) -> None:
    with pytest.raises(DecodeError, match="did"):
        parse_did(bad)


def test_key_binding_fingerprints_match_the_anp_sdk() -> None:
    """e1_ and k1_ DIDs end with the RFC 7638 thumbprint the official SDK computes."""
    did_wba = pytest.importorskip("anp.authentication.did_wba")
    ed = ed25519.Ed25519PrivateKey.generate().public_key()
    k1 = ec.generate_private_key(ec.SECP256K1()).public_key()
    assert e1_fingerprint(ed) == did_wba.compute_multikey_fingerprint(ed)
    assert k1_fingerprint(k1) == did_wba.compute_jwk_fingerprint(k1)
    assert key_bound(f"did:wba:example.com:user:e1_{e1_fingerprint(ed)}", ed)
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    assert not key_bound(f"did:wba:example.com:user:e1_{e1_fingerprint(ed)}", other)
