"""Reading back what was stored: an actor's durable messages, a session, a topic.

History is read through a throwaway JetStream consumer (no acks, removed when
idle) from a sequence number or a point in time, up to what was stored when the
read began, so a replay always ends. Topics are stored only when the namespace
keeps them (``DurableSettings(keep_topics=True)``), in a stream of their own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from actorbus.actors.pipeline import decode_stored
from actorbus.bus.jetstream import stream_name, topics_stream_name
from actorbus.bus.subjects import Address
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError, AuthError, DecodeError
from actorbus.security.sealing import attach_session
from actorbus.telemetry import spans
from actorbus.telemetry.spans import TRACEPARENT

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime

_BATCH = 256
_PAGE = 256  # streams a JetStream listing answers with at most


async def read_history(
    rt: Runtime,
    *,
    address: str | None = None,
    session_id: str | None = None,
    topic: str | None = None,
    since_seq: int | None = None,
    since: dt.datetime | None = None,
) -> AsyncIterator[Envelope]:
    if sum(x is not None for x in (address, session_id, topic)) != 1:
        raise ValueError("give exactly one of address=, session_id= or topic=")
    await rt.durable.ready()
    ns = rt.namespace
    if topic is not None:
        if not rt.durable_settings.keep_topics:
            raise ActorBusError(
                "topics are not stored: use DurableSettings(keep_topics=True) to keep them"
            )
        stream, subject = topics_stream_name(ns), rt.subjects.topic(topic, wildcards=True)
    elif address is not None:
        addr = Address.parse(address)
        stream, subject = stream_name(ns, addr.type), rt.subjects.durable(addr)
    else:  # a session's messages, in every type's stream, merged by the time stored
        async for env in _session(rt, session_id or "", since_seq, since):
            yield env
        return
    async for _, env in _read(rt, stream, subject, since_seq, since):
        yield env


async def _session(
    rt: Runtime, session_id: str, since_seq: int | None, since: dt.datetime | None
) -> AsyncIterator[Envelope]:
    """A session's messages from every type's durable stream, oldest first
    (``since_seq`` is per stream: each is read from there)."""
    found: list[tuple[float, int, Envelope]] = []
    for i, stream in enumerate(await _type_streams(rt)):
        async for at, env in _read(rt, stream, rt.subjects.durable_all(), since_seq, since):
            if env.context.session_id == session_id:
                found.append((at, i, env))
    for _, _, env in sorted(found, key=lambda f: (f[0], f[1])):
        yield env


async def _type_streams(rt: Runtime) -> list[str]:
    """The names of the namespace's per-type durable streams."""
    prefix = stream_name(rt.namespace, "")
    names: list[str] = []
    while True:
        page = await rt.js.streams_info(offset=len(names))
        names += [i.config.name or "" for i in page]
        if len(page) < _PAGE:
            return sorted(n for n in names if n.startswith(prefix))


async def _read(
    rt: Runtime,
    stream: str,
    subject: str,
    since_seq: int | None,
    since: dt.datetime | None,
) -> AsyncIterator[tuple[float, Envelope]]:
    """The envelopes stored on ``subject``, with the time each was stored."""
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30.0)
    if since_seq is not None:
        config.deliver_policy, config.opt_start_seq = DeliverPolicy.BY_START_SEQUENCE, since_seq
    elif since is not None:
        config.deliver_policy, config.opt_start_time = DeliverPolicy.BY_START_TIME, since
    else:
        config.deliver_policy = DeliverPolicy.ALL
    try:
        info = await rt.js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return  # nothing was ever sent to the type
    last = info.state.last_seq  # read up to what is stored now, so a replay ends
    if not info.state.messages or (since_seq is not None and since_seq > last):
        return
    psub = await rt.js.pull_subscribe(subject, stream=stream, config=config)
    try:
        if not (await psub.consumer_info()).num_pending:
            return  # nothing matches: no need to wait out a pull
        while True:
            try:
                batch = await psub.fetch(_BATCH, timeout=1.0)
            except TimeoutError:  # nats' own, or asyncio's when a pull expires at its deadline
                return  # nothing (more) matches
            for msg in batch:
                meta = msg.metadata
                try:
                    stored = decode_stored(msg.data, msg.headers, rt.limits)
                    if stored.sealed:  # opened where the key is
                        at = int(meta.timestamp.timestamp() * 1000)  # as it stood when stored
                        opened = await rt.security.open_stored(msg.data, msg.headers, stored, at)
                        if opened is not None:
                            attach_session(stored, opened)
                    env: Envelope | None = stored.envelope
                except (DecodeError, AuthError):
                    env = None  # not an envelope, or not genuine: history shows envelopes
                if env is not None:
                    parent = msg.headers.get(TRACEPARENT) if msg.headers else None
                    if parent:  # kept, so a replay's spans can link to the original
                        env = env.model_copy(
                            update={"meta": env.meta.model_copy(update={"traceparent": parent})}
                        )
                    yield meta.timestamp.timestamp(), env
                if meta.sequence.stream >= last or meta.num_pending == 0:
                    return
    finally:  # also when a reader stops early and the connection is gone by then
        with contextlib.suppress(Exception):
            await psub.unsubscribe()


async def rerun(
    tell: Callable[..., Awaitable[None]],
    messages: AsyncIterator[Envelope],
    address: str,
    tracing: bool,
) -> int:
    """Send stored messages again to ``address`` with ``tell`` (a system's), durably,
    in order, each once (see ``ActorSystem.rerun``); each send's span links the
    trace it was first sent in."""
    sent = 0
    seen: set[str] = set()
    async for env in messages:
        if env.id in seen:
            continue
        seen.add(env.id)
        extra = env.meta.model_extra or {}
        token = spans.replay_of.set(extra.get("traceparent")) if tracing else None
        try:
            await tell(
                address,
                env.content,
                intent=env.intent,
                session_id=env.context.session_id,
                idempotency_key=env.context.idempotency_key,
                durable=True,
            )
        finally:
            if token is not None:
                spans.replay_of.reset(token)
        sent += 1
    return sent
