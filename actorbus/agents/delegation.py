"""Other agents as tools, and handoffs to them.

Both ask the other agent's ``run`` intent over the bus (wherever it is hosted),
so the other agent keeps its own instructions, model, tools and memory:

- :func:`agent_tool`: the other agent answers a sub-question and the answer comes
  back to this agent's model as a tool result (this agent stays in charge);
- :func:`handoff`: the other agent takes the rest of the run over, with the
  conversation so far, and its answer is the run's answer (what the OpenAI
  Agents SDK calls a handoff: triage passing a customer to billing).
"""

from __future__ import annotations

from typing import Any

from actorbus.agents.agent import AgentAnswer, AgentTask
from actorbus.agents.messages import ChatMessage, ToolSpec
from actorbus.agents.tools import ToolContext, tool_name

_PROMPT = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "what to ask the agent"}},
    "required": ["prompt"],
}
_REASON = {
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "why it takes over"}},
}


class AgentTool:
    """Another agent (``address``: its type, or ``type/key``) as a tool."""

    final = False

    def __init__(self, address: str, description: str = "", timeout: float | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.spec = ToolSpec(
            name=tool_name(f"ask_{address.replace('/', '_')}"),
            description=description or f"Ask the agent {address}.",
            parameters=_PROMPT,
        )

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return await self._ask(str(arguments.get("prompt", "")), [], context)

    async def _ask(self, prompt: str, history: list[ChatMessage], context: ToolContext) -> str:
        agent = context.agent
        task = AgentTask(prompt=prompt, run_id=_run_id(context), history=history)
        answer = await agent.ask(
            self.address,
            task,
            returns=AgentAnswer,
            timeout=self.timeout,
            # the other agent's conversation is this one's (its key, by session)
            session_id=agent.envelope.context.session_id or agent.key,
        )
        return str(answer.text)


class Handoff(AgentTool):
    """A handoff to another agent: its answer ends the run (``final``)."""

    final = True

    def __init__(self, address: str, description: str = "", timeout: float | None = None) -> None:
        super().__init__(address, timeout=timeout)
        self.spec = ToolSpec(
            name=tool_name(f"transfer_to_{address.replace('/', '_')}"),
            description=description or f"Hand the conversation over to the agent {address}.",
            parameters=_REASON,
        )

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        agent = context.agent
        record = agent.state.runs[context.run_id]
        history = [m for m in record.messages[1:-1] if m.role in ("user", "assistant")]
        return await self._ask(record.prompt, [m for m in history if m.content], context)


def _run_id(context: ToolContext) -> str:
    """The other agent's run id: the same when this run resumes and calls again,
    so a resumed call resumes the other agent's run instead of starting one."""
    return context.idempotency_key.replace("/", "-").replace(":", "-")


def agent_tool(address: str, description: str = "", timeout: float | None = None) -> AgentTool:
    """Another agent as a tool this agent's model calls with a prompt."""
    return AgentTool(address, description, timeout)


def handoff(address: str, description: str = "", timeout: float | None = None) -> Handoff:
    """A handoff: the model may pass the conversation to another agent, whose
    answer is then the answer."""
    return Handoff(address, description, timeout)
