"""A research assistant: an LLM agent whose tools are actors in two other processes.

Three processes, one bus (``actorbus up`` first; each command in a terminal of its
own, from the repository's root)::

    actorbus run examples.calculator:Calculator         # a tool: arithmetic
    actorbus run examples.notes:Notes                    # a tool: notes kept in state
    actorbus run examples.assistant:Assistant            # the agent

The agent's model comes from the environment (``OPENAI_API_KEY`` or
``OPENAI_BASE_URL`` with ``OPENAI_MODEL``); with no model at hand, run the
stand-in that echoes (``python -m actorbus.testing.scripted_model``) and point
``OPENAI_BASE_URL`` at ``http://127.0.0.1:8089/v1``. Then talk to it::

    actorbus stream assistant/ann "What is 6 times 7? Keep a note of it." --text

or, through the gateway, over A2A and MCP (``compose/assistant.yml`` runs it all
in containers). Each conversation (``assistant/ann``, an A2A context) is an
actor of its own whose memory survives restarts. The stand-in only echoes; a
message ``/calculator_compute {"op": "multiply", "a": 6, "b": 7}`` makes it call
that tool.
"""

from __future__ import annotations

from actorbus.agents import Agent, actor_tools


class Assistant(Agent):
    """Answers questions; computes with the calculator and keeps notes."""

    instructions = (
        "You are a research assistant. Use the calculator for arithmetic and keep "
        "a note of every result you give."
    )
    tools = (actor_tools("calculator", "notes"),)  # found in the registry at each run
