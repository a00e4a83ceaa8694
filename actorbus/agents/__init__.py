"""AI agents on the actor runtime (``pip install 'actorbus[agents]'``).

An :class:`Agent` is an actor type with instructions, a model and tools; each
conversation is an actor of its own whose state is its memory. Models are
reached through their providers' official SDKs (:class:`OpenAIModel` for OpenAI
and every OpenAI-compatible server, :class:`AnthropicModel`); tools are Python
functions (:func:`tool`), actors anywhere on the bus (:func:`actor_tools`,
:class:`ActorTool`), an MCP server's (:class:`McpTools`), outside A2A agents (:class:`A2ATool`),
other agents
(:func:`agent_tool`, :func:`handoff`), or anything with a :class:`Tool`'s shape.
"""

from actorbus.agents.a2a_tools import A2ATool
from actorbus.agents.agent import Agent, AgentAnswer, AgentState, AgentTask, DurableTask
from actorbus.agents.anthropic_model import AnthropicModel
from actorbus.agents.bus_tools import ActorTool, BusTools, ToolSource, actor_tools
from actorbus.agents.delegation import AgentTool, Handoff, agent_tool, handoff
from actorbus.agents.from_env import model_from_env
from actorbus.agents.mcp_tools import McpTools
from actorbus.agents.messages import ChatMessage, ModelTurn, ToolCall, ToolSpec, Usage
from actorbus.agents.model import ModelClient, ModelSettings
from actorbus.agents.openai_model import OpenAIModel
from actorbus.agents.protocol_router import ModelRouter, ProtocolChoice
from actorbus.agents.run import RunRecord, StepLimitError
from actorbus.agents.tools import FunctionTool, Tool, ToolContext, tool

__all__ = [
    "A2ATool",
    "ActorTool",
    "Agent",
    "AgentAnswer",
    "AgentState",
    "AgentTask",
    "AgentTool",
    "AnthropicModel",
    "BusTools",
    "ChatMessage",
    "DurableTask",
    "FunctionTool",
    "Handoff",
    "McpTools",
    "ModelClient",
    "ModelRouter",
    "ModelSettings",
    "ModelTurn",
    "OpenAIModel",
    "ProtocolChoice",
    "RunRecord",
    "StepLimitError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolSource",
    "ToolSpec",
    "Usage",
    "actor_tools",
    "agent_tool",
    "handoff",
    "model_from_env",
    "tool",
]
