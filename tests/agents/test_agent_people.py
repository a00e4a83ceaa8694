"""People in the loop, and agents working with agents: a tool a person approves
first, a question the model asks the person (an A2A task turns input-required
and goes on with the answer, across a restart of the agent's host), another
agent as a tool, and a handoff to another agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from actorbus.agents import (
    Agent,
    AgentAnswer,
    AgentTask,
    OpenAIModel,
    agent_tool,
    handoff,
    tool,
)
from actorbus.testing.scripted_model import ScriptedModel, call, say

PAID: list[int] = []


@tool(approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    PAID.append(amount)
    return f"paid {amount}"


class Cashier(Agent):
    tools = (pay,)
    ask_user = True


def on(model: ScriptedModel, *types: type[Agent]) -> None:
    client = OpenAIModel("scripted-1", api_key="test", base_url=model.openai_url)
    for cls in types:
        cls.model = client


async def test_a_tool_waits_for_a_persons_approval_across_a_restart(
    make_system: Any, scripted_model: ScriptedModel
) -> None:
    PAID.clear()
    on(scripted_model, Cashier)
    first = await make_system()
    await first.register(Cashier)
    scripted_model.script(call("pay", amount=5))
    asked = await first.ask("cashier/c", AgentTask(prompt="pay 5"), timeout=20)
    assert isinstance(asked, AgentAnswer)
    assert asked.question == 'Approve pay with {"amount": 5}? (yes/no)'
    assert PAID == []  # nothing paid while it waits
    await first.close()

    again = await make_system()  # the host restarted: the run waits in the state
    await again.register(Cashier)
    scripted_model.script(say("Paid 5."))
    done = await again.ask("cashier/c", AgentTask(prompt="yes"), timeout=20)
    assert (done.text, done.question, done.run_id) == ("Paid 5.", None, asked.run_id)
    assert PAID == [5]
    assert scripted_model.requests[-1].messages[-1]["content"] == "paid 5"

    scripted_model.script(call("pay", amount=500), say("Not paid."))
    await again.ask("cashier/c", AgentTask(prompt="pay 500"), timeout=20)
    refused = await again.ask("cashier/c", AgentTask(prompt="no, far too much"), timeout=20)
    assert refused.text == "Not paid."
    assert PAID == [5]
    assert scripted_model.requests[-1].messages[-1]["content"] == (
        "error: the user did not approve this call (declined: no, far too much)"
    )


async def test_a_question_for_the_person_is_an_input_required_a2a_task(
    make_system: Any, nats_server: Any, ns: str, tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    pytest.importorskip("a2a.client", reason="the A2A SDK is not installed (pip install a2a-sdk)")
    from _gateway import running_gateway
    from a2a.client import ClientConfig, create_client
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types import Role, SendMessageRequest, TaskState

    on(scripted_model, Cashier)
    host = await make_system()
    await host.register(Cashier)
    scripted_model.script(call("ask_user", question="How much?"))
    async with running_gateway(nats_server.url, ns, tmp_path / "gw.db", "cashier") as gw:
        client = await create_client(
            f"{gw.http_url}/a2a/cashier", client_config=ClientConfig(streaming=False)
        )
        try:
            first = new_text_message("Pay the bill", role=Role.ROLE_USER)
            [event] = [e async for e in client.send_message(SendMessageRequest(message=first))]
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert task.status.message.parts[0].text == "How much?"

            await host.close()  # the agent's host restarts while the person thinks
            host = await make_system()
            await host.register(Cashier)

            scripted_model.script(say("Understood: 12."))
            answer = new_text_message(
                "12", role=Role.ROLE_USER, task_id=task.id, context_id=task.context_id
            )
            [event] = [e async for e in client.send_message(SendMessageRequest(message=answer))]
            done = event.task
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            # the tokens, one text (not a part per token)
            assert [p.text for a in done.artifacts for p in a.parts] == ["Understood: 12."]
            answered = scripted_model.requests[-1].messages[-1]
            assert (answered["role"], answered["content"]) == ("tool", "12")
        finally:
            await client.close()


class Expert(Agent):
    instructions = "You know things."


class Billing(Agent):
    instructions = "You handle money."


class Triage(Agent):
    instructions = "Route the customer."
    tools: ClassVar = (agent_tool("expert", "Ask the expert."), handoff("billing"))


async def test_another_agent_as_a_tool_and_a_handoff(
    make_system: Any, scripted_model: ScriptedModel
) -> None:
    on(scripted_model, Triage, Expert, Billing)
    front, back = await make_system(), await make_system()
    await front.register(Triage)
    await back.register(Expert)
    await back.register(Billing)
    scripted_model.script(
        call("ask_expert", prompt="Is a refund due?"),  # triage
        say("Yes, within 30 days."),  # the expert
        call("transfer_to_billing", reason="a refund"),  # triage hands over
        say("Billing here: refunded."),  # billing answers the customer
    )
    answer = await front.ask(
        "triage", AgentTask(prompt="I want my money back"), session_id="cust-1", timeout=30
    )
    assert answer.text == "Billing here: refunded."
    triage, expert, triage_again, billing = scripted_model.requests
    assert triage.tool_names == ["ask_expert", "transfer_to_billing"]
    assert expert.messages[-1] == {"role": "user", "content": "Is a refund due?"}
    assert triage_again.messages[-1]["content"] == "Yes, within 30 days."
    assert billing.messages[0]["content"] == "You handle money."
    assert billing.messages[-1] == {"role": "user", "content": "I want my money back"}
    # The conversation goes on with triage, which remembers how it ended.
    scripted_model.script(say("Anything else?"))
    await front.ask("triage", AgentTask(prompt="thanks"), session_id="cust-1", timeout=30)
    assert [m["content"] for m in scripted_model.requests[-1].messages[1:]] == [
        "I want my money back",
        "Billing here: refunded.",
        "thanks",
    ]


async def test_a_handoffs_answer_reaches_a_caller_reading_the_tokens(
    make_system: Any, scripted_model: ScriptedModel
) -> None:
    """The chat stream (A2A's message/stream, `actorbus stream`) carried only the
    tokens of triage's own model calls: after a handoff it ended empty."""
    on(scripted_model, Triage, Expert, Billing)
    front, back = await make_system(), await make_system()
    await front.register(Triage)
    await back.register(Billing)
    scripted_model.script(
        call("transfer_to_billing", reason="a refund"),
        say("Billing here: refunded."),
    )
    items = [i async for i in front.stream("triage/cust-2", "my money back", timeout=30)]
    assert "".join(items) == "Billing here: refunded."
