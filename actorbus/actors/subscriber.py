"""Subscriptions from outside any actor (``ActorSystem.subscribe``): a topic, or
the system events, delivered to a callback as envelopes.

On a system with security the system itself is a topic listener (its key is in
the topic's sender keys, ``security/topic_keys.py``): a topic message is
checked like an actor's (the sender's signature and right to ``src``, replay,
clock) and opened before the callback sees it; what fails is logged and
counted, never delivered.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actorbus.actors.guard import Guard
from actorbus.actors.pipeline import decode_request
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.wire import SizeLimits

log = logging.getLogger("actorbus.system")
_numbers: Final = itertools.count(1)


async def subscribe(
    nc: NATS,
    subject: str,
    callback: Callable[[Envelope], Awaitable[None]],
    limits: SizeLimits,
    *,
    guard: Guard | None = None,
    topic: str | None = None,
) -> Callable[[], Awaitable[None]]:
    """Deliver what arrives on ``subject`` to ``callback``; with a ``guard`` and a
    ``topic`` (pattern), only what passes its checks, opened. Returns the
    unsubscribe function."""
    listening = guard is not None and topic is not None
    # its own address: two subscriptions of one system each take a message once
    address = f"{guard.system_listener}/{next(_numbers)}" if guard is not None else subject

    async def on_msg(msg: Msg) -> None:
        try:  # the pipeline's decoder: JSON or msgpack, as the sender chose
            inbound = decode_request(msg, subject, limits)
            if listening and guard is not None:
                await guard.admit(msg, inbound, address)
            env = inbound.envelope
        except ActorBusError as err:
            log.warning("subscriber on %s: %s", subject, err)
            return
        try:
            await callback(env)
        except Exception:
            log.exception("subscriber callback on %s failed", subject)

    if listening and guard is not None and topic is not None:
        await guard.listen(topic)  # before the subscription: nothing comes unreadable
    sub = await nc.subscribe(subject, cb=on_msg)

    async def unsubscribe() -> None:
        await sub.unsubscribe()
        if listening and guard is not None and topic is not None:
            await guard.unlisten(topic)

    return unsubscribe
