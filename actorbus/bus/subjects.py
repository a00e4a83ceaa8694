"""The subject scheme: how addresses, topics and system events map onto NATS subjects.

All subjects of one system start with its namespace, so two systems can share
one NATS server (or account) without crosstalk::

    {ns}.a.{type}.{key}     direct address "type/key" (replicas share a queue group)
    {ns}.any.{type}         anycast: any one instance of the type (queue group)
    {ns}.t.{topic}          pub/sub topic; topics are dot-separated, subscriptions
                            may use NATS wildcards: "orders.*", "orders.>"
    {ns}.d.{type}.{key}     durable messages to "type/key" (JetStream, at least once)
    {ns}.dlq.{type}.{key}   dead letters of "type/key" (JetStream)
    {ns}.sys.{event}        system events (actor failures, lifecycle)
    {ns}.ctl.cancel         stream cancellations (every system listens)

The namespace defaults to ``ab``; it is a single token of letters, digits, ``_``
and ``-``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from actorbus.codecs.errors import InvalidAddressError

_NS_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127}$")
_BAD_KEY_CHARS = re.compile(r"[\s.*>]")
_TOPIC_TOKEN_RE = re.compile(r"^[A-Za-z0-9_:@=+-]{1,128}$")


@dataclass(frozen=True, slots=True)
class Address:
    """An actor address: ``type/key`` for one actor, ``type`` for any instance."""

    type: str
    key: str | None = None

    @classmethod
    def parse(cls, text: str) -> Address:
        if not isinstance(text, str) or not text:
            raise InvalidAddressError(f"an address must be a non-empty string, got {text!r}")
        type_, sep, key = text.partition("/")
        validate_type(type_, text)
        if sep:
            validate_key(key, text)
            return cls(type_, key)
        return cls(type_)

    def __str__(self) -> str:
        return self.type if self.key is None else f"{self.type}/{self.key}"

    @property
    def is_anycast(self) -> bool:
        return self.key is None


def validate_type(type_: str, where: str | None = None) -> None:
    if not _TYPE_RE.match(type_):
        raise InvalidAddressError(
            f"invalid actor type {type_!r} in {where or type_!r}: use lowercase letters, "
            "digits, '_' and '-' (max 128)"
        )


def validate_key(key: str, where: str | None = None) -> None:
    if not key or len(key) > 256 or _BAD_KEY_CHARS.search(key):
        raise InvalidAddressError(
            f"invalid actor key {key!r} in {where or key!r}: 1-256 characters, "
            "no whitespace, '.', '*' or '>'"
        )


def bare_type_key(session_id: str | None, by_session: bool) -> str:
    """The key of the actor a message to a bare type address reaches when its
    sender must name one (a durable message: its queue is per actor): the
    session's own for a type keyed by session, else ``default``, where a host
    sends an ask to the bare type when no instance of it is active."""
    return session_key(session_id) if by_session and session_id else "default"


def session_key(session_id: str) -> str:
    """The actor key of a session (a conversation keyed by it): the id itself when
    it is a valid key, else a digest of it (a session id is the caller's text)."""
    try:
        validate_key(session_id)
    except InvalidAddressError:
        return "s-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]
    return session_id


def validate_namespace(ns: str) -> str:
    if not _NS_RE.match(ns):
        raise InvalidAddressError(
            f"invalid namespace {ns!r}: one token of letters, digits, '_' or '-'"
        )
    return ns


def validate_topic(topic: str, *, wildcards: bool) -> str:
    tokens = topic.split(".") if isinstance(topic, str) else []
    for i, tok in enumerate(tokens):
        if wildcards and (tok == "*" or (tok == ">" and i == len(tokens) - 1)):
            continue
        if not _TOPIC_TOKEN_RE.match(tok):
            kind = "topic pattern" if wildcards else "topic (no wildcards when publishing)"
            raise InvalidAddressError(
                f"invalid {kind} {topic!r}: dot-separated tokens of letters, digits and _:@=+-"
                + (", '*' for one token, '>' last for the rest" if wildcards else "")
            )
    if not tokens:
        raise InvalidAddressError(f"invalid topic {topic!r}")
    return topic


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: in ``pattern``, ``*`` is one token and a final
    ``>`` one or more (as nats-server routes, and as topic keys are granted)."""
    return tokens_match(tuple(pattern.split(".")), subject.split("."))


def tokens_match(want: tuple[str, ...], have: list[str]) -> bool:
    """:func:`subject_matches` on subjects already split into tokens."""
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


@dataclass(frozen=True, slots=True)
class Subjects:
    """Subject builder for one namespace."""

    ns: str = "ab"

    def __post_init__(self) -> None:
        validate_namespace(self.ns)

    def direct(self, addr: Address) -> str:
        if addr.key is None:
            return self.anycast(addr.type)
        return f"{self.ns}.a.{addr.type}.{addr.key}"

    def direct_all(self, type_: str) -> str:
        """Every key of a type: the subscription of a process that activates lazily."""
        return f"{self.ns}.a.{type_}.*"

    def anycast(self, type_: str) -> str:
        return f"{self.ns}.any.{type_}"

    def durable(self, addr: Address) -> str:
        """Where durable messages to one address are stored (JetStream)."""
        return f"{self.ns}.d.{addr.type}.{addr.key}"

    def durable_type(self, type_: str) -> str:
        return f"{self.ns}.d.{type_}.*"

    def durable_all(self) -> str:
        return f"{self.ns}.d.>"

    def reminders_type(self, type_: str) -> str:
        """Everything in a type's reminder stream: its schedules and their firings."""
        return f"{self.ns}.rem.{type_}.>"

    def reminder(self, addr: Address, name: str) -> str:
        """Where the schedule of one reminder is kept (the server fires it when due)."""
        return f"{self.ns}.rem.{addr.type}.{addr.key}.{name}"

    def reminders_of(self, addr: Address | str) -> str:
        """The schedules of one address's reminders (or a type's, given its name)."""
        if isinstance(addr, str):
            return f"{self.ns}.rem.{addr}.*.*"
        return f"{self.ns}.rem.{addr.type}.{addr.key}.*"

    def fired(self, addr: Address) -> str:
        """Where the server puts a firing of one of ``addr``'s reminders."""
        return f"{self.ns}.rem.{addr.type}.{addr.key}"

    def fired_type(self, type_: str) -> str:
        return f"{self.ns}.rem.{type_}.*"

    def reminder_type_of(self, subject: str) -> str | None:
        """The actor type whose reminder stream takes ``subject`` (None: none)."""
        prefix = f"{self.ns}.rem."
        if not subject.startswith(prefix):
            return None
        return subject[len(prefix) :].partition(".")[0]

    def durable_type_of(self, subject: str) -> str | None:
        """The actor type a durable subject stores for (None: not a durable one)."""
        prefix = f"{self.ns}.d."
        if not subject.startswith(prefix):
            return None
        return subject[len(prefix) :].partition(".")[0]

    def dead_letter(self, addr: Address) -> str:
        return f"{self.ns}.dlq.{addr.type}.{addr.key}"

    def dead_letter_all(self) -> str:
        return f"{self.ns}.dlq.>"

    def queue(self, addr: Address) -> str:
        """The queue group for replicas of one address (or of a type, for anycast)."""
        return f"{self.ns}.q.{addr}".replace("/", ".")

    def lazy_queue(self, type_: str) -> str:
        return f"{self.ns}.lazy.{type_}"

    def topic(self, topic: str, *, wildcards: bool = False) -> str:
        return f"{self.ns}.t.{validate_topic(topic, wildcards=wildcards)}"

    def topic_all(self) -> str:
        return f"{self.ns}.t.>"

    def topic_of(self, subject: str) -> str:
        return subject[len(self.ns) + 3 :]

    def system(self, event: str) -> str:
        return f"{self.ns}.sys.{event}"

    def control(self, name: str) -> str:
        return f"{self.ns}.ctl.{name}"

    def host(self, system_id: str, addr: Address) -> str:
        """Where a process takes messages forwarded to the keyed actors it hosts."""
        return f"{self.ns}.h.{system_id}.{addr.type}.{addr.key}"

    def host_all(self, system_id: str) -> str:
        return f"{self.ns}.h.{system_id}.*.*"

    def key_of(self, subject: str) -> str:
        """The key token of a direct subject."""
        return subject.rsplit(".", 1)[1]
