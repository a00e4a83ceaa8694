"""Actors anywhere on the bus as tools, found through the registry.

Every actor type announces its intents with their JSON schemas and how each is
called (``Listing.calls``): a plain ask answers, a streaming intent answers with
items (collected into the tool's result), a durable intent is told (stored,
handled once under the call's idempotency key; the model learns it was
accepted), and an intent that may keep a gateway task open (its reply can be a
question for a person) is never offered, since a model cannot answer it.

The call goes through the agent actor itself, so it is sealed, traced and
deadline-bound like any message the agent sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from actorbus.agents.messages import ToolSpec
from actorbus.agents.tools import Tool, ToolContext, tool_name
from actorbus.bus.subjects import bare_type_key

if TYPE_CHECKING:
    from actorbus.actors.listing import Listing

_RAW_INPUT = {  # an intent that takes raw content: the model gives it as text
    "type": "object",
    "properties": {"input": {"type": "string", "description": "the message to send"}},
    "required": ["input"],
}


@runtime_checkable
class ToolSource(Protocol):
    """Tools found when a run starts (the bus's actors, an MCP server's tools)."""

    async def tools(self, agent: Any) -> Sequence[Tool]:
        """The tools to offer for a run of ``agent``."""
        ...


class ActorTool:
    """One intent of one actor type (or one actor) as a tool."""

    def __init__(
        self,
        address: str,
        intent: str,
        *,
        schema: dict[str, Any] | None,
        description: str = "",
        streams: bool = False,
        durable: bool = False,
        name: str | None = None,
        timeout: float | None = None,
        by_session: bool = False,
    ) -> None:
        self.address = address
        self.intent = intent
        self.raw = schema is None
        self.streams = streams
        self.durable = durable
        self.by_session = by_session  # the type keys its actors by session
        self.timeout = timeout
        self.spec = ToolSpec(
            name=tool_name(name or f"{address.replace('/', '_')}_{intent}"),
            description=description,
            parameters=_RAW_INPUT if schema is None else _strip_title(schema),
        )

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        agent = context.agent
        message: Any = str(arguments.get("input", "")) if self.raw else arguments
        key = context.idempotency_key
        if self.durable:
            # a durable queue is per actor: a bare type's is the actor an ask would reach
            target = self.address
            if "/" not in target:
                session = agent.envelope.context.session_id
                target = f"{target}/{bare_type_key(session, self.by_session)}"
            await agent.tell(target, message, intent=self.intent, durable=True, idempotency_key=key)
            return f"accepted: {target} handles it once (key {key})"
        if self.streams:
            return [item async for item in agent.stream(self.address, message, intent=self.intent)]
        return await agent.ask(
            self.address, message, intent=self.intent, timeout=self.timeout, idempotency_key=key
        )

    def __repr__(self) -> str:
        return f"<actor tool {self.spec.name}: {self.address} {self.intent}>"


def _strip_title(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "title"}


def tools_of(listing: Listing, intents: Iterable[str] | None = None) -> list[ActorTool]:
    """The callable intents of one discovered actor type as tools."""
    if listing.address is None:
        return []
    wanted = set(intents) if intents is not None else None
    calls = listing.calls
    schemas = listing.intents
    described = str(listing.native.get("description") or "")
    found = []
    for intent, schema in sorted(schemas.items()):
        kind = calls.get(intent, {})
        if kind.get("opens_task") or (wanted is not None and intent not in wanted):
            continue
        found.append(
            ActorTool(
                listing.address,
                intent,
                schema=schema if isinstance(schema, dict) else None,
                name=f"{listing.name}_{kind.get('handler') or intent}",
                description=_tool_description(listing, intent, described),
                streams=bool(kind.get("streams")),
                durable=bool(kind.get("durable")),
                by_session=bool(listing.native.get("key_by_session")),
            )
        )
    return found


def _tool_description(listing: Listing, intent: str, described: str) -> str:
    """The handler's own description, with the type's for context (several
    handlers of one type are told apart by theirs); the type's alone when the
    handler has none."""
    doing = listing.description_of(intent)
    if not doing:
        return f"{described or listing.name} ({listing.name}, {intent})"
    return f"{doing} ({listing.name}: {described})" if described else f"{doing} ({listing.name})"


@dataclass(frozen=True)
class BusTools:
    """The actors on the bus as tools, looked up in the registry at each run.

    ``types`` names actor types (all healthy ones when empty, the agent's own
    excluded); ``skill`` and ``tags`` filter as ``discover()`` does; ``intents``
    keeps only those. A type that is not running when a run starts is simply not
    offered, so the model never picks a tool nobody serves."""

    types: tuple[str, ...] = ()
    skill: str | None = None
    tags: tuple[str, ...] = ()
    intents: tuple[str, ...] | None = None
    timeout: float | None = None

    async def tools(self, agent: Any) -> Sequence[Tool]:
        listings = await agent.system.discover(skill=self.skill, tags=self.tags)
        own = type(agent).type_name
        found: list[Tool] = []
        for listing in listings:
            if listing.name == own or (self.types and listing.name not in self.types):
                continue
            for t in tools_of(listing, self.intents):
                t.timeout = self.timeout
                found.append(t)
        return found


def actor_tools(*types: str, **options: Any) -> BusTools:
    """:class:`BusTools` for ``types`` (every type on the bus when none)."""
    return BusTools(types=types, **options)
