"""A user's test of their own agent: a real broker, and a scripted model that
speaks OpenAI's wire format to the official SDK (actorbus[testing,agents])."""

from actorbus import ActorSystem
from actorbus.agents import Agent, AgentTask, OpenAIModel, tool
from actorbus.testing.scripted_model import ScriptedModel, call, say


@tool
def lookup(word: str) -> str:
    """What a word means."""
    return {"actor": "a unit that acts on messages"}.get(word, "unknown")


class Glossary(Agent):
    instructions = "Explain words; look them up first."
    tools = (lookup,)


async def test_the_agent_looks_up_then_answers(
    actorbus_system: ActorSystem, scripted_model: ScriptedModel
) -> None:
    Glossary.model = OpenAIModel("m", api_key="-", base_url=scripted_model.openai_url)
    scripted_model.script(call("lookup", word="actor"), say("An actor acts on messages."))
    await actorbus_system.register(Glossary)

    answer = await actorbus_system.ask("glossary/t", AgentTask(prompt="What is an actor?"))

    assert answer.text == "An actor acts on messages."
    first, second = scripted_model.requests
    assert first.tool_names == ["lookup"]
    assert second.messages[-1]["content"] == "a unit that acts on messages"
