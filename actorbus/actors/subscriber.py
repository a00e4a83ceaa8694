"""Subscriptions from outside any actor (``ActorSystem.subscribe``): a topic, or
the system events, delivered to a callback as envelopes.

On a system with security the system itself is a topic listener (its key is in
the topic's sender keys, ``security/topic_keys.py``): a topic message is
checked like an actor's (the sender's signature and right to ``src``, replay,
clock) and opened before the callback sees it; what fails is logged and
counted, never delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg

from actorbus.actors.pipeline import decode_request
from actorbus.bus.transport import Messaging
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.wire import SizeLimits
from actorbus.security.stage import SecurityStage

log = logging.getLogger("actorbus.system")


async def subscribe(
    nc: Messaging,
    subject: str,
    callback: Callable[[Envelope], Awaitable[None]],
    limits: SizeLimits,
    security: SecurityStage,
    *,
    topic: str | None = None,
) -> Callable[[], Awaitable[None]]:
    """Deliver what arrives on ``subject`` to ``callback``; for a ``topic``
    (pattern), only what passes the security stage's checks, opened. Returns the
    unsubscribe function."""
    address = security.subscriber_address(subject)

    async def on_msg(msg: Msg) -> None:
        try:  # the pipeline's decoder: JSON or msgpack, as the sender chose
            inbound = decode_request(msg, subject, limits)
            if topic is not None:  # system events come from the system's own kind
                await security.admit(msg, inbound, address)
            env = inbound.envelope
        except ActorBusError as err:
            log.warning("subscriber on %s: %s", subject, err)
            return
        try:
            await callback(env)
        except Exception:
            log.exception("subscriber callback on %s failed", subject)

    if topic is not None:
        await security.listen(topic)  # before the subscription: nothing comes unreadable
    sub = await nc.subscribe(subject, cb=on_msg)

    async def unsubscribe() -> None:
        await sub.unsubscribe()
        if topic is not None:
            await security.unlisten(topic)

    return unsubscribe
