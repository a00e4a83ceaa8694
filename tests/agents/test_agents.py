"""The Agent actor on a real broker, its model a scripted server reached through
the official SDK: the tool loop (parallel calls, errors and deadlines as results
the model reads, a step limit), tools that are actors found in the registry,
structured output, streamed tokens, memory across a full restart, a
conversation per session, and the GenAI spans."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from _agent_actors import Calculator, Mailer, Researcher
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.actors.listing import Listing
from actorbus.agents import (
    Agent,
    AgentAnswer,
    AgentTask,
    ChatMessage,
    OpenAIModel,
    ToolContext,
    actor_tools,
    tool,
)
from actorbus.agents.bus_tools import tools_of
from actorbus.codecs.errors import ModelError
from actorbus.testing.scripted_model import ScriptedModel, call, calls, say


def model_of(server: ScriptedModel) -> OpenAIModel:
    return OpenAIModel("scripted-1", api_key="test", base_url=server.openai_url)


async def listing(system: ActorSystem, name: str) -> Listing:
    for found in await system.discover():
        if found.name == name:
            return found
    raise AssertionError(f"{name} is not in the registry")


async def test_the_registry_says_how_each_intent_is_called(system: ActorSystem) -> None:
    await system.register(Calculator)
    await system.register(Mailer)
    calc = await listing(system, "calculator")
    assert calc.calls["UpTo"] == {  # a model-typed handler's intent is the model's name
        "handler": "count",
        "streams": True,
        "durable": False,
        "opens_task": False,
        "description": "Count from 1.",  # the handler's docstring
    }
    assert calc.calls["ask-a-person"]["opens_task"]
    assert calc.calls["ask-a-person"]["description"] == ""  # it has none
    tools = {t.spec.name: t for t in tools_of(calc)}
    assert sorted(tools) == ["calculator_add", "calculator_count"]  # not the question
    assert tools["calculator_count"].streams
    assert tools["calculator_add"].spec.parameters["required"] == ["a", "b"]
    # the handler's own words tell the two tools apart; the type's give the context
    assert (
        tools["calculator_add"].spec.description
        == "Add two integers. (calculator: Does arithmetic.)"
    )
    assert tools["calculator_count"].spec.description.startswith("Count from 1.")
    # a skill that is an intent is described by its handler (an A2A card's skills)
    skills = {s["id"]: s["description"] for s in calc.native["skills"]}
    assert skills["AddArgs"] == "Add two integers."


class Helper(Agent):
    """Helps, with local tools."""

    server: ClassVar[ScriptedModel]
    tool_timeout = 5.0
    both_started: ClassVar[asyncio.Event]
    started: ClassVar[int] = 0

    @staticmethod
    def model() -> OpenAIModel:  # type: ignore[override]
        return model_of(Helper.server)


@tool
async def left(ctx: ToolContext) -> str:
    """One of two tools that only finish when both run at once."""
    return await _meet("left", ctx)


@tool
async def right(ctx: ToolContext) -> str:
    """The other."""
    return await _meet("right", ctx)


async def _meet(side: str, ctx: ToolContext) -> str:
    Helper.started += 1
    if Helper.started == 2:
        Helper.both_started.set()
    await asyncio.wait_for(Helper.both_started.wait(), 3.0)
    return f"{side} under {ctx.idempotency_key}"


@tool(timeout=0.2)
async def slow() -> str:
    """Takes too long."""
    await asyncio.sleep(30)
    return "never"


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


Helper.tools = (left, right, slow, divide)


@pytest.fixture
def helper(scripted_model: ScriptedModel) -> type[Helper]:
    Helper.server = scripted_model
    Helper._made_model = None
    Helper.started = 0
    Helper.both_started = asyncio.Event()
    return Helper


async def test_tools_run_at_once_and_their_failures_are_results_the_model_reads(
    system: ActorSystem, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    await system.register(helper)
    scripted_model.script(
        calls(("left", {}), ("right", {})),
        calls(
            ("slow", {}),
            ("divide", {"a": 1, "b": 0}),
            ("divide", {"a": "one"}),
            ("nosuch", {}),
        ),
        call("divide", a=6, b=3),
        say("All done."),
    )
    answer = await system.ask("helper/h1", AgentTask(prompt="go"), timeout=20)
    assert isinstance(answer, AgentAnswer)
    assert (answer.text, answer.steps) == ("All done.", 4)
    assert answer.usage.input_tokens == 44
    second, third, fourth = (r.messages for r in scripted_model.requests[1:])
    assert [m["content"] for m in second[-2:]] == [
        f"left under helper/h1:{answer.run_id}:call_2",
        f"right under helper/h1:{answer.run_id}:call_3",
    ]
    results = [m["content"] for m in third[-4:]]
    assert results[0] == "error: slow did not finish within 0.2s and was cancelled"
    assert results[1] == "error: divide failed: ZeroDivisionError: float division by zero"
    assert results[2].startswith("error: divide failed: ValueError: invalid arguments for divide:")
    assert "a: Input should be a valid number" in results[2]
    assert "b: Field required" in results[2]
    assert results[3].startswith("error: there is no tool named 'nosuch'; the tools are: divide")
    assert fourth[-1]["content"] == "2.0"


async def test_a_run_stops_at_its_step_limit_and_can_be_resumed(
    system: ActorSystem, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    class Brief(Helper):
        max_steps = 2

    await system.register(Brief)
    scripted_model.script(call("divide", a=1, b=1), call("divide", a=2, b=1))
    with pytest.raises(ModelError, match="no final answer within max_steps=2"):
        await system.ask("brief/b", AgentTask(prompt="loop", run_id="r1"), timeout=20)
    # What it did is kept: the same run id goes on from there (one more step).
    scripted_model.script(say("fine"))
    Brief.max_steps = 3
    answer = await system.ask("brief/b", AgentTask(prompt="loop", run_id="r1"), timeout=20)
    assert (answer.text, answer.steps) == ("fine", 3)
    assert len(scripted_model.requests) == 3


class Verdict(BaseModel):
    answer: int
    sure: bool


async def test_structured_output(
    system: ActorSystem, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    class Judge(Helper):
        output = Verdict

    await system.register(Judge)
    scripted_model.script(say('{"answer": 7, "sure": true}'), say("not json"))
    answer = await system.ask("judge/j", AgentTask(prompt="decide"), timeout=20)
    assert Verdict.model_validate(answer.output) == Verdict(answer=7, sure=True)
    format_ = scripted_model.requests[0].body["response_format"]
    assert format_["json_schema"]["schema"]["required"] == ["answer", "sure"]
    with pytest.raises(
        ModelError, match="'not json', which is not a valid Verdict: answer: Invalid JSON"
    ):
        await system.ask("judge/j", AgentTask(prompt="again"), timeout=20)


async def test_actors_on_the_bus_are_its_tools(
    make_system: Any, scripted_model: ScriptedModel
) -> None:
    tools_host, agent_host = await make_system(), await make_system()
    await tools_host.register(Calculator)
    await tools_host.register(Mailer)
    Researcher.model = lambda: model_of(scripted_model)  # type: ignore[assignment]
    Researcher._made_model = None
    await agent_host.register(Researcher)
    scripted_model.script(
        calls(
            ("calculator_add", {"a": 2, "b": 40}),
            ("calculator_count", {"n": 3}),
            ("mailer_send", {"to": "ann", "body": "42"}),
            ("shout", {"text": "done"}),
        ),
        say("42, mailed."),
    )
    answer = await tools_host.ask("researcher/r", AgentTask(prompt="sum and mail"), timeout=20)
    assert answer.text == "42, mailed."
    offered = scripted_model.requests[0].tool_names
    assert sorted(offered) == [
        "calculator_add",
        "calculator_count",
        "mailer_counts",
        "mailer_send",
        "shout",
    ]
    results = [m["content"] for m in scripted_model.requests[1].messages[-4:]]
    assert results == ["42", "[1, 2, 3]", "sent #1 to ann", "DONE"]


class Dish(BaseModel):
    name: str


class Kitchen(Actor):
    """Cooks what it is told, once per order."""

    type_name = "agent-kitchen"
    cooked: ClassVar[list[tuple[str, str, str | None]]] = []
    arrived: ClassVar[asyncio.Event]

    @handler(durable=True)
    async def cook(self, dish: Dish) -> None:
        """Cook one dish."""
        key = self.envelope.context.idempotency_key
        Kitchen.cooked.append((self.address, dish.name, key))
        Kitchen.arrived.set()


class Waiter(Agent):
    """Takes orders to the kitchen."""

    type_name = "agent-waiter"
    tools = (actor_tools("agent-kitchen"),)


async def test_a_durable_handler_on_the_bus_is_a_tool_told_once(
    system: ActorSystem, scripted_model: ScriptedModel
) -> None:
    """The tool is the type's bare name; a durable queue is per actor, so the
    message goes to the actor an ask would reach (it used to fail: no key)."""
    Kitchen.cooked, Kitchen.arrived = [], asyncio.Event()
    await system.register(Kitchen)
    Waiter.model = lambda: model_of(scripted_model)  # type: ignore[assignment]
    Waiter._made_model = None
    await system.register(Waiter)
    scripted_model.script(call("agent-kitchen_cook", name="soup"), say("Soup is coming."))
    answer = await system.ask("agent-waiter/ann", AgentTask(prompt="soup"), timeout=20)
    assert answer.text == "Soup is coming."
    told = scripted_model.requests[1].messages[-1]["content"]
    assert told.startswith("accepted: agent-kitchen/default handles it once (key agent-waiter/ann:")
    await asyncio.wait_for(Kitchen.arrived.wait(), 10)
    [(address, dish, key)] = Kitchen.cooked
    assert (address, dish) == ("agent-kitchen/default", "soup")
    assert key is not None
    assert key.startswith("agent-waiter/ann:")  # the call's: a resumed run repeats it


async def test_tokens_stream_and_the_conversation_survives_a_full_restart(
    make_system: Any, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    first = await make_system()
    await first.register(helper)
    scripted_model.script(say("Hello Ann, noted."))
    tokens = [t async for t in first.stream("helper/ann", "I am Ann.")]
    assert tokens == ["Hello ", "Ann, ", "noted."]
    await first.close()

    again = await make_system()
    await again.register(helper)
    scripted_model.script(say("You are Ann."))
    tokens = [t async for t in again.stream("helper/ann", "Who am I?")]
    assert "".join(tokens) == "You are Ann."
    sent = scripted_model.requests[-1].messages
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "I am Ann."),
        ("assistant", "Hello Ann, noted."),
        ("user", "Who am I?"),
    ]


async def test_each_session_is_a_conversation_of_its_own(
    system: ActorSystem, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    await system.register(helper)
    scripted_model.script("one", "two", "three")
    for session, text in (("s-1", "I am one"), ("s-2", "I am two"), ("s-1", "and again")):
        await system.ask("helper", AgentTask(prompt=text), session_id=session, timeout=20)
    third = scripted_model.requests[2].messages
    assert [m["content"] for m in third[1:]] == ["I am one", "one", "and again"]
    assert len(scripted_model.requests[1].messages) == 2  # s-2 started afresh


async def test_memory_is_bounded_by_its_window_and_summarised(
    system: ActorSystem, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    class Brief(Helper):
        memory_window = 4

        async def summarize(self, dropped: list[ChatMessage], summary: str) -> str:
            return (summary + " " + " ".join(m.content for m in dropped)).strip()

    await system.register(Brief)
    for i in range(4):
        scripted_model.script(f"a{i}")
        await system.ask("brief/m", AgentTask(prompt=f"q{i}"), timeout=20)
    last = scripted_model.requests[-1].messages
    assert last[0]["content"].endswith("Earlier in this conversation: q0 a0")
    assert [m["content"] for m in last[1:]] == ["q1", "a1", "q2", "a2", "q3"]


async def test_spans_follow_the_genai_conventions(
    make_system: Any, scripted_model: ScriptedModel, spans: InMemorySpanExporter
) -> None:
    tools_host, agent_host = await make_system(), await make_system()
    await tools_host.register(Calculator)
    Researcher.model = lambda: model_of(scripted_model)  # type: ignore[assignment]
    Researcher._made_model = None
    await agent_host.register(Researcher)
    scripted_model.script(call("calculator_add", a=1, b=2), say("3"))
    await tools_host.ask("researcher/t", AgentTask(prompt="add"), timeout=20)
    done = {s.name: s for s in spans.get_finished_spans()}
    agent = done["invoke_agent researcher"]
    chat = [s for s in spans.get_finished_spans() if s.name == "chat scripted-1"]
    tool_span = done["execute_tool calculator_add"]
    assert agent.attributes["openinference.span.kind"] == "AGENT"
    assert len(chat) == 2
    assert chat[0].attributes["gen_ai.provider.name"] == "openai"
    assert chat[0].attributes["gen_ai.usage.input_tokens"] == 11
    assert chat[0].attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chat[0].attributes["openinference.span.kind"] == "LLM"
    assert tool_span.attributes["gen_ai.tool.name"] == "calculator_add"
    assert tool_span.attributes["openinference.span.kind"] == "TOOL"
    for span in [*chat, tool_span]:
        assert span.parent is not None
        assert span.parent.span_id == agent.context.span_id
    # The tool actor's own turn, in another system, is in the same trace under the tool.
    handled = [
        s for s in spans.get_finished_spans() if s.context.trace_id == agent.context.trace_id
    ]
    assert any("calculator" in s.name and s.name != tool_span.name for s in handled)


async def test_the_stand_in_model_calls_the_tool_a_message_names(system: ActorSystem) -> None:
    """`python -m actorbus.testing.scripted_model`'s rules, to try an agent with no
    model: "/tool {json}" calls it, its result is reported, the rest is echoed."""
    from actorbus.testing.scripted_model import stand_in

    async with ScriptedModel(fallback=stand_in) as model:

        class Tryout(Agent):
            tools = (divide,)

        Tryout.model = model_of(model)
        await system.register(Tryout)
        called = await system.ask(
            "tryout/t", AgentTask(prompt='/divide {"a": 6, "b": 4}'), timeout=20
        )
        echoed = await system.ask("tryout/t", AgentTask(prompt="hello"), timeout=20)
    assert called.text == "(scripted) the tool said: 1.5"
    assert echoed.text == "(scripted) you said: hello"


async def test_a_message_without_a_session_never_reaches_another_conversation(
    system: ActorSystem, scripted_model: ScriptedModel, helper: type[Helper]
) -> None:
    await system.register(helper)
    scripted_model.script("hi ann", "hi stranger")
    await system.ask("helper", AgentTask(prompt="I am Ann"), session_id="ann", timeout=20)
    await system.ask("helper", AgentTask(prompt="who am I?"), timeout=20)  # no session
    assert [m["content"] for m in scripted_model.requests[-1].messages[1:]] == ["who am I?"]
