"""What the gateway serves (the agents, as the registry lists them), the tasks it
has in hand, and the errors its edges map onto their protocols."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from actorbus.actors.listing import Listing
from actorbus.bus.subjects import bare_type_key
from actorbus.codecs.common import fit_to_intent
from actorbus.codecs.errors import (
    ActorNotFoundError,
    UnsupportedError,
)
from actorbus.codecs.tasks import ArtifactUpdate, Message, Part, StatusUpdate, Task, TaskState

Event = Task | StatusUpdate | ArtifactUpdate


class AgentNotFoundError(ActorNotFoundError):
    """No healthy agent (actor type) of that name is in the registry."""


class UnknownTaskError(ActorNotFoundError):
    """No task of that id (for that agent)."""


class TaskNotContinuableError(UnsupportedError):
    """A message named a task that does not wait for input."""


class NotCancelableError(UnsupportedError):
    """The task is in a terminal state already."""


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plain(value: Any) -> Any:
    """A reply as JSON-ready data (models dumped)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def text_message(text: str, *, task_id: str, context_id: str | None) -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role="agent",
        parts=[Part(kind="text", value=text)],
        task_id=task_id,
        context_id=context_id,
    )


@dataclass(frozen=True)
class Agent:
    """An agent the gateway exposes: an actor type from the registry."""

    name: str
    address: str
    description: str
    skills: list[dict[str, Any]]
    intents: dict[str, Any]
    tags: list[str]
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)  # reply schemas by intent
    prompts: dict[str, str] = field(default_factory=dict)  # prompt templates by name
    described: dict[str, str] = field(default_factory=dict)  # what each intent's handler does
    durable: frozenset[str] = frozenset()  # intents told durably (stored, handled once)
    by_session: bool = False  # the type keys its actors by session (an agent's conversations)

    @classmethod
    def of(cls, listing: Listing) -> Agent:
        info = listing.native
        skills = [dict(s) for s in info.get("skills") or () if isinstance(s, dict)]
        replies = info.get("replies")
        prompts = info.get("prompts")
        return cls(
            name=listing.name,
            address=listing.address or listing.name,
            description=str(info.get("description") or ""),
            skills=skills,
            intents=listing.intents,
            tags=sorted(listing.tags),
            replies={k: v for k, v in (replies or {}).items() if isinstance(v, dict)}
            if isinstance(replies, dict)
            else {},
            prompts={str(k): v for k, v in prompts.items() if isinstance(v, str)}
            if isinstance(prompts, dict)
            else {},
            described={i: d for i in listing.intents if (d := listing.description_of(i))},
            durable=frozenset(i for i, kind in listing.calls.items() if kind.get("durable")),
            by_session=bool(info.get("key_by_session")),
        )

    def durable_address(self, session_id: str | None) -> str:
        """Where a durable message for this agent goes (its queue is per actor):
        the conversation's actor for a type keyed by session, else its default one."""
        if "/" in self.address:
            return self.address
        return f"{self.address}/{bare_type_key(session_id, self.by_session)}"

    def choose_intent(self, intent: str, content: Any) -> tuple[str, Any]:
        """The intent to ask with, and the content shaped for it.

        The envelope's intent when the actor handles it; else the actor's only
        intent. Text sent to a handler that takes a model is parsed as JSON when
        it is a JSON object, or wrapped as the model's only required string field.
        """
        return fit_to_intent(self.intents, intent, content)


@dataclass
class LiveTask:
    """A task this gateway process holds in memory while it may still change."""

    task: Task
    agent: str
    protocol: str
    address: str
    run: asyncio.Task[None] | None = None
    subscribers: list[asyncio.Queue[Event | None]] = field(default_factory=list)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    saved_at: float = 0.0  # loop time of the last save (artifact chunks are saved in batches)
    kept_open: bool = False  # the current run's actor replied Working: it finishes the task

    @property
    def state(self) -> TaskState:
        return self.task.status.state
