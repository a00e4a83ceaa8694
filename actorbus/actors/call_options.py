"""The keyword options of ``ask``, ``tell``, ``stream`` and ``publish``, typed once.

An actor calls other actors through ``self.ask(...)`` and an ``ActorRef``; both
hand their options on to the system. Typed here (``**options: Unpack[...]``), a
misspelt option (``timout=``) is an error for the type checker and the editor
where it is written, not a ``TypeError`` deep inside a handler at run time.
"""

from __future__ import annotations

from typing import TypedDict


class AskOptions(TypedDict, total=False):
    """``ask``: see :meth:`actorbus.ActorSystem.ask`."""

    skill: str | None
    timeout: float | None
    intent: str | None
    session_id: str | None
    idempotency_key: str | None
    ttl_ms: int | None


class TellOptions(TypedDict, total=False):
    """``tell``: see :meth:`actorbus.ActorSystem.tell`."""

    skill: str | None
    intent: str | None
    session_id: str | None
    idempotency_key: str | None
    ttl_ms: int | None
    durable: bool | None
    timeout: float | None


class StreamOptions(TypedDict, total=False):
    """``stream``: see :meth:`actorbus.ActorSystem.stream`."""

    timeout: float | None
    intent: str | None
    session_id: str | None
    idempotency_key: str | None


class PublishOptions(TypedDict, total=False):
    """``publish``: see :meth:`actorbus.ActorSystem.publish`."""

    intent: str | None
    session_id: str | None
