"""Actors that speak ANP's end-to-end encryption themselves.

ANP's end-to-end messages (``anp.e2e_encryption_hpke``: HPKE with
DHKEM(X25519, HKDF-SHA256), AES-128-GCM chains, secp256r1 proofs) are opened
by whoever holds the recipient's X25519 key. An :class:`AnpE2eeAgent` holds it
in its own process, so the gateway's ANP edge and NATS carry ciphertext only:

- ``e2ee_keys``: its public keys, which the gateway puts into the agent's
  did:wba document (``keyAgreement``, ``X25519KeyAgreementKey2019``);
- ``e2ee_init``: a caller's session, checked against the caller's own DID
  document (resolved here, not taken from the gateway) and answered with an
  ``e2ee_ack``;
- ``e2ee_msg``: a message of a session, opened, answered by
  :meth:`AnpE2eeAgent.on_e2ee`, and sealed back on the same session.

The keys live in ``$ACTORBUS_HOME/<namespace>/anp/<type>.pem`` (0600), shared by
every process hosting the type. This needs the ``anp`` package.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.codecs.errors import AuthError, UnsupportedError, ValidationFailedError
from actorbus.extras import missing
from actorbus.security.keys import write_private
from actorbus.security.settings import default_home

try:
    from actorbus.security.resolver import DidResolutionError, DidResolver
except ImportError as exc:  # aiohttp: the [anp] extra
    raise missing("anp", "ANP end-to-end sessions", exc) from exc

KEY_FRAGMENT = "key-x25519-e2ee"
SIGNING_FRAGMENT = "key-p256-e2ee"


def _anp() -> Any:
    try:
        import anp.e2e_encryption_hpke as hpke  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - depends on the environment
        raise UnsupportedError(
            "ANP end-to-end encryption needs the anp package (pip install 'actorbus[anp]')"
        ) from None
    return hpke


def _load_keys(path: Path) -> tuple[x25519.X25519PrivateKey, ec.EllipticCurvePrivateKey]:
    """The agent's X25519 and P-256 keys in ``path`` (made there, 0600, first)."""
    if path.exists():
        end = b"-----END PRIVATE KEY-----"
        blocks = [b + end for b in path.read_bytes().split(end) if b.strip()]
        keys = [serialization.load_pem_private_key(b, password=None) for b in blocks]
        agree = next(k for k in keys if isinstance(k, x25519.X25519PrivateKey))
        sign = next(k for k in keys if isinstance(k, ec.EllipticCurvePrivateKey))
        return agree, sign
    agree, sign = x25519.X25519PrivateKey.generate(), ec.generate_private_key(ec.SECP256R1())
    pem = b"".join(
        k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        for k in (agree, sign)
    )
    write_private(path, pem)
    return agree, sign


@dataclass
class _E2ee:
    agree: x25519.X25519PrivateKey
    sign: ec.EllipticCurvePrivateKey
    sessions: dict[str, Any]
    resolver: DidResolver


class AnpE2eeAgent(Actor):
    """Subclass it and write :meth:`on_e2ee`; the rest is ANP's E2EE protocol."""

    e2ee_keys_file: ClassVar[Path | None] = None  # default: $ACTORBUS_HOME/<ns>/anp/<type>.pem

    _e2ee_state: _E2ee | None = None

    def _e2ee(self) -> _E2ee:
        """Keys, sessions and the resolver, made on first use (no ``__init__`` or
        ``on_start`` a subclass could forget to call up to)."""
        if self._e2ee_state is None:
            path = self.e2ee_keys_file or (
                default_home(self.system.namespace) / "anp" / f"{self.type_name}.pem"
            )
            agree, sign = _load_keys(path)
            self._e2ee_state = _E2ee(agree, sign, {}, DidResolver())
        return self._e2ee_state

    async def on_stop(self) -> None:
        if self._e2ee_state is not None:
            await self._e2ee_state.resolver.close()

    async def on_e2ee(self, kind: str, text: str) -> str:
        """The answer to one decrypted message (``kind``: ANP's original type)."""
        raise NotImplementedError

    @handler(intent="e2ee_keys")
    async def e2ee_keys(self, _: dict[str, Any]) -> dict[str, str]:
        """The public keys for the agent's DID document (raw, base64url)."""
        raw = (
            self._e2ee()
            .agree.public_key()
            .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        return {"x25519": base64.urlsafe_b64encode(raw).decode(), "fragment": KEY_FRAGMENT}

    @handler(intent="e2ee_init")
    async def e2ee_init(self, content: dict[str, Any]) -> dict[str, Any]:
        hpke, state = _anp(), self._e2ee()
        me, caller = str(content.get("recipient_did", "")), str(content.get("sender_did", ""))
        proof = content.get("proof") or {}
        signer = str(proof.get("verification_method") or proof.get("verificationMethod") or "")
        try:
            doc = await state.resolver.resolve_json(caller)
            caller_key = hpke.extract_signing_public_key_from_did_document(doc, signer)
        except (DidResolutionError, ValueError, KeyError) as exc:
            raise AuthError(f"cannot check the session of {caller:.80}: {exc}") from None
        session = hpke.E2eeHpkeSession(
            local_did=me,
            peer_did=caller,
            local_x25519_private_key=state.agree,
            local_x25519_key_id=f"{me}#{KEY_FRAGMENT}",
            signing_private_key=state.sign,
            signing_verification_method=f"{me}#{SIGNING_FRAGMENT}",
        )
        try:
            session.process_init(content, caller_key)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise AuthError(f"the session of {caller:.80} does not check out: {exc}") from None
        state.sessions[session.session_id] = session
        return dict(
            hpke.build_e2ee_ack(
                session.session_id, me, caller, state.sign, f"{me}#{SIGNING_FRAGMENT}"
            )
        )

    @handler(intent="e2ee_msg")
    async def e2ee_msg(self, content: dict[str, Any]) -> dict[str, Any]:
        session = self._e2ee().sessions.get(str(content.get("session_id")))
        if session is None:
            raise ValidationFailedError("no such end-to-end session here: send e2ee_init first")
        try:
            kind, text = session.decrypt_message(content)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise AuthError(f"an end-to-end message that does not open: {exc}") from None
        answer = await self.on_e2ee(kind, text)
        _, sealed = session.encrypt_message("text", answer)
        return dict(sealed)
