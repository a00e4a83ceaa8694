"""An agent behind the gateway, reached by the official clients: the A2A SDK
streams its tokens as artifact chunks and keeps a conversation per context id;
the MCP SDK calls it as a tool. Its tools are actors in other systems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a.client", reason="the A2A SDK is not installed (pip install a2a-sdk)")

from _agent_actors import Calculator, Mailer
from _gateway import running_gateway
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from actorbus.agents import Agent, OpenAIModel, actor_tools
from actorbus.testing.scripted_model import ScriptedModel, call, say


class Assistant(Agent):
    """Answers questions with a calculator and a mailer."""

    instructions = "Answer with the tools."
    tools = (actor_tools("calculator", "mailer"),)


async def test_an_agent_streams_over_a2a_and_answers_over_mcp(
    make_system: Any, nats_server: Any, ns: str, tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    calculators, mailers, agents = await make_system(), await make_system(), await make_system()
    await calculators.register(Calculator)
    await mailers.register(Mailer)
    Assistant.model = OpenAIModel("scripted-1", api_key="test", base_url=scripted_model.openai_url)
    await agents.register(Assistant)
    async with running_gateway(
        nats_server.url, ns, tmp_path / "gw.db", "assistant", "calculator", "mailer"
    ) as gw:
        client = await create_client(
            f"{gw.http_url}/a2a/assistant", client_config=ClientConfig(streaming=True)
        )
        try:
            scripted_model.script(call("calculator_add", a=2, b=40), say("The answer is 42."))
            question = new_text_message("What is 2 + 40?", role=Role.ROLE_USER)
            events = [e async for e in client.send_message(SendMessageRequest(message=question))]
            chunks = [
                e.artifact_update.artifact.parts[0].text
                for e in events
                if e.HasField("artifact_update")
            ]
            assert chunks == ["The ", "answer ", "is ", "42."]  # each token as it came
            final = [e for e in events if e.HasField("status_update")][-1]
            assert final.status_update.status.state == TaskState.TASK_STATE_COMPLETED
            context = final.status_update.context_id
            tool_result = scripted_model.requests[1].messages[-1]
            assert tool_result == {"role": "tool", "content": "42", "tool_call_id": "call_2"}

            # The same A2A context is the same conversation (the agent's memory).
            scripted_model.script(say("You asked about 2 + 40."))
            again = new_text_message("What did I ask?", role=Role.ROLE_USER, context_id=context)
            [_ async for _ in client.send_message(SendMessageRequest(message=again))]
            remembered = [m["content"] for m in scripted_model.requests[-1].messages[1:]]
            assert remembered == [
                "What is 2 + 40?",
                "The answer is 42.",
                "What did I ask?",
            ]
        finally:
            await client.close()

        scripted_model.script(say("Hello from MCP."))
        async with (
            streamable_http_client(f"{gw.http_url}/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert {"assistant.text", "assistant.AgentTask"} <= set(tools)
            result = await session.call_tool("assistant.text", {"text": "hi"})
            assert result.is_error is False
            assert "".join(getattr(c, "text", "") for c in result.content) == "Hello from MCP."
