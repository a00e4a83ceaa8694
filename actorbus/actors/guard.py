"""A system's side of end-to-end security: who it is, whom it trusts, and the
checks every message passes before a handler sees it.

The pipeline calls in at two places (see ``actors/pipeline.py``):

- **seal** (leaving): :meth:`Guard.session_for` finds, or opens, the session
  from the sending address's identity to the recipient type's key; the
  pipeline seals the content and tags the body with it. An answer uses the
  session its request came in on, in the other direction.
- **open** (arriving): :meth:`Guard.admit` checks the session header (once per
  session and process), the body's tag, that the signer's credential covers the
  envelope's ``src``, the replay window and the clock, then opens sealed
  content. Anything wrong is an :class:`AuthError` (``ReplayError``,
  ``ClockSkewError``), counted and logged; the actor goes on. A caller checks
  each reply the same way before taking it (:meth:`Guard.reply_check`), so a
  forged reply is dropped and the real one still awaited.

Identities: the system has its own (for ``client/...`` sends), generated per
process; each actor type it hosts has one in ``<home>/types/<type>.key``, the
same file for every process hosting the type (sealed messages to the type open
in any of them). Credentials come from the namespace's authority; in
development that is ``<home>/authority.key``, created on first use.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actorbus.actors.pipeline import attach_session, check_answer, open_content
from actorbus.actors.trust import Trust
from actorbus.codecs.errors import AuthError
from actorbus.codecs.inbound import Inbound
from actorbus.security.credentials import Authority
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.issued import SYSTEM, TRUSTED_FILE, read_trusted
from actorbus.security.issued import issued as issued_home
from actorbus.security.issued import load as load_issued
from actorbus.security.replay import DEFAULT_SKEW_MS, ReplayWindow
from actorbus.security.sessions import (
    AUTH_HEADER,
    SESSION_HEADER,
    InboundSession,
    OutboundSession,
    accept_session,
    check_body,
    session_signer,
)

log = logging.getLogger("actorbus.security")

Policy = Literal["require", "allow", "off"]
POLICIES: Final = ("require", "allow", "off")
_INBOUND_CACHE: Final = 10_000
_NO_RESPONDERS: Final = "503"


def actorbus_home() -> Path:
    """``$ACTORBUS_HOME``, or ``~/.actorbus``: identities, the development
    authority, the broker's keys and certificates."""
    return Path(os.environ.get("ACTORBUS_HOME") or Path.home() / ".actorbus")


def default_home(namespace: str) -> Path:
    """A namespace's directory in ``actorbus_home()``."""
    return actorbus_home() / namespace


@dataclass(frozen=True)
class SecuritySettings:
    """End-to-end security on the bus.

    ``policy`` is what an actor takes that is not authenticated: ``require``
    refuses it, ``allow`` takes it (authenticated messages are still checked),
    ``off`` checks nothing. An actor type overrides it with ``security = ...``.
    ``seal`` seals content to the recipient whenever its key is known (bodies in
    msgpack; JSON systems are authenticated, not sealed). ``home`` holds the
    identities (``$ACTORBUS_HOME/<namespace>`` by default); ``authority``
    issues this system's credentials (by default the development authority in
    ``home``); ``trusted`` adds authorities whose credentials are accepted.
    """

    policy: Policy = "require"
    seal: bool = True
    home: Path | None = None
    authority: Authority | None = None
    trusted: Sequence[PublicIdentity] = field(default_factory=tuple)
    skew_ms: int = DEFAULT_SKEW_MS

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {self.policy!r}")


class Guard:
    """Identities, credentials, sessions and the replay window of one system."""

    def __init__(
        self, settings: SecuritySettings, trust: Trust, system: Identity, home: Path
    ) -> None:
        self.settings = settings
        self.policy: Policy = settings.policy
        self.trust = trust
        self.system = system
        self.home = home
        self.types: dict[str, Identity] = {}
        self.replays = ReplayWindow(settings.skew_ms)
        self.refused = 0
        self._outbound: dict[tuple[str, str], OutboundSession] = {}
        self._inbound: OrderedDict[str, InboundSession] = OrderedDict()
        self._retired: dict[str, tuple[str, Identity]] = {}  # kid -> (type, old key)
        self._authority: Authority | None = None

    @classmethod
    async def open(cls, js: JetStreamContext, ns: str, settings: SecuritySettings) -> Guard:
        """Join the namespace: trust its authorities, publish this system's credential."""
        home = settings.home or default_home(ns)
        if settings.authority is None and issued_home(home):  # production: issued offline
            trusted = {p.did: p for p in [*settings.trusted, *read_trusted(home)]}
            if not trusted:
                raise AuthError(f"{home} trusts no authority: add {TRUSTED_FILE} or trusted=")
            trust = await Trust.open(js, ns, trusted)
            identity, token = load_issued(home, SYSTEM)
            guard = cls(settings, trust, identity, home)
            await trust.publish(token)
            return guard
        authority = settings.authority or _development_authority(home, ns)
        trusted = {authority.public.did: authority.public}
        trusted.update({p.did: p for p in settings.trusted})
        trust = await Trust.open(js, ns, trusted)
        guard = cls(settings, trust, Identity.generate(), home)
        guard._authority = authority
        await trust.publish(authority.issue(guard.system.public))
        return guard

    async def close(self) -> None:
        await self.trust.close()

    async def host_type(self, type_name: str) -> None:
        """Hold the identity of an actor type this system hosts, and publish its
        credential, so messages sealed to the type open here."""
        if type_name in self.types:
            return
        if self._authority is None:  # issued offline: the type's own files
            identity, token = load_issued(self.home, f"types/{type_name}")
        else:
            identity = Identity.load(self.home / "types" / f"{type_name}.key")
            token = self._authority.issue(identity.public, [type_name])
        await self.trust.publish(token, types=[type_name])
        self.types[type_name] = identity

    async def rotate(self, type_name: str | None = None) -> Identity:
        """A new identity for this system, or for an actor type it hosts, with its
        credential published; returns it. The old one keeps a grace period: its
        credential stays valid until it expires (``revoke`` ends it sooner), and
        sessions already sealed to an old type key still open here until they
        expire. Other hosts of the type take the new key file when they restart.
        Needs the authority: a deployment with credentials issued offline gets
        new ones from it (``actorbus security issue``)."""
        if self._authority is None:
            raise AuthError("rotating needs the authority; issue new credentials offline")
        if type_name is None:
            fresh = Identity.generate()
            await self.trust.publish(self._authority.issue(fresh.public))
            self.system = fresh
            return fresh
        old = self.types.get(type_name)
        if old is None:
            raise ValueError(f"this system does not host actor type {type_name!r}")
        fresh = Identity.generate()
        fresh.save(self.home / "types" / f"{type_name}.key")
        await self.trust.publish(
            self._authority.issue(fresh.public, [type_name]), types=[type_name]
        )
        self._retired[old.kid] = (type_name, old)
        self.types[type_name] = fresh
        return fresh

    async def revoke(self, jti: str) -> None:
        """End a credential now, everywhere: its sessions are refused from the
        next message on."""
        await self.trust.revoke(jti)

    # -- leaving -----------------------------------------------------------------
    def signer(self, src: str) -> Identity:
        """The identity that speaks for ``src`` here."""
        kind = src.partition("/")[0]
        if kind == "client":
            return self.system
        identity = self.types.get(kind)
        if identity is None:
            raise AuthError(
                f"this system holds no key for actor type {kind!r}, so cannot send as {src}"
            )
        return identity

    async def session_for(self, src: str, dst: str) -> OutboundSession | None:
        """The session from ``src``'s identity to ``dst``'s type (opened when there
        is none or it is due for rotation); None when no key is known for the
        type (the message goes unauthenticated; the receiver's policy decides)."""
        if dst.startswith("topic:"):
            return None  # topics: sender keys are not built yet; see docs/security.md
        kind = dst.partition("/")[0]
        signer = self.signer(src)
        now = _now_ms()
        cached = self._outbound.get((signer.kid, kind))
        if cached is not None and cached.fresh(now):
            return cached
        recipient = self.trust.recipient(kind) or await self.trust.fetch_recipient(kind)
        if recipient is None:
            return None
        session = OutboundSession(signer, recipient.subject, now)
        self._outbound[(signer.kid, kind)] = session
        return session

    # -- arriving ------------------------------------------------------------------
    def policy_of(self, declared: str | None) -> Policy:
        if declared is None:
            return self.policy
        if declared not in POLICIES:
            raise ValueError(f"security must be one of {', '.join(POLICIES)}, not {declared!r}")
        return declared  # type: ignore[return-value]

    async def admit(
        self,
        msg: Msg,
        env: Inbound,
        address: str,
        declared: str | None = None,
        *,
        stored_ms: int | None = None,
        redelivered: bool = False,
    ) -> InboundSession | None:
        """Check what arrived for ``address`` before its handler runs (see the
        module docstring); returns the session it came in on (None when it came
        unauthenticated and the policy allows that). AuthError otherwise."""
        policy = self.policy_of(declared)
        if policy == "off":
            return None
        headers = msg.headers or {}
        header = headers.get(SESSION_HEADER)
        if header is None:
            if policy == "require":
                self._refused(address, env, "unauthenticated")
                raise AuthError(f"{address} takes only authenticated messages")
            return None
        try:
            session = await self._session(header, address)
            if env.sealed:  # opening it proves every field of the envelope
                open_content(env, session.keys.forward)
            else:
                check_body(session.keys.forward, msg.data, headers.get(AUTH_HEADER))
            # Genuine from here on: a refusal below is answered on the session, so
            # the sender learns why instead of waiting out its timeout.
            attach_session(env, session)
            if self.trust.is_revoked(session.sender.jti):
                raise AuthError(f"the credential of {session.sender.subject.did:.70} is revoked")
            if not session.sender.may_send_as(env.src):
                raise AuthError(
                    f"the credential of {session.sender.subject.did:.70} does not cover "
                    f"sending as {env.src}"
                )
            if not redelivered:
                self.replays.check(env.id, env.ts, stored_ms)
        except AuthError as err:
            self._refused(address, env, str(err))
            raise
        return session

    async def _session(self, header: str, address: str) -> InboundSession:
        cached = self._inbound.get(header)
        now = _now_ms()
        kind = address.partition("/")[0]
        recipient = self.types.get(kind)
        if recipient is None:
            raise AuthError(f"this system holds no key for actor type {kind!r}")
        sealed_to = header.split(".", 2)[1] if header.count(".") >= 2 else ""
        retired = self._retired.get(sealed_to) if sealed_to != recipient.kid else None
        if retired is not None and retired[0] == kind:  # a session from before a rotation
            recipient = retired[1]
        if cached is not None and cached.expires_ms > now:
            if cached.recipient_kid != recipient.kid:
                raise AuthError(f"session opened for another key than {address}'s")
            return cached
        await self.trust.fetch_signer(session_signer(header))
        session = accept_session(header, recipient, self.trust.signer, now)
        self._inbound[header] = session
        if len(self._inbound) > _INBOUND_CACHE:
            self._inbound.popitem(last=False)
        return session

    async def open_stored(
        self, data: bytes, headers: Mapping[str, str] | None, env: Inbound
    ) -> InboundSession | None:
        """The session of a stored message whose recipient type this system holds
        (its body checked), to open it for history; None when it is not ours to
        open."""
        header = (headers or {}).get(SESSION_HEADER)
        if header is None or env.dst.partition("/")[0] not in self.types:
            return None
        session = await self._session(header, env.dst)
        open_content(env, session.keys.forward)
        return session

    def reply_check(self, session: OutboundSession) -> Callable[[Msg], bool]:
        """The test a caller puts each reply to before taking it: tagged with the
        session's answer key (or the server's no-responders status)."""

        def accept(msg: Msg) -> bool:
            headers = msg.headers
            if not msg.data and headers and headers.get("Status") == _NO_RESPONDERS:
                return True
            try:
                check_answer(msg, session)
            except AuthError as err:
                self.refused += 1
                log.warning("dropped a reply that failed its check: %s", err)
                return False
            return True

        return accept

    def _refused(self, address: str, env: Inbound, why: str) -> None:
        self.refused += 1
        log.warning("%s: refused %s from %s: %s", address, env.id, env.src or "?", why)


def _development_authority(home: Path, ns: str) -> Authority:
    path = home / "authority.key"
    fresh = not path.exists()
    authority = Authority(Identity.load(path), ns)
    if fresh:
        log.warning(
            "security: created a development authority for namespace %s at %s; every "
            "process on this machine that uses it trusts the others. In production keep "
            "the authority offline and give each system its credentials.",
            ns,
            path,
        )
    return authority


def _now_ms() -> int:
    return int(time.time() * 1000)
