"""The JetStream layout behind durable delivery.

One stream per actor type holds its durable messages (``actorbus-{ns}-d-{type}``
on ``{ns}.d.{type}.{key}``; its reminders wait in a stream of their own,
``bus/schedules.py``): file storage, a duplicate window keyed by
``Nats-Msg-Id`` (the envelope id), ``max_age`` as the default time to live, R1
locally and R3 on a cluster. A stream per type, not one per namespace, because
JetStream's API names a stream in every subject but a consumer in one token
only: a broker can then grant a member limited to some types the consumers and
acks of those types' streams and nothing else (``security/broker.py``). The
namespace's stream holds dead letters (``{ns}.dlq.{type}.{key}``) with the
reason and the attempt count. Each spawned actor address reads its messages through one durable
pull consumer: explicit acks after the handler succeeded, one message in flight
(``max_ack_pending``) so order per actor holds, and ``ack_wait`` as the time a
handler may take before a crash is assumed and the message goes out again.
Consumers redeliver without limit (``max_deliver=-1``): the readers count the
attempts and dead-letter a message themselves, so the server never drops one
that no reader settled (a crashed or stalled reader). A
lazily hosted type (``register()``) reads ``{ns}.d.{type}.*`` through one
consumer shared by its host processes, ``type_window`` messages in flight, kept in
order per key by the reader.

Expiry is enforced by the readers (``ttl_ms``, else ``max_age``) so that every
expired message is counted (bucket ``actorbus-{ns}-stats``); the stream keeps
messages ``retention_grace`` longer as a storage backstop.

Everything is created idempotently: a second start with the same settings
changes nothing, a start with new settings updates the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    StorageType,
    StreamConfig,
)
from nats.js.kv import KeyValue

from actorbus.bus.replicas import EXISTS_OTHERWISE, create_bucket, more_replicas
from actorbus.bus.requests import NoResponders, RequestMux, RequestTimeout
from actorbus.bus.subjects import Address, Subjects
from actorbus.bus.tasks import backoff_delay
from actorbus.codecs.errors import ActorBusError, StoreUnavailableError

T = TypeVar("T")


@dataclass(frozen=True)
class DurableSettings:
    """How durable delivery behaves; the defaults follow the delivery semantics."""

    replicas: int = 1  # 3 on a cluster
    max_age: float = 24 * 3600.0  # default TTL: older undelivered messages are dropped
    retention_grace: float = 3600.0  # the stream keeps messages this much longer
    duplicate_window: float = 120.0  # seconds within which a repeated id is dropped
    backoff: tuple[float, ...] = (2.0, 4.0, 8.0)  # delays before each retry
    # Seconds without word from a reader before its message is delivered again. A
    # reader keeps the messages it holds in progress (every third of this), so a long
    # turn is not redelivered; this is how soon a crashed reader's messages come back.
    ack_wait: float = 10.0
    max_turn: float = 900.0  # a turn running longer is hung: cancelled, retried (per type)
    dlq_max_age: float = 7 * 24 * 3600.0
    idempotency_ttl: float = 24 * 3600.0  # how long a handled idempotency key is remembered
    keep_topics: bool = False  # also store pub/sub topics, for history and replay
    start_timeout: float = 30.0  # how long an actor retries setting up its queue (failover)
    store_timeout: float = 15.0  # a durable send's default deadline: rides through an election
    type_window: int = 64  # messages in flight for a lazily hosted type (all its keys)
    reader_lease_ttl: float = 3.0  # a lazily hosted type's reader is replaced this fast

    @property
    def max_deliver(self) -> int:
        """The first attempt plus one per backoff step (counted by the readers)."""
        return len(self.backoff) + 1


def stream_name(ns: str, type_: str) -> str:
    """The stream of one actor type's durable messages (type names are valid
    stream-name characters: lowercase letters, digits, '_' and '-')."""
    return f"actorbus-{ns}-d-{type_}"


def legacy_stream_name(ns: str) -> str:
    """The one stream of every type's durable messages that versions before the
    per-type streams kept (``actorbus migrate`` moves its messages)."""
    return f"actorbus-{ns}-durable"


def dlq_stream_name(ns: str) -> str:
    return f"actorbus-{ns}-dlq"


def topics_stream_name(ns: str) -> str:
    return f"actorbus-{ns}-topics"


def idempotency_bucket(ns: str) -> str:
    return f"actorbus-{ns}-handled"


def idempotency_entry(addr: Address, key: str) -> str:
    """A KV key for (address, idempotency key): ``<type>.<hash>``, hashed since KV
    keys allow few characters, under the type so that a secured broker lets only
    the type's hosts write it (``security/broker.py``)."""
    digest = hashlib.sha256(f"{addr}\x00{key}".encode()).hexdigest()
    return f"{addr.type}.{digest}"


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def readers_bucket(ns: str) -> str:
    return f"actorbus-{ns}-readers"


def stats_bucket(ns: str) -> str:
    return f"actorbus-{ns}-stats"


def attempts_bucket(ns: str) -> str:
    return f"actorbus-{ns}-attempts"


def attempts_entry(type_: str, consumer: str, stream_seq: int) -> str:
    """Where the handler starts of one stored message, read by one consumer, are
    counted: under the type, like the handled keys, so only its hosts write it."""
    return f"{type_}.{consumer}.{stream_seq}"


def expired_entry(consumer: str) -> str:
    return f"expired.{consumer}"


def type_consumer_name(type_: str) -> str:
    """The consumer a lazily hosted type's processes share ('*' marks it as such)."""
    return consumer_name(Address(type_, "*"))


def consumer_name(addr: Address) -> str:
    """A durable consumer name for an address (names allow no '.', '/', wildcards)."""
    readable = _UNSAFE.sub("_", f"{addr.type}__{addr.key}")[:64]
    digest = hashlib.sha1(str(addr).encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


@dataclass(frozen=True)
class DurableStores:
    handled: KeyValue  # idempotency keys already handled (outlives any actor process)
    stats: KeyValue  # counters every reader adds to (expired messages)
    attempts: KeyValue  # handler starts of redelivered messages (actors/attempts.py)


class LegacyLayoutError(ActorBusError):
    """The namespace's durable messages are still in the one stream of earlier
    versions; ``actorbus migrate`` moves them to a stream per type."""


def queue_config(subjects: Subjects, type_: str, s: DurableSettings) -> StreamConfig:
    """The stream of one type's durable messages."""
    return StreamConfig(
        name=stream_name(subjects.ns, type_),
        subjects=[subjects.durable_type(type_)],
        storage=StorageType.FILE,
        num_replicas=s.replicas,
        max_age=s.max_age + s.retention_grace,
        duplicate_window=s.duplicate_window,
        discard=DiscardPolicy.OLD,
    )


async def ensure_queue(
    js: JetStreamContext, subjects: Subjects, type_: str, s: DurableSettings, *, host: bool
) -> None:
    """Make one type's durable stream if it is missing. A host (``host=True``)
    also brings an existing one up to its settings. Any sender may make a queue
    (a durable send to a type no host started yet is stored for it), so a sender
    checks an existing one: a stream made to lose messages (a message limit, a
    short age, a copy republished elsewhere) by someone else is refused, loudly."""
    config = queue_config(subjects, type_, s)
    name = config.name or ""
    try:
        have = await patiently(lambda: js.stream_info(name), s.start_timeout)
    except nats.js.errors.NotFoundError:
        have = None
    if have is not None and have.config.allow_msg_schedules:
        raise LegacyLayoutError(
            f"stream {name} was made by an earlier actorbus to take message schedules, "
            "which lets any sender purge a key's messages: run `actorbus migrate "
            f"--namespace {subjects.ns}` (the operator) to move them to a stream made anew"
        )
    if not host and have is not None:
        odd = _unlike(have.config, config)
        if odd:
            raise ActorBusError(
                f"stream {name} holds {type_!r}'s durable messages with settings "
                f"actorbus did not give it ({'; '.join(odd)}): give every process of "
                "the namespace the same DurableSettings, or have an operator remove it"
            )
        return
    await patiently(functools.partial(create_or_update, js, config), s.start_timeout)


def _unlike(have: StreamConfig, want: StreamConfig) -> list[str]:
    """Where an existing queue's settings differ from the ones actorbus gives it:
    every setting that decides what is kept, and whether copies go elsewhere."""
    expected: dict[str, Any] = {
        "subjects": want.subjects,
        "retention": "limits",
        "discard": "old",
        "storage": "file",
        "max_age": want.max_age,
        "duplicate_window": want.duplicate_window,
        **dict.fromkeys(("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size"), -1),
        **dict.fromkeys(("mirror", "sources", "republish", "subject_transform", "sealed"), None),
    }
    odd = []
    for name, value in expected.items():
        got = _plain(getattr(have, name))
        if name.startswith("max_msg") or name == "max_bytes":
            got = -1 if got in (None, 0) else got
        if got != value:
            odd.append(f"{name} {got!r}, not {value!r}")
    if (have.num_replicas or 1) < (want.num_replicas or 1):  # more copies never keep less
        odd.append(f"num_replicas {have.num_replicas!r}, not {want.num_replicas!r}")
    return odd


def _plain(value: Any) -> Any:
    """A setting as plain data: an enum's value; nothing for an empty list or False."""
    value = getattr(value, "value", value)
    return None if value in ([], False) else value


async def ensure_streams(
    js: JetStreamContext, subjects: Subjects, s: DurableSettings
) -> DurableStores:
    """Create or update the namespace's dead-letter (and kept topics) streams and
    the buckets; refuse a namespace still in the legacy layout."""
    legacy = legacy_stream_name(subjects.ns)
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await patiently(lambda: js.stream_info(legacy), s.start_timeout)
        raise LegacyLayoutError(
            f"namespace {subjects.ns!r} still keeps its durable messages in one stream "
            f"({legacy}), as earlier versions did: run `actorbus migrate "
            f"--namespace {subjects.ns}` once (it moves them to a stream per actor type)"
        )
    for config in (
        StreamConfig(
            name=dlq_stream_name(subjects.ns),
            subjects=[subjects.dead_letter_all()],
            storage=StorageType.FILE,
            num_replicas=s.replicas,
            max_age=s.dlq_max_age,
        ),
        *(
            [
                StreamConfig(
                    name=topics_stream_name(subjects.ns),
                    subjects=[subjects.topic_all()],
                    storage=StorageType.FILE,
                    num_replicas=s.replicas,
                    max_age=s.max_age,
                )
            ]
            if s.keep_topics
            else []
        ),
    ):
        await patiently(functools.partial(create_or_update, js, config), s.start_timeout)
    handled = await patiently(
        lambda: create_bucket(
            js,
            KeyValueConfig(
                bucket=idempotency_bucket(subjects.ns),
                ttl=s.idempotency_ttl,
                storage=StorageType.FILE,
                replicas=s.replicas,
            ),
        ),
        s.start_timeout,
    )
    stats = await patiently(
        lambda: create_bucket(
            js,
            KeyValueConfig(
                bucket=stats_bucket(subjects.ns), storage=StorageType.FILE, replicas=s.replicas
            ),
        ),
        s.start_timeout,
    )
    attempts = await patiently(
        lambda: create_bucket(
            js,
            KeyValueConfig(
                bucket=attempts_bucket(subjects.ns),
                ttl=s.max_age + s.retention_grace,  # outlives every message it counts
                storage=StorageType.FILE,
                replicas=s.replicas,
            ),
        ),
        s.start_timeout,
    )
    return DurableStores(handled, stats, attempts)


async def create_or_update(js: JetStreamContext, config: StreamConfig) -> None:
    """Make the stream, or bring the one there to ``config`` where this process may
    (with its replicas kept when they are more: ``bus/replicas.py``)."""
    name = config.name or ""
    try:
        await js.add_stream(config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code == _SUBJECTS_OVERLAP:
            raise ActorBusError(
                f"stream {name} cannot be made: another stream already takes its subjects "
                f"{config.subjects} (one not made by actorbus; an operator must remove it)"
            ) from None
        if exc.err_code != EXISTS_OTHERWISE:
            raise
        more = await more_replicas(js, name, config.num_replicas or 1)
        if more is not None:
            config = dataclasses.replace(config, num_replicas=more)
            with contextlib.suppress(nats.js.errors.BadRequestError):
                await js.add_stream(config)  # the same stream: made already, nothing to do
                return
        try:
            await js.update_stream(config)
        except (nats.js.errors.BadRequestError, nats.errors.TimeoutError) as refused:
            have = await js.stream_info(name)
            why = getattr(refused, "description", None) or "no answer: not allowed to"
            raise ActorBusError(
                f"stream {name} exists with {have.config.num_replicas} replica(s) and "
                f"other settings, and the server refused to change it to "
                f"{config.num_replicas} ({why}): give every process of the "
                "namespace the same DurableSettings (--js-replicas)"
            ) from None


_SUBJECTS_OVERLAP = 10065  # "subjects overlap with an existing stream"
_NO_PEERS = 10005  # "no suitable peers for placement": a node is (re)joining
_NOT_ENABLED = (10039, 10076)  # JetStream not enabled (for the account)


def transient(exc: BaseException) -> bool:
    """A JetStream answer that a cluster settling (a leader election, a node
    rejoining) gives for a few seconds, and that a retry soon gets past."""
    if isinstance(exc, (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError)):
        return True  # the latter: a stream's write found no leader (it is being elected)
    # Some of nats-py's APIErrors (KeyNotFoundError) are made without an err_code.
    code = getattr(exc, "err_code", None)
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        # No code: nobody answered the API (JetStream is off); no retry will help.
        return code is not None and code not in _NOT_ENABLED
    return isinstance(exc, nats.js.errors.APIError) and code == _NO_PEERS


async def patiently(call: Callable[[], Awaitable[T]], timeout: float, what: str = "") -> T:
    """``call()``, tried again with backoff while JetStream answers transiently
    (see :func:`transient`), for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not transient(exc):
                raise
            if time.monotonic() > deadline:
                raise ActorBusError(
                    f"{what or 'JetStream'}: not ready within {timeout:g}s ({exc!r})"
                ) from exc
            attempt += 1
            await asyncio.sleep(backoff_delay(attempt, 0.1, 2.0))


def consumer_config(
    subjects: Subjects, addr: Address, s: DurableSettings, in_flight: int = 1
) -> ConsumerConfig:
    """One message in flight keeps order; an actor with ``concurrency`` N takes N."""
    return ConsumerConfig(
        durable_name=consumer_name(addr),
        filter_subject=subjects.durable(addr),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=s.ack_wait,
        max_deliver=-1,  # the reader dead-letters; the server must never drop one
        max_ack_pending=in_flight,
    )


def type_consumer_config(subjects: Subjects, type_: str, s: DurableSettings) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=type_consumer_name(type_),
        filter_subject=subjects.durable_type(type_),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=s.ack_wait,
        max_deliver=-1,  # the reader dead-letters; the server must never drop one
        max_ack_pending=s.type_window,
    )


async def store_message(
    mux: RequestMux,
    subject: str,
    body: bytes,
    headers: Any,
    what: str,
    timeout: float,
    restore: Callable[[], Awaitable[None]] | None = None,
    stream: str | None = None,
) -> None:
    """Publish into JetStream and wait for its publish-ack, riding through a leader
    election: while no stream leader answers (no responders, a 503, no ack in
    time) the same bytes are sent again, so with the same ``Nats-Msg-Id`` the
    server stores them once, until ``timeout`` runs out.

    No responders at all may also mean the stream is gone (a broker back on a
    fresh store): ``restore`` is then called (once) to make it again.

    With ``stream``, the publish-ack must come from that stream: a stream made by
    someone else to take the subject would otherwise hold the message unnoticed.

    Raises :class:`StoreUnavailableError` (with the last cause) when no attempt
    was confirmed in time, :class:`ActorBusError` when JetStream refused the
    message for good (too large, a wrong expected sequence ...).
    """
    deadline = time.monotonic() + timeout
    attempt, cause = 0, ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise StoreUnavailableError(
                f"JetStream did not confirm storing the message for {what} within "
                f"{timeout:g}s ({attempt} attempt(s); last: {cause}); it may or may not be stored"
            )
        attempt += 1
        try:
            ack = await mux.request(subject, body, headers, min(left, max(0.5, timeout / 4)))
        except RequestTimeout:
            cause = "no publish-ack in time"
            continue  # already waited: send again at once
        except NoResponders:
            cause = "no stream leader answered (no responders)"
            if restore is not None:
                with contextlib.suppress(Exception):  # the store's own retries go on
                    await asyncio.wait_for(restore(), max(0.1, deadline - time.monotonic()))
                restore = None
        else:
            reply = json.loads(ack.data or b"{}")
            error = reply.get("error")
            if error is None:
                if stream is not None and reply.get("stream") != stream:
                    raise ActorBusError(
                        f"the message for {what} was stored in stream {reply.get('stream')!r}, "
                        f"not {stream!r}: a stream not made by actorbus takes its subject "
                        "(an operator must remove it)"
                    )
                return
            if error.get("code") != 503:
                raise ActorBusError(
                    f"JetStream refused the message for {what}: {error.get('description', error)}"
                )
            cause = f"JetStream unavailable: {error.get('description', error)}"
        await asyncio.sleep(min(backoff_delay(attempt, 0.05, 1.0), max(0.0, left)))


async def consumer_gone(js: JetStreamContext, stream: str, consumer: str) -> bool:
    """After a failed fetch: is the consumer gone (an operator deleted it, or the
    broker came back on a fresh store)? False when it is there, or when the
    broker cannot say now (the next fetch tries again)."""
    try:
        await js.consumer_info(stream, consumer)
    except nats.js.errors.NotFoundError:
        return True
    except Exception:  # the broker away: not a reason to make anything again
        return False
    return False


async def withdraw_pulls(psub: JetStreamContext.PullSubscription) -> list[Msg]:
    """End a pull subscription; returns the messages delivered to it that no fetch
    took (each waits for its ``ack_wait`` unless its reader hands it back).

    A fetch can time out on the client a moment before the server lets its pull
    request expire (common under load): until then the server delivers to it,
    so a message handed back at a stop could go straight to the stopping reader
    and wait out ``ack_wait`` while its key's later messages go elsewhere first.
    The server checks a pull request's interest before each delivery, so after
    this no request of this subscription takes anything more.
    """
    with contextlib.suppress(Exception):  # the connection closed: nothing to withdraw
        await psub.unsubscribe()
    try:
        queue = psub._sub._pending_queue  # nats-py has no public way to take them out
    except AttributeError:  # another nats-py: they come back after their ack_wait
        return []
    left: list[Msg] = []
    while not queue.empty():
        msg = queue.get_nowait()
        if not JetStreamContext.is_status_msg(msg):  # a pull's end (408, 404)
            left.append(msg)
    return left
