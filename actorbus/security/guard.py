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

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actorbus.bus.subjects import validate_type
from actorbus.codecs.errors import AuthError, InvalidAddressError, StateError
from actorbus.codecs.inbound import Inbound
from actorbus.security.credentials import Authority, Credential, client_address
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.issued import (
    SYSTEM,
    TRUSTED_FILE,
    issued as issued_home,
    load as load_issued,
    read_trusted,
)
from actorbus.security.replay import ReplayWindow
from actorbus.security.resent import stamped_at
from actorbus.security.sealing import attach_session, check_answer, open_content, refuse_sealed
from actorbus.security.sessions import (
    AUTH_HEADER,
    SESSION_HEADER,
    InboundSession,
    OutboundSession,
    accept_session,
    check_body,
    session_signer,
)
from actorbus.security.settings import POLICIES, Policy, SecuritySettings, default_home
from actorbus.security.stage import ReplyCheck, subscriber_numbers
from actorbus.security.topic_guard import TopicKeys
from actorbus.security.topic_keys import (
    TOPIC_HEADER,
    TopicSender,
    listening_statement,
    system_listener,
)
from actorbus.security.trust import Trust

log = logging.getLogger("actorbus.security")

_INBOUND_CACHE: Final = 10_000
_NO_RESPONDERS: Final = "503"
_TOPIC_PREFIX: Final = "topic:"


class Guard:
    """Identities, credentials, sessions and the replay window of one system: the
    security stage of a secured system (``security/stage.py``)."""

    secured = True

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
        self._listening: dict[str, tuple[str, ...]] = {}  # hosted type -> its topic patterns
        self._tokens: dict[str, str] = {}  # hosted type -> its credential (published again)
        self._at_home: dict[str, Identity | None] = {}  # keys of types hosted elsewhere
        self._system_token = ""  # this system's credential
        self._system_topics: list[str] = []  # patterns of its raw subscriptions, one per
        self.topics = TopicKeys(trust, self._recipient)

    @property
    def seals(self) -> bool:
        return self.settings.seal

    @property
    def identity(self) -> PublicIdentity:
        return self.system.public

    def sender_address(self, system_id: str) -> str:
        """Bound to the system's key, so that no other member's credential covers it."""
        return client_address(self.system.kid)

    def subscriber_address(self, subject: str) -> str:
        """Two subscriptions of one system each take a topic message once."""
        return f"{self.system_listener}/{next(subscriber_numbers)}"

    def state_key(self, type_name: str) -> PublicIdentity:
        held = self.types.get(type_name)
        if held is None:
            raise StateError(
                f"{type_name}: its state would be sealed to the type's key, which this "
                "system does not hold (it does not host the type)"
            )
        return held.public

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
            guard.topics.keep_in(js, ns)
            await trust.publish(token)
            guard._system_token = token
            return guard
        authority = settings.authority or _development_authority(home, ns)
        trusted = {authority.public.did: authority.public}
        trusted.update({p.did: p for p in settings.trusted})
        trust = await Trust.open(js, ns, trusted)
        guard = cls(settings, trust, Identity.generate(), home)
        guard._authority = authority
        guard.topics.keep_in(js, ns)
        guard._system_token = authority.issue(guard.system.public)
        await trust.publish(guard._system_token)
        return guard

    async def close(self) -> None:
        if self._system_topics:  # its raw subscriptions end with it
            with contextlib.suppress(Exception):
                await self.trust.publish_listening(system_listener(self.system.kid), None)
        await self.trust.close()

    async def host_type(self, type_name: str, topics: Sequence[str] = ()) -> None:
        """Hold the identity of an actor type this system hosts, and publish its
        credential, so messages sealed to the type open here; and say which
        ``topics`` (patterns) it listens to, so they are sealed to it too."""
        if type_name in self.types:
            return
        hosts = self.settings.hosts
        if hosts is not None and type_name not in hosts:
            raise AuthError(
                f"this system said it hosts {', '.join(hosts) or 'no actor types'} "
                f"(SecuritySettings.hosts), so its broker user may not take {type_name!r}'s "
                "messages: add the type there (or to `actorbus run`'s list)"
            )
        if self._authority is None:  # issued offline: the type's own files
            identity, token = load_issued(self.home, f"types/{type_name}")
        else:
            identity = Identity.load(self.home / "types" / f"{type_name}.key")
            token = self._authority.issue(identity.public, [type_name])
        published = self.trust.recipient(type_name) or await self.trust.fetch_recipient(type_name)
        if published is not None and published.subject.kid != identity.kid:
            log.warning(
                "%s is published with key %.60s and this system holds %.60s: hosts of one type "
                "need one key, or each refuses what was sealed to the other's. Issue every "
                "deployment of the type from the same authority (it hands out its "
                "types/%s.key); this host's key is published now",
                type_name,
                published.subject.kid,
                identity.kid,
                type_name,
            )
        await self.trust.publish(token, types=[type_name])
        self.types[type_name] = identity
        self._tokens[type_name] = token
        if topics:
            self._listening[type_name] = tuple(topics)
            await self._say_listening(type_name, identity, token)

    async def _say_listening(self, type_name: str, identity: Identity, token: str) -> None:
        statement = listening_statement(identity, token, type_name, self._listening[type_name])
        await self.trust.publish_listening(type_name, statement)

    @property
    def system_listener(self) -> str:
        """This system's name as a topic listener (``ActorSystem.subscribe``)."""
        return system_listener(self.system.kid)

    async def listen(self, pattern: str) -> None:
        """This system subscribes to ``pattern`` itself: topics it matches are
        sealed to it too."""
        self._system_topics.append(pattern)
        await self._say_system_listening()

    async def unlisten(self, pattern: str) -> None:
        with contextlib.suppress(ValueError):
            self._system_topics.remove(pattern)
        await self._say_system_listening()

    async def _say_system_listening(self) -> None:
        listener = self.system_listener
        statement = None
        if self._system_topics:
            statement = listening_statement(
                self.system, self._system_token, listener, self._system_topics
            )
        await self.trust.publish_listening(listener, statement)

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
            token = self._authority.issue(fresh.public)
            await self.trust.publish(token)
            if self._system_topics:  # its subscriptions move to the new key
                await self.trust.publish_listening(self.system_listener, None)
            self.system, self._system_token = fresh, token
            if self._system_topics:
                await self._say_system_listening()
            return fresh
        old = self.types.get(type_name)
        if old is None:
            raise ValueError(f"this system does not host actor type {type_name!r}")
        fresh = Identity.generate()
        fresh.save(self.home / "types" / f"{type_name}.key")
        token = self._authority.issue(fresh.public, [type_name])
        await self.trust.publish(token, types=[type_name])
        self._retired[old.kid] = (type_name, old)
        self.types[type_name] = fresh
        self._tokens[type_name] = token
        if type_name in self._listening:  # topic keys are sealed to the new key from now on
            await self._say_listening(type_name, fresh, token)
        return fresh

    async def restore_if_lost(self) -> None:
        """After the broker lost its store: the credentials bucket made again, and
        this system's credentials and listening statements published again (other
        systems could not check its messages, nor it theirs, until they are)."""
        if not await self.trust.restore_if_lost():
            return
        await self.trust.publish(self._system_token)
        for type_name, token in self._tokens.items():
            await self.trust.publish(token, types=[type_name])
            if type_name in self._listening:
                await self._say_listening(type_name, self.types[type_name], token)
        if self._system_topics:
            await self._say_system_listening()

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

    async def session_for(
        self, src: str, dst: str, *, provision: bool = False
    ) -> OutboundSession | None:
        """The session from ``src``'s identity to ``dst``'s type (opened when there
        is none or it is due for rotation); None when no key is known for the
        type (the message goes unauthenticated; the receiver's policy decides).
        ``provision``: for a message queued for a type nobody hosted yet."""
        kind = dst.partition("/")[0]
        signer = self.signer(src)
        now = _now_ms()
        cached = self._outbound.get((signer.kid, kind))
        if cached is not None and cached.fresh(now):
            return cached
        recipient = self.trust.recipient(kind) or await self.trust.fetch_recipient(kind)
        if recipient is None and provision:
            recipient = await self._provision(kind)
        if recipient is None:
            return None
        session = OutboundSession(signer, recipient.subject, now)
        self._outbound[(signer.kid, kind)] = session
        return session

    async def _provision(self, kind: str) -> Credential | None:
        """A type nobody hosted yet has no published key, so a message queued for
        it could not be sealed and its receiver would refuse it. With the
        namespace's authority at hand (development), make the type's identity
        in the shared home, as its first host would, and publish its credential."""
        if self._authority is None:
            return None
        identity = Identity.load(self.home / "types" / f"{kind}.key")
        token = self._authority.issue(identity.public, [kind])
        return await self.trust.publish(token, types=[kind])

    async def topic_sender(self, src: str, topic: str) -> TopicSender:
        """The sender key ``src``'s identity seals ``topic`` with (``TopicKeys.sender``)."""
        return await self.topics.sender(self.signer(src), topic)

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
        stored_at: str | None = None,
    ) -> InboundSession | None:
        """Check what arrived for ``address`` before its handler runs (see the
        module docstring) and open its content; returns the session it came in on
        (None when it came unauthenticated and the policy allows that, or on a
        topic). ``stored_at``: a stored message's stream and sequence. AuthError
        otherwise."""
        policy = self.policy if declared is None else self.policy_of(declared)
        if policy == "off":
            refuse_sealed(env)
            return None
        headers = msg.headers if msg.headers is not None else {}  # never parsed to ask
        if env.dst.startswith(_TOPIC_PREFIX):
            await self._admit_topic(
                msg.data, headers, env, address, policy, stored_ms, redelivered, stored_at
            )
            return None
        header = headers.get(SESSION_HEADER)
        if header is None:
            if policy == "require":
                self._refused(address, env, "unauthenticated")
                raise AuthError(f"{address} takes only authenticated messages")
            refuse_sealed(env)
            return None
        try:
            now = _now_ms() if stored_ms is None else stored_ms
            session = self._accepted(header, address, now) or await self._session(
                header, address, stored_ms
            )
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
            if not redelivered:  # a resent one is checked by when it was resent
                taken_as, stamped = stamped_at(env.id, env.ts, headers, session.sender.subject)
                self.replays.check(taken_as, stamped, now, stored_at)
        except AuthError as err:
            self._refused(address, env, str(err))
            raise
        return session

    def held_key(self, kid: str) -> Identity | None:
        """This system's identity with key id ``kid`` (one retired by a rotation too)."""
        held = [self.system, *self.types.values(), *(old for _, old in self._retired.values())]
        return next((identity for identity in held if identity.kid == kid), None)

    def _accepted(self, header: str, address: str, now: int) -> InboundSession | None:
        """The unexpired session ``header`` opened, accepted already for the current
        key of ``address``'s type (every message but a session's first, with no
        coroutine); None leaves the rest to :meth:`_session`."""
        session = self._inbound.get(header)
        held = self.types.get(address.partition("/")[0])
        if session is None or held is None or held.kid != session.recipient_kid:
            return None
        return session if session.expires_ms > now else None

    async def _session(
        self,
        header: str,
        address: str,
        stored_ms: int | None = None,
        recipient: Identity | None = None,
    ) -> InboundSession:
        """The session ``header`` opened to ``address``'s type, as it stood when the
        message was sent: for a stored one, when the server stored it (a backlog
        read after its session ended is still genuine)."""
        cached = self._inbound.get(header)
        now = _now_ms() if stored_ms is None else stored_ms
        kind = address.partition("/")[0]
        if recipient is None:
            sealed_to = header.split(".", 2)[1] if header.count(".") >= 2 else ""
            recipient = self._recipient(kind, sealed_to)
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

    def _recipient(self, kind: str, sealed_to: str) -> Identity:
        """This system's key of actor type ``kind`` that something was sealed to
        (``sealed_to``, a key id): the current one, or one retired by a rotation."""
        if kind.startswith("@"):  # the system itself, for its raw subscriptions
            if kind != self.system_listener:
                raise AuthError(f"sealed to system {kind[1:]:.40}, not to this one")
            return self.system
        recipient = self.types.get(kind)
        if recipient is None:
            raise AuthError(f"this system holds no key for actor type {kind!r}")
        if sealed_to in ("", recipient.kid):  # (a malformed header: the session check says so)
            return recipient
        retired = self._retired.get(sealed_to)
        if retired is not None and retired[0] == kind:  # sealed before a rotation
            return retired[1]
        raise AuthError(
            f"sealed to key {sealed_to:.60} of {kind!r}, and this system holds "
            f"{recipient.kid:.60}: another host of the type has a key of its own (issue every "
            f"deployment of {kind!r} from the same authority, which hands out its "
            f"types/{kind}.key) or rotated it (restart this host to take the new one)"
        )

    async def _admit_topic(
        self,
        body: bytes,
        headers: Mapping[str, str],
        env: Inbound,
        address: str,
        policy: Policy,
        stored_ms: int | None,
        redelivered: bool,
        stored_at: str | None,
    ) -> None:
        """A topic message: its sender key and signature (``TopicKeys.admit``),
        replay and clock; then its content opened."""
        if headers.get(TOPIC_HEADER) is None:
            if policy == "require":
                self._refused(address, env, "unauthenticated")
                raise AuthError(f"{address} takes only authenticated messages")
            refuse_sealed(env)
            return
        try:
            at = env.ts if stored_ms is None else stored_ms  # its key as it stood then
            key = await self.topics.admit(body, headers, env, address.partition("/")[0], at)
            if not redelivered:  # every subscriber takes it once: the id is per address
                taken_as, stamped = stamped_at(env.id, env.ts, headers, key.sender.subject)
                self.replays.check(f"{taken_as}@{address}", stamped, stored_ms, stored_at)
        except AuthError as err:
            self._refused(address, env, str(err))
            raise

    async def open_stored(
        self,
        data: bytes,
        headers: Mapping[str, str] | None,
        env: Inbound,
        stored_ms: int | None = None,
    ) -> InboundSession | None:
        """Open a stored message whose recipient type this system holds (its body
        checked), for history, as it stood when stored (``stored_ms``). Returns
        its session for the caller to open the content with (a topic message is
        opened here, and None returned); None as well when it is not ours to
        open."""
        headers = headers or {}
        if env.dst.startswith(_TOPIC_PREFIX):
            await self.topics.open_stored(data, headers, env, list(self.types), stored_ms)
            return None
        header = headers.get(SESSION_HEADER)
        kind = env.dst.partition("/")[0]
        if header is None:
            return None
        if kind in self.types:
            session = await self._session(header, env.dst, stored_ms)
        else:
            key = self._key_at_home(kind)
            if key is None:
                return None
            session = await self._session(header, env.dst, stored_ms, key)
        open_content(env, session.keys.forward)
        return session

    def reading_key(self, type_name: str, kid: str) -> Identity | None:
        """The key ``kid`` of ``type_name``, to open what was sealed to it: one this
        system holds, else one this machine's home holds (``actorbus state get``
        where the type's hosts run)."""
        held = self.held_key(kid)
        if held is not None:
            return held
        at_home = self._key_at_home(type_name)
        return at_home if at_home is not None and at_home.kid == kid else None

    def _key_at_home(self, kind: str) -> Identity | None:
        """The key of an actor type this system does not host, when this machine's
        home holds it (its hosts run here): what history opens stored messages
        with. Never made here: a reader is no host."""
        if kind not in self._at_home:  # read once: history opens many messages of a type
            try:
                validate_type(kind)  # a stored envelope's dst names no path of its own
                self._at_home[kind] = Identity.load(
                    self.home / "types" / f"{kind}.key", create=False
                )
            except (InvalidAddressError, FileNotFoundError):
                self._at_home[kind] = None
        return self._at_home[kind]

    def reply_check(self, session: OutboundSession | None) -> ReplyCheck | None:
        """The test a caller puts each reply to before taking it: tagged with the
        session's answer key (or the server's no-responders status). None for a
        request that went without a session: the answer comes without one."""
        if session is None:
            return None

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
    try:
        identity, fresh = Identity.load(path, create=False), False
    except FileNotFoundError:
        # made here unless another process starting at the same time made it first:
        # then that one is the authority, and that one says so
        identity = Identity.generate()
        fresh = identity.save(path, exclusive=True)
        if not fresh:
            identity = Identity.load(path, create=False)
    authority = Authority(identity, ns)
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
