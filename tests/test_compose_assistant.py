"""compose/assistant.yml on the laptop stack, on a real engine: the research
assistant of examples/assistant.py and its two tools, each in a container of its
own, its model the stand-in service; an outside A2A client and the official MCP
client ask it through the secured gateway, and the agent's tool call crosses the
bus to the calculator's container. Skipped, with the reason, where no engine
runs and none can be started.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from _docker import (
    SINGLE_FILE,
    SINGLE_PORTS,
    Project,
    a2a_send,
    bearer_token,
    post_json,
    running,
    wait_health,
)
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ASSISTANT_FILE = Path(__file__).resolve().parents[1] / "compose" / "assistant.yml"


@pytest.fixture(scope="module")
def assistant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    def make() -> Project:
        return Project(
            (SINGLE_FILE, ASSISTANT_FILE),
            SINGLE_PORTS,
            AGENT_TYPES="assistant,calculator,notes",
            OPENAI_API_KEY="",
            OPENAI_BASE_URL="",
        )

    with running(tmp_path_factory, make, phoenix=False) as p:
        yield p


@pytest.mark.timeout(300, func_only=True)
def test_the_assistant_answers_over_a2a_with_a_tool_in_another_container(
    assistant: Project,
) -> None:
    p = assistant
    names = ("nats", "registry", "gateway", "agents", "calculator", "notes")
    wait_health(p, [p.container(n) for n in names])
    url = p.url("GATEWAY_PORT", "/a2a/assistant", "https")
    token = bearer_token(p, "assistant")
    ask = '/calculator_compute {"op": "multiply", "a": 6, "b": 7}'  # the stand-in's rule
    task = post_json(url, a2a_send(ask), p.ca, Authorization=f"Bearer {token}")["result"]
    assert task["status"]["state"] == "completed", task
    text = "".join(part["text"] for a in task["artifacts"] for part in a["parts"])
    assert text == "(scripted) the tool said: 42.0"  # the calculator's container computed it


@pytest.mark.timeout(300, func_only=True)
def test_the_assistant_answers_the_mcp_client_with_a_tool_in_another_container(
    assistant: Project,
) -> None:
    p = assistant
    names = ("nats", "registry", "gateway", "agents", "calculator")
    wait_health(p, [p.container(n) for n in names])
    url = p.url("GATEWAY_PORT", "/mcp", "https")
    token = bearer_token(p, "assistant")

    async def call() -> str:
        tls = ssl.create_default_context(cafile=str(p.ca))
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(verify=tls, headers=headers, timeout=60) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            ask = '/calculator_compute {"op": "add", "a": 40, "b": 2}'
            result = await session.call_tool("assistant.text", {"text": ask})
            assert result.is_error is False, result
            return "".join(getattr(c, "text", "") for c in result.content)

    assert asyncio.run(call()) == "(scripted) the tool said: 42.0"
