"""The arriving side of the pipeline for an actor: decode, then open.

What arrives for an address is decoded (``actors/pipeline.py``: the encoding
its headers name, the ttl) and passes the system's security stage (the guard's
checks and sealed content opened, ``security/stage.py``) before a cell, a
durable reader or a virtual actor sees it. A message that fails is answered
with its typed error by ``actors/replies.py``, or logged when nobody waits.
"""

from __future__ import annotations

from nats.aio.msg import Msg

from actorbus.actors.pipeline import decode_request
from actorbus.actors.replies import Replies
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import SizeLimits
from actorbus.security.sealing import refuse_sealed
from actorbus.security.stage import SecurityStage


class Intake:
    """Decoding and admission of one system's arriving messages."""

    def __init__(self, limits: SizeLimits, security: SecurityStage, replies: Replies) -> None:
        self.limits = limits
        self.security = security
        self.replies = replies
        # The open stage is the security stage's own: its checks, the session
        # attached for the answer, sealed content opened (AuthError when anything
        # fails; ``declared``: the actor's own policy). No layer in between: this
        # is every message's path.
        self.admit = security.admit
        # An open bus checks nothing but that nothing came sealed, which decode()
        # does: the hot path then awaits no stage at all.
        self.checks = security.secured

    def decode(self, msg: Msg, address: str) -> Inbound:
        """What arrived for ``address``, or the typed error to answer with (on an
        open bus, sealed content too: nothing here could open it)."""
        env = decode_request(msg, address, self.limits)
        if not self.checks:
            refuse_sealed(env)
        return env

    async def decode_or_answer(
        self, msg: Msg, address: str, declared: str | None = None
    ) -> Inbound | None:
        """decode() and admit(), answering a bad message with its typed error
        instead of raising."""
        env = None
        try:
            env = self.decode(msg, address)
            if self.checks:
                await self.admit(msg, env, address, declared)
        except ActorBusError as err:
            await self.replies.error(msg, err, env, address)  # on its session, if it had one
            return None
        return env
