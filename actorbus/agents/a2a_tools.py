"""An outside A2A agent as a tool, through the gateway's egress.

:class:`A2ATool` reads the agent's card (its name, description and skills say
what the tool does) and sends the model's prompt as an A2A message with the
gateway's :class:`~actorbus.services.gateway.egress.A2AEgress` (1.0 or 0.3,
JSON-RPC, whichever the card offers); the agent's answer (its artifacts' text or
data) is the tool's result, a failed or rejected task an error the model reads.
Each conversation of the calling agent (its address: ``assistant/ann``) is one A2A
context there, the same across runs and restarts, so the outside agent can
follow up as the caller does; the id is derived, so nothing needs storing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from actorbus.agents.messages import ToolSpec
from actorbus.agents.tools import Tool, ToolContext, tool_name
from actorbus.extras import require

log = logging.getLogger("actorbus.agents")

_PROMPT = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "what to ask the agent"}},
    "required": ["prompt"],
}


class A2ATool:
    """The A2A agent at ``url`` (its base URL or its card's) as a tool; a tool
    source too, which offers it only once its card was read."""

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        timeout: float = 60.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        egress = require("actorbus.services.gateway.egress", "gateway", "A2A tools", "aiohttp")
        self.egress = egress.A2AEgress(url, timeout=timeout, headers=headers)
        self.name = name
        self.timeout = timeout
        self.spec = ToolSpec(name=tool_name(name or "a2a_agent"), parameters=_PROMPT)

    async def tools(self, agent: Any) -> Sequence[Tool]:
        if self.egress.card is None:
            try:
                card = await self.egress.initialize()
            except Exception as exc:
                log.warning("A2A agent %s: cannot read its card: %r", self.egress.url, exc)
                return []
            skills = ", ".join(
                str(s.get("name") or s.get("id")) for s in card.get("skills", []) if s
            )
            described = str(card.get("description") or "")
            self.spec = ToolSpec(
                name=tool_name(self.name or f"ask_{card.get('name', 'a2a_agent')}"),
                description=f"{described} (skills: {skills})" if skills else described,
                parameters=_PROMPT,
            )
        return [self]

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        prompt = str(arguments.get("prompt", ""))
        return await self.egress.send(prompt, context_id=self.context_id(context))

    def context_id(self, context: ToolContext) -> str:
        """The A2A context of the calling conversation (of the run, for a caller
        that is not an actor)."""
        agent = context.agent
        if agent is None:
            return f"run-{context.run_id}"
        conversation = f"{agent.system.namespace}/{agent.address}@{self.egress.url}"
        return str(uuid.uuid5(uuid.NAMESPACE_URL, conversation))

    async def close(self) -> None:
        await self.egress.cleanup()

    def __repr__(self) -> str:
        return f"<A2A tool {self.spec.name}: {self.egress.url}>"
