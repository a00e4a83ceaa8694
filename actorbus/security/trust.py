"""The namespace's credentials, shared in a key-value bucket and checked on arrival.

Every system puts the credentials it holds (its own, and one per actor type it
hosts) into ``actorbus-{ns}-identities``: ``kid.<key id>`` for finding a
signer, ``type.<actor type>`` for finding whom to seal to, ``revoked.<jti>`` for
a credential that must stop working before it expires, ``listens.<actor type>``
for the topics a type listens to (its listening statement, signed with its key:
``security.topic_keys``). Each system mirrors the
bucket in memory, so finding a key costs no round trip.

The bucket needs no protection for integrity: only credentials that verify
against a trusted authority ever enter the mirror, so a forged entry is
ignored (and logged), never used. Deleting entries is denial of service, which
the authenticated broker (per-system permissions) prevents.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from actorbus.bus.bucket_mirror import BucketMirror, latest_only, open_bucket
from actorbus.bus.kvkeys import decode_token, encode_token
from actorbus.bus.subjects import subject_matches
from actorbus.codecs.errors import AuthError
from actorbus.security.credentials import Credential, read_credential
from actorbus.security.identity import PublicIdentity
from actorbus.security.topic_keys import read_listening

log = logging.getLogger("actorbus.security")


def identities_bucket(ns: str) -> str:
    return f"actorbus-{ns}-identities"


class Trust:
    """Checked credentials of one namespace, by key id and by actor type."""

    def __init__(
        self,
        kv: KeyValue,
        ns: str,
        trusted: Mapping[str, PublicIdentity],
        remake: tuple[JetStreamContext, KeyValueConfig],
    ) -> None:
        self.kv = kv
        self._remake = remake  # how to make the bucket again if the broker lost it
        self.namespace = ns
        self.trusted = dict(trusted)
        self._by_kid: dict[str, Credential] = {}
        self._by_type: dict[str, Credential] = {}
        self._revoked: set[str] = set()
        # listener (type or "@kid") -> its topic patterns and the credential that said so
        self._listening: dict[str, tuple[tuple[str, ...], Credential]] = {}
        self._mirror = BucketMirror(kv, self._apply, identities_bucket(ns))

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        ns: str,
        trusted: Mapping[str, PublicIdentity],
        *,
        replicas: int = 1,
        timeout: float = 10.0,
    ) -> Trust:
        description = "actorbus credentials: signers by key id, recipients by type"
        config = latest_only(identities_bucket(ns), replicas, description)
        kv = await open_bucket(js, config)
        trust = cls(kv, ns, trusted, (js, config))
        await trust._mirror.start(timeout)
        return trust

    async def restore_if_lost(self) -> bool:
        """Make the bucket again if the broker lost it (a fresh store), forgetting
        the credentials read from it (revocations are kept); True when it did:
        every system must publish its credentials again."""
        js, config = self._remake
        return await self._mirror.restore_if_lost(js, config, self._forget)

    def _forget(self) -> None:
        self._by_kid.clear()
        self._by_type.clear()
        self._listening.clear()

    async def close(self) -> None:
        await self._mirror.stop()

    def _apply(self, key: str, value: bytes | None, _revision: int, _created: int) -> None:
        family, _, token = key.partition(".")
        name = decode_token(token)
        if family == "revoked":
            if value is not None:
                self._revoked.add(name)
                self._drop_revoked()
            return
        if family == "listens":
            self._apply_listening(name, value)
            return
        table = self._by_kid if family == "kid" else self._by_type if family == "type" else None
        if table is None:
            return
        if value is None:
            table.pop(name, None)
            return
        try:
            cred = self.check(value.decode())
        except (AuthError, UnicodeDecodeError) as exc:
            log.warning(
                "ignoring credential %s in %s: %s", key, identities_bucket(self.namespace), exc
            )
            return
        if family == "kid" and cred.subject.kid != name:
            log.warning("ignoring credential %s: it is for %s", key, cred.subject.kid)
            return
        if family == "type" and not cred.may_receive_for(name):
            log.warning("ignoring credential %s: it does not cover type %s", key, name)
            return
        table[name] = cred

    def _apply_listening(self, listener: str, value: bytes | None) -> None:
        if not value:
            self._listening.pop(listener, None)
            return
        try:
            declared, patterns, cred = read_listening(value, self.check)
        except AuthError as exc:
            log.warning("ignoring the listening statement of %s: %s", listener, exc)
            return
        if declared != listener:
            log.warning("ignoring listens.%s: it is %s's statement", listener, declared)
            return
        self._listening[listener] = (patterns, cred)

    def _drop_revoked(self) -> None:
        for table in (self._by_kid, self._by_type):
            for name in [n for n, c in table.items() if c.jti in self._revoked]:
                del table[name]

    def is_revoked(self, jti: str) -> bool:
        return jti in self._revoked

    def check(self, token: str) -> Credential:
        """A credential, verified against the trusted authorities (AuthError if not)."""
        return read_credential(token, self.trusted, self.namespace, revoked=self._revoked)

    # -- publishing -------------------------------------------------------------
    async def publish(self, token: str, types: Iterable[str] = ()) -> Credential:
        """Put a credential this system holds where others find it: by its key id,
        and as the recipient key of each of ``types``."""
        cred = self.check(token)
        seq = await self.kv.put(f"kid.{encode_token(cred.subject.kid)}", token.encode())
        for type_name in types:
            seq = await self.kv.put(f"type.{encode_token(type_name)}", token.encode())
        await self._mirror.wait_seen(seq)
        return cred

    async def publish_listening(self, listener: str, statement: bytes | None) -> None:
        """Say which topics ``listener`` listens to (its signed statement; None: no
        longer any), so senders seal those topics to it."""
        seq = await self.kv.put(f"listens.{encode_token(listener)}", statement or b"")
        await self._mirror.wait_seen(seq)

    def listeners(self, topic: str) -> dict[str, PublicIdentity]:
        """Who listens to ``topic`` (actor types, and systems as ``@kid``), with the
        key to seal to each: a type's current one, a system's own."""
        found = {}
        now = time.time()
        for listener, (patterns, said_by) in self._listening.items():
            if not any(subject_matches(p, topic) for p in patterns):
                continue
            if listener.startswith("@"):
                if said_by.expires > now and said_by.jti not in self._revoked:
                    found[listener] = said_by.subject
            else:
                cred = self.recipient(listener)
                if cred is not None:
                    found[listener] = cred.subject
        return found

    async def revoke(self, jti: str) -> None:
        """Make a credential stop working everywhere before it expires."""
        seq = await self.kv.put(f"revoked.{encode_token(jti)}", b"1")
        await self._mirror.wait_seen(seq)

    # -- finding ------------------------------------------------------------------
    async def _get(self, key: str, what: str) -> KeyValue.Entry | None:
        """A bucket entry, None if there is none; an AuthError (never a silent
        downgrade to sending unauthenticated) when the bucket cannot be read."""
        try:
            return await self.kv.get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise AuthError(f"cannot look up {what}: {exc!r}") from None

    def signer(self, kid: str) -> Credential:
        """The credential of a signing key (from the mirror); AuthError if there is
        no valid one."""
        cred = self._by_kid.get(kid)
        if cred is None:
            raise AuthError(f"no valid credential for key {kid:.60} in this namespace")
        if cred.expires <= time.time():
            raise AuthError(f"the credential of key {kid:.60} expired")
        return cred

    async def fetch_signer(self, kid: str) -> Credential:
        """``signer``, asking the bucket itself when the mirror has not seen the key
        yet (a system that joined a moment ago)."""
        if kid not in self._by_kid:
            entry = await self._get(f"kid.{encode_token(kid)}", f"the credential of key {kid:.60}")
            if entry is not None and entry.value:
                self._apply(f"kid.{encode_token(kid)}", entry.value, entry.revision or 0, 0)
        return self.signer(kid)

    def recipient(self, type_name: str) -> Credential | None:
        """Whom to seal to for an actor type (None: no credential for it known)."""
        cred = self._by_type.get(type_name)
        if cred is not None and cred.expires <= time.time():
            return None
        return cred

    async def fetch_recipient(self, type_name: str) -> Credential | None:
        if type_name not in self._by_type:
            entry = await self._get(f"type.{encode_token(type_name)}", f"the key of {type_name!r}")
            if entry is not None and entry.value:
                self._apply(f"type.{encode_token(type_name)}", entry.value, 0, 0)
        return self.recipient(type_name)
