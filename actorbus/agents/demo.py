"""The agent part of ``actorbus demo``: an LLM agent whose tool is the demo's team.

``Analyst`` is an :class:`~actorbus.agents.Agent` whose one tool is the planner
of ``actorbus/demo.py`` (found in the registry, called over the bus); it streams
its answer token by token. It uses a real model when the environment names one
(``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``, with ``OPENAI_MODEL``; or
``ANTHROPIC_API_KEY`` and ``ANTHROPIC_MODEL``), else the scripted model of
``actorbus.testing`` on a loopback port, and says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from collections.abc import AsyncIterator

from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from actorbus import environment as env
from actorbus.actors.state_admin import read_state
from actorbus.actors.system import ActorSystem
from actorbus.agents.agent import Agent, AgentState
from actorbus.agents.bus_tools import actor_tools
from actorbus.agents.from_env import model_from_env
from actorbus.agents.messages import Usage
from actorbus.agents.model import ModelClient
from actorbus.agents.openai_model import OpenAIModel
from actorbus.codecs.envelope import new_id

ANALYST = "analyst"


class Analyst(Agent):
    """Answers questions about the documents, with the research team as its tool."""

    instructions = (
        "You answer questions about actors and messaging. Ask the research team "
        "(the planner_plan tool) first, then answer in one or two sentences."
    )
    tools = (actor_tools("planner"),)


class AgentDemoResult(BaseModel):
    """What the agent part of the demo did."""

    model: str  # which model, and where it came from
    answer: str
    tokens: int  # pieces streamed
    usage: Usage  # tokens the model counted


def _configured() -> bool:
    return any(v.get() for v in (env.OPENAI_API_KEY, env.OPENAI_BASE_URL, env.ANTHROPIC_API_KEY))


@contextlib.asynccontextmanager
async def demo_model(question: str) -> AsyncIterator[tuple[ModelClient, str]]:
    """The model the demo uses, and how to say which: the environment's, else the
    scripted one (it asks the team, then answers with the team's first sentence)."""
    # Importing a provider's SDK takes most of a second: not on the event loop.
    await asyncio.to_thread(importlib.import_module, "actorbus.testing.scripted_model")
    await asyncio.to_thread(importlib.import_module, "openai")
    if _configured():
        client = await asyncio.to_thread(model_from_env)
        yield client, f"{client.model} ({client.provider}, from the environment)"
        await client.close()
        return
    from actorbus.testing.scripted_model import Received, Reply, ScriptedModel, call, say

    def answer(received: Received) -> Reply:
        found = json.loads(received.messages[-1].get("content") or "{}")
        sentences = [s["text"] for s in found.get("answer", {}).get("sentences", [])]
        return say(f"The team found: {sentences[0] if sentences else 'nothing'}")

    async with ScriptedModel(fallback=answer) as scripted:
        scripted.script(call("planner_plan", text=question))
        client = OpenAIModel("scripted", api_key="demo", base_url=scripted.openai_url)
        note = (
            "scripted (no model configured: set OPENAI_API_KEY or OPENAI_BASE_URL "
            "and OPENAI_MODEL for a real one)"
        )
        try:
            yield client, note
        finally:
            await client.close()


async def run_agent_demo(
    system: ActorSystem, question: str, console: Console | None = None
) -> AgentDemoResult:
    """Ask the analyst ``question`` (the team must be running: ``run_demo`` spawns
    it), streaming its answer to ``console``."""
    console = console or Console(quiet=True)
    async with demo_model(question) as (client, note):
        Analyst.model = client
        with contextlib.suppress(ValueError):  # registered by an earlier run already
            await system.register(Analyst)
        console.print(f"[bold]{ANALYST}[/] (an LLM agent; model: {note})")
        console.print(f"[bold]{ANALYST}[/] streaming: ", end="")
        pieces: list[str] = []
        session = new_id()  # a conversation of its own (the agent's key)
        async for token in system.stream(ANALYST, question, session_id=session):
            if isinstance(token, str):
                pieces.append(token)
                console.print(Text(token, style="green"), end="")
        console.print()
    view = await read_state(system.runtime, f"{ANALYST}/{session}")
    state = AgentState.model_validate(view.state if view is not None else {})
    console.print(
        f"[bold]{ANALYST}[/] remembers {len(state.conversation)} message(s) of this "
        f"conversation; {state.usage.input_tokens} + {state.usage.output_tokens} tokens"
    )
    return AgentDemoResult(
        model=note, answer="".join(pieces), tokens=len(pieces), usage=state.usage
    )
