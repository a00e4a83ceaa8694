"""The topic half of a system's security: sender keys made for what it
publishes, and opened for what its types listen to (``security/topic_keys.py``
has the design).

Sender keys live in the namespace's topic-key bucket, one record per key
(``k.<skid>``), kept ``TOPIC_KEYS_TTL`` so a kept topic's history still opens; a
receiver fetches a record the first time it meets its key and caches the key.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from actorbus.bus.bucket_mirror import latest_only, open_bucket
from actorbus.codecs.errors import AuthError
from actorbus.codecs.inbound import Inbound
from actorbus.security.identity import Identity
from actorbus.security.sealing import open_content
from actorbus.security.topic_keys import (
    SIGNATURE_HEADER,
    TOPIC_HEADER,
    TopicKey,
    TopicSender,
    check_signature,
    open_record,
    parse_topic_header,
)
from actorbus.security.trust import Trust

TOPIC_KEYS_TTL: Final = 7 * 24 * 3600.0  # a kept topic's history opens for this long
_CACHE: Final = 10_000
_TOPIC_PREFIX: Final = "topic:"


def topic_keys_bucket(ns: str) -> str:
    return f"actorbus-{ns}-topic-keys"


class TopicKeys:
    """Sender keys of one system: made (per signer and topic), opened (per key and
    listening type), and the checks a topic message passes with them."""

    def __init__(self, trust: Trust, recipient: Callable[[str, str], Identity]) -> None:
        self.trust = trust
        self._recipient = recipient  # (type, key id sealed to) -> this system's key
        self._js: JetStreamContext | None = None
        self._namespace = ""
        self._kv: KeyValue | None = None
        self._senders: OrderedDict[tuple[str, str], TopicSender] = OrderedDict()
        self._keys: OrderedDict[tuple[str, str], TopicKey] = OrderedDict()

    def keep_in(self, js: JetStreamContext, namespace: str) -> None:
        """Where the records go: the namespace's bucket (opened on first use)."""
        self._js, self._namespace = js, namespace

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            if self._js is None:
                raise AuthError("no JetStream to keep topic keys in")
            config = latest_only(
                topic_keys_bucket(self._namespace),
                1,
                "actorbus sender keys of topics, wrapped to each listening type",
                ttl=TOPIC_KEYS_TTL,
            )
            self._kv = await open_bucket(self._js, config)
        return self._kv

    # -- leaving ----------------------------------------------------------------------
    async def sender(self, signer: Identity, topic: str) -> TopicSender:
        """The sender key ``signer`` seals ``topic`` with: a new one, wrapped to every
        type listening now and stored, when there is none, it is due, or the
        listeners changed."""
        now = _now_ms()
        listeners = self.trust.listeners(topic)
        cached = self._senders.get((signer.kid, topic))
        if cached is not None and cached.fresh(now, listeners):
            return cached
        sender = TopicSender(signer, topic, listeners, now)
        kv = await self._bucket()
        try:
            await kv.put(f"k.{sender.skid}", sender.record)
        except (nats.errors.Error, TimeoutError) as exc:
            raise AuthError(f"cannot store the sender key of topic {topic!r}: {exc!r}") from None
        self._senders[(signer.kid, topic)] = sender
        if len(self._senders) > _CACHE:
            self._senders.popitem(last=False)
        return sender

    # -- arriving ---------------------------------------------------------------------
    async def admit(
        self, body: bytes, headers: Mapping[str, str], env: Inbound, kind: str, at_ms: int
    ) -> TopicKey:
        """Check a topic message for a listener of type ``kind`` (its sender key as it
        stood at ``at_ms``, the signature over ``body``, the signer's right to
        ``src``) and open its content; the sender key. AuthError otherwise."""
        key = await self.key(headers[TOPIC_HEADER], kind, at_ms)
        check_signature(key, body, headers.get(SIGNATURE_HEADER))
        if env.dst != _TOPIC_PREFIX + key.topic:
            raise AuthError(f"sent to {env.dst} under the sender key of topic {key.topic!r}")
        if env.ts > key.expires_ms:
            raise AuthError(f"sent under topic key {key.skid:.30} after it expired")
        if self.trust.is_revoked(key.sender.jti):
            raise AuthError(f"the credential of {key.sender.subject.did:.70} is revoked")
        if not key.sender.may_send_as(env.src):
            raise AuthError(
                f"the credential of {key.sender.subject.did:.70} does not cover "
                f"sending as {env.src}"
            )
        if env.sealed:
            open_content(env, key.aead)
        return key

    async def key(self, header: str, kind: str, at_ms: int) -> TopicKey:
        """The sender key an ``Ab-Topic`` header names, as the type ``kind`` opens
        it (fetched and opened once, then cached)."""
        kid, skid = parse_topic_header(header)
        cached = self._keys.get((skid, kind))
        if cached is not None:
            return cached
        kv = await self._bucket()
        try:
            entry = await kv.get(f"k.{skid}")
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            raise AuthError(f"no topic key {skid:.30} (unknown, or older than kept)") from None
        except (nats.errors.Error, TimeoutError) as exc:
            raise AuthError(f"cannot read topic key {skid:.30}: {exc!r}") from None
        await self.trust.fetch_signer(kid)
        key = open_record(
            entry.value or b"",
            skid,
            kind,
            lambda sealed_to: self._recipient(kind, sealed_to),
            self.trust.signer,
            at_ms,
        )
        if key.sender.subject.kid != kid:
            raise AuthError(f"topic key {skid:.30} is not {kid:.40}'s")
        self._keys[(skid, kind)] = key
        if len(self._keys) > _CACHE:
            self._keys.popitem(last=False)
        return key

    async def open_stored(
        self,
        data: bytes,
        headers: Mapping[str, str],
        env: Inbound,
        kinds: Sequence[str],
        stored_ms: int | None,
    ) -> None:
        """Open a stored topic message (history) with the key of the first of
        ``kinds`` (types this system hosts) it was sealed to; left sealed when
        none was."""
        header = headers.get(TOPIC_HEADER)
        if header is None:
            return
        at = env.ts if stored_ms is None else stored_ms
        for kind in kinds:
            try:
                key = await self.key(header, kind, at)
            except AuthError:
                continue  # not sealed to this type: another one may be
            check_signature(key, data, headers.get(SIGNATURE_HEADER))
            if env.sealed:
                open_content(env, key.aead)
            return


def _now_ms() -> int:
    return int(time.time() * 1000)
