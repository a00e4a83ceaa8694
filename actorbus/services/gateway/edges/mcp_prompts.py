"""What the MCP edge offers besides tools: the agents' prompt templates
(``prompts/list``, ``prompts/get``), the template of the agents' resources
(``resources/templates/list``), and the log level a client asks for
(``logging/setLevel``).

A prompt is an actor type's ``prompts`` entry (name -> text with ``{argument}``
placeholders), named ``{agent}.{prompt}`` here; each placeholder is a required
argument, and ``prompts/get`` fills them in as one user message.
"""

from __future__ import annotations

import string
from typing import Any, Final

from actorbus.services.gateway.agents import Agent

AGENT_TEMPLATE: Final = {
    "uriTemplate": "actorbus://agents/{name}",
    "name": "agent",
    "title": "An agent",
    "description": "an agent's description: skills, intents with their schemas, tool names",
    "mimeType": "application/json",
}
# RFC 5424's levels, as MCP's logging names them, least severe first
LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


class ParamsError(ValueError):
    """Params that name nothing offered here, or do not fit what they name."""


def arguments_of(template: str) -> list[str]:
    """The placeholders of ``template``, in order, each once."""
    names: list[str] = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None and field not in names:
            names.append(field)
    return names


def prompts_of(agents: list[Agent]) -> list[dict[str, Any]]:
    """The ``prompts/list`` entries of ``agents``."""
    listed = []
    for agent in agents:
        for name, template in sorted(agent.prompts.items()):
            listed.append(
                {
                    "name": f"{agent.name}.{name}",
                    "title": f"{name} ({agent.name})",
                    "description": f"a prompt of {agent.name}: {template[:80]}",
                    "arguments": [
                        {"name": arg, "required": True} for arg in arguments_of(template)
                    ],
                }
            )
    return listed


def prompt_messages(agents: list[Agent], name: str, arguments: Any) -> dict[str, Any]:
    """The ``prompts/get`` result: the template named ``name`` filled with
    ``arguments``; ParamsError naming what is wrong."""
    agent_name, _, prompt = name.rpartition(".")
    agent = next((a for a in agents if a.name == agent_name), None)
    template = agent.prompts.get(prompt) if agent is not None else None
    if template is None:
        raise ParamsError(f"Unknown prompt: {name}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ParamsError("`params.arguments` must be an object of strings")
    missing = [arg for arg in arguments_of(template) if arg not in arguments]
    if missing:
        raise ParamsError(f"prompt {name} needs the argument(s) {', '.join(missing)}")
    text = template.format_map({k: str(v) for k, v in arguments.items()})
    return {
        "description": f"a prompt of {agent_name}",
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }


def log_level(params: dict[str, Any]) -> str:
    """The level a ``logging/setLevel`` names; ParamsError if none MCP knows."""
    level = params.get("level")
    if level not in LOG_LEVELS:
        raise ParamsError(f"`params.level` must be one of {', '.join(LOG_LEVELS)}")
    return str(level)
