"""Reading back what was stored: an actor's durable messages, a session, a topic.

History is read through a throwaway JetStream consumer (no acks, removed when
idle) from a sequence number or a point in time, up to what was stored when the
read began, so a replay always ends. Topics are stored only when the namespace
keeps them (``DurableSettings(keep_topics=True)``), in a stream of their own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from actorbus.actors.pipeline import attach_session, decode_stored
from actorbus.bus.jetstream import stream_name, topics_stream_name
from actorbus.bus.subjects import Address
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError, AuthError, DecodeError
from actorbus.telemetry.spans import TRACEPARENT

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime

_BATCH = 256


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
    await rt.durable_ready()
    ns = rt.namespace
    if topic is not None:
        if not rt.durable_settings.keep_topics:
            raise ActorBusError(
                "topics are not stored: use DurableSettings(keep_topics=True) to keep them"
            )
        stream, subject = topics_stream_name(ns), rt.subjects.topic(topic, wildcards=True)
    elif address is not None:
        stream, subject = stream_name(ns), rt.subjects.durable(Address.parse(address))
    else:
        stream, subject = stream_name(ns), rt.subjects.durable_all()
    async for env in _read(rt, stream, subject, since_seq, since):
        if session_id is None or env.context.session_id == session_id:
            yield env


async def _read(
    rt: Runtime,
    stream: str,
    subject: str,
    since_seq: int | None,
    since: dt.datetime | None,
) -> AsyncIterator[Envelope]:
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30.0)
    if since_seq is not None:
        config.deliver_policy, config.opt_start_seq = DeliverPolicy.BY_START_SEQUENCE, since_seq
    elif since is not None:
        config.deliver_policy, config.opt_start_time = DeliverPolicy.BY_START_TIME, since
    else:
        config.deliver_policy = DeliverPolicy.ALL
    info = await rt.js.stream_info(stream)
    last = info.state.last_seq  # read up to what is stored now, so a replay ends
    if not info.state.messages or (since_seq is not None and since_seq > last):
        return
    psub = await rt.js.pull_subscribe(subject, stream=stream, config=config)
    try:
        while True:
            try:
                batch = await psub.fetch(_BATCH, timeout=1.0)
            except nats.errors.TimeoutError:
                return  # nothing (more) matches
            for msg in batch:
                meta = msg.metadata
                try:
                    stored = decode_stored(msg.data, msg.headers, rt.limits)
                    if rt.guard is not None and stored.sealed:  # opened where the key is
                        at = int(meta.timestamp.timestamp() * 1000)  # as it stood when stored
                        opened = await rt.guard.open_stored(msg.data, msg.headers, stored, at)
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
                    yield env
                if meta.sequence.stream >= last or meta.num_pending == 0:
                    return
    finally:  # also when a reader stops early and the connection is gone by then
        with contextlib.suppress(Exception):
            await psub.unsubscribe()
