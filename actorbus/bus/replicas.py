"""Streams and buckets another process made with more replicas than this one asks.

Every process creates the JetStream streams and buckets it needs, each with the
replicas of its own ``DurableSettings``. On a cluster the namespace's hosts run
with three (``--js-replicas 3``); a shell command or a process started without
that asks for one. More copies never keep less, so such a process uses what is
there as it is (said at info level) rather than being refused (a member of a
secured broker may not change a stream) or, where it may, scaling the stream
down. A process that asks for more than a stream has still brings it up to its
settings where it may (``jetstream.create_or_update``).
"""

from __future__ import annotations

import dataclasses
import logging

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

log = logging.getLogger("actorbus.bus")

EXISTS_OTHERWISE = 10058  # "stream name already in use with a different configuration"


async def more_replicas(js: JetStreamContext, stream: str, asked: int) -> int | None:
    """The replicas ``stream`` has when they are more than ``asked`` (else None)."""
    info = await js.stream_info(stream)
    have = info.config.num_replicas or 1
    if have <= asked:
        return None
    log.info(
        "%s is kept on %d replicas; this process asked for %d: it uses it as it is",
        stream,
        have,
        asked,
    )
    return have


async def create_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """``create_key_value``, taking a bucket that exists with more replicas as it
    is; BadRequestError for any other difference, as from ``create_key_value``."""
    try:
        return await js.create_key_value(config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code != EXISTS_OTHERWISE:
            raise
        more = await more_replicas(js, f"KV_{config.bucket}", config.replicas)
        if more is None:
            raise
        return await js.create_key_value(dataclasses.replace(config, replicas=more))
