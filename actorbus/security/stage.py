"""Security as a stage of the message pipeline: what the actor runtime asks of it.

A system opens with one stage and keeps it: the guard (``security/guard.py``),
which authenticates and seals every message, or :class:`NoSecurity` on an open
bus, which answers every question with "nothing to do". The runtime calls the
stage at the pipeline's two security points (seal when a message leaves, open
when one arrives) and never asks which of the two it holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

from nats.aio.msg import Msg

from actorbus.codecs.inbound import Inbound
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.sealing import refuse_sealed
from actorbus.security.sessions import InboundSession, OutboundSession
from actorbus.security.topic_keys import TopicSender

# The test a caller puts each reply to before taking it (False: dropped, the real
# one still awaited).
ReplyCheck = Callable[[Msg], bool]

subscriber_numbers: Final = itertools.count(1)  # each outside subscription its own address


class SecurityStage(Protocol):
    """End-to-end security as the runtime sees it (see the module docstring)."""

    @property
    def secured(self) -> bool:
        """Whether messages are authenticated (what services report and pick
        their own defaults by)."""
        ...

    @property
    def seals(self) -> bool:
        """Whether content on a session is sealed, not only authenticated."""
        ...

    @property
    def identity(self) -> PublicIdentity | None:
        """The system's own public identity (None: it has none)."""
        ...

    def sender_address(self, system_id: str) -> str:
        """The ``src`` of the system's own sends (outside any actor)."""
        ...

    def subscriber_address(self, subject: str) -> str:
        """The address an outside subscription to ``subject`` takes messages as."""
        ...

    # -- leaving
    async def session_for(
        self, src: str, dst: str, *, provision: bool = False
    ) -> OutboundSession | None:
        """The session a message from ``src`` to ``dst`` travels on (None: none)."""
        ...

    async def topic_sender(self, src: str, topic: str) -> TopicSender | None:
        """The key ``src`` seals a publish to ``topic`` with (None: none)."""
        ...

    def reply_check(self, session: OutboundSession | None) -> ReplyCheck | None:
        """The check each reply to a request sent on ``session`` passes."""
        ...

    # -- arriving
    async def admit(
        self,
        msg: Msg,
        env: Inbound,
        address: str,
        declared: str | None = None,
        *,
        stored_ms: int | None = None,
        redelivered: bool = False,
        stored_at: str | None = None,
    ) -> InboundSession | None:
        """Check what arrived for ``address`` and open its content (AuthError when
        it fails); the session it came on, attached to ``env`` for its answer.
        A stored message comes with when (``stored_ms``) and where (``stored_at``:
        its stream and sequence) the server stored it."""
        ...

    async def open_stored(
        self,
        data: bytes,
        headers: Mapping[str, str] | None,
        env: Inbound,
        stored_ms: int | None = None,
    ) -> InboundSession | None:
        """Open a stored message for history, when this system can."""
        ...

    # -- keys
    def held_key(self, kid: str) -> Identity | None:
        """This system's identity with key id ``kid``."""
        ...

    def reading_key(self, type_name: str, kid: str) -> Identity | None:
        """The key ``kid`` of ``type_name``, to open what was sealed to it."""
        ...

    def state_key(self, type_name: str) -> PublicIdentity | None:
        """The key a hosted type's state is sealed to (None: kept in the clear)."""
        ...

    # -- membership
    async def host_type(self, type_name: str, topics: Sequence[str] = ()) -> None:
        """This system hosts ``type_name`` (listening to ``topics``)."""
        ...

    async def listen(self, pattern: str) -> None:
        """The system subscribes to topics matching ``pattern`` itself."""
        ...

    async def unlisten(self, pattern: str) -> None:
        """... and no longer does."""
        ...

    async def restore_if_lost(self) -> None:
        """Publish again what a broker that lost its store lost."""
        ...

    async def close(self) -> None:
        """Leave the namespace (bounded)."""
        ...


class NoSecurity:
    """The stage of an open bus: nothing authenticated, nothing sealed; a sealed
    message that arrives is refused by the pipeline, which cannot open it."""

    secured = False
    seals = False
    identity = None

    def sender_address(self, system_id: str) -> str:
        return f"client/{system_id}"

    def subscriber_address(self, subject: str) -> str:
        return subject

    async def session_for(
        self, src: str, dst: str, *, provision: bool = False
    ) -> OutboundSession | None:
        return None

    async def topic_sender(self, src: str, topic: str) -> TopicSender | None:
        return None

    def reply_check(self, session: OutboundSession | None) -> ReplyCheck | None:
        return None

    async def admit(
        self,
        msg: Msg,
        env: Inbound,
        address: str,
        declared: str | None = None,
        *,
        stored_ms: int | None = None,
        redelivered: bool = False,
        stored_at: str | None = None,
    ) -> InboundSession | None:
        refuse_sealed(env)
        return None

    async def open_stored(
        self,
        data: bytes,
        headers: Mapping[str, str] | None,
        env: Inbound,
        stored_ms: int | None = None,
    ) -> InboundSession | None:
        return None

    def held_key(self, kid: str) -> Identity | None:
        return None

    def reading_key(self, type_name: str, kid: str) -> Identity | None:
        return None

    def state_key(self, type_name: str) -> PublicIdentity | None:
        return None

    async def host_type(self, type_name: str, topics: Sequence[str] = ()) -> None:
        return None

    async def listen(self, pattern: str) -> None:
        return None

    async def unlisten(self, pattern: str) -> None:
        return None

    async def restore_if_lost(self) -> None:
        return None

    async def close(self) -> None:
        return None
