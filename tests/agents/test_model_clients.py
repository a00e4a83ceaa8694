"""The model clients, through the official SDKs, against a scripted server that
speaks each provider's real wire format (JSON and SSE, tool calls, usage,
errors with Retry-After)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from actorbus.agents import (
    AnthropicModel,
    ChatMessage,
    ModelClient,
    ModelSettings,
    OpenAIModel,
    ToolSpec,
    model_from_env,
)
from actorbus.codecs.errors import ModelError
from actorbus.testing.scripted_model import Reply, ScriptedModel, calls, fail, say

Make = Callable[[ScriptedModel, ModelSettings], ModelClient]


def openai_client(server: ScriptedModel, settings: ModelSettings) -> ModelClient:
    return OpenAIModel(settings, api_key="test", base_url=server.openai_url)


def anthropic_client(server: ScriptedModel, settings: ModelSettings) -> ModelClient:
    return AnthropicModel(settings, api_key="test", base_url=server.anthropic_url)


CLIENTS = [pytest.param(openai_client, id="openai"), pytest.param(anthropic_client, id="anthropic")]
HELLO = [ChatMessage.system("Be brief."), ChatMessage.user("hi")]


class Verdict(BaseModel):
    answer: int
    sure: bool


@pytest.mark.parametrize("make", CLIENTS)
async def test_text_tools_and_usage_both_ways(make: Make, scripted_model: ScriptedModel) -> None:
    client = make(scripted_model, ModelSettings("m-1"))
    try:
        scripted_model.script(
            say("hello there"),
            calls(("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})),
            say("streamed answer here"),
            calls(("add", {"a": 5, "b": 6})),
        )
        tools = [ToolSpec(name="add", description="adds"), ToolSpec(name="mul")]
        plain = await client.complete(HELLO)
        assert (plain.message.content, plain.model) == ("hello there", "m-1")
        assert (plain.usage.input_tokens, plain.usage.output_tokens) == (11, 7)

        both = await client.complete(HELLO, tools=tools)
        assert [(c.name, c.parsed_arguments()) for c in both.message.tool_calls] == [
            ("add", {"a": 1, "b": 2}),
            ("mul", {"a": 3, "b": 4}),
        ]
        assert scripted_model.requests[1].tool_names == ["add", "mul"]

        tokens: list[str] = []

        async def sink(token: str) -> None:
            tokens.append(token)

        streamed = await client.complete(HELLO, on_token=sink)
        assert tokens == ["streamed ", "answer ", "here"]
        assert streamed.message.content == "streamed answer here"
        assert streamed.usage.output_tokens == 7

        streamed_call = await client.complete(HELLO, tools=tools, on_token=sink)
        assert [c.parsed_arguments() for c in streamed_call.message.tool_calls] == [
            {"a": 5, "b": 6}
        ]
        # The results go back in the provider's own shape, matched to their calls.
        call = both.message.tool_calls[0]
        follow = [*HELLO, both.message, ChatMessage.tool_result(call, "3")]
        scripted_model.script(say("3"))
        await client.complete(follow)
        sent = scripted_model.requests[-1].messages
        if client.provider == "openai":
            assert sent[-1] == {"role": "tool", "content": "3", "tool_call_id": call.id}
        else:
            assert sent[-1]["content"][0] == {
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": "3",
            }
            assert scripted_model.requests[-1].body["system"] == "Be brief."
    finally:
        await client.close()


@pytest.mark.parametrize("make", CLIENTS)
async def test_structured_output(make: Make, scripted_model: ScriptedModel) -> None:
    client = make(scripted_model, ModelSettings("m-1"))
    try:
        if client.provider == "openai":
            scripted_model.script(say('{"answer": 42, "sure": true}'))
        else:  # Anthropic: a forced tool whose input is the answer
            scripted_model.script(calls(("Verdict", {"answer": 42, "sure": True})))
        turn = await client.complete(HELLO, output=Verdict)
        assert Verdict.model_validate_json(turn.message.content) == Verdict(answer=42, sure=True)
        body = scripted_model.requests[0].body
        if client.provider == "openai":
            assert body["response_format"]["json_schema"]["name"] == "Verdict"
        else:
            assert body["tool_choice"] == {"type": "tool", "name": "Verdict"}
    finally:
        await client.close()


@pytest.mark.parametrize("make", CLIENTS)
async def test_429_and_5xx_are_retried_honouring_retry_after(
    make: Make, scripted_model: ScriptedModel
) -> None:
    client = make(scripted_model, ModelSettings("m-1", max_retries=2))
    try:
        scripted_model.script(fail(429, retry_after=0.4), fail(503, retry_after=0.1), "ok")
        started = time.monotonic()
        turn = await client.complete(HELLO)
        assert turn.message.content == "ok"
        assert time.monotonic() - started >= 0.5  # waited what the server said, twice
        assert len(scripted_model.requests) == 3

        scripted_model.script(fail(429, 0.05), fail(429, 0.05), fail(429, 0.05))
        with pytest.raises(ModelError, match=r"m-1: RateLimitError \(HTTP 429\)"):
            await client.complete(HELLO)
        assert len(scripted_model.requests) == 6  # one try and two retries

        scripted_model.script(fail(400))
        with pytest.raises(ModelError, match="HTTP 400"):
            await client.complete(HELLO)
        assert len(scripted_model.requests) == 7  # a bad request is not retried
    finally:
        await client.close()


@pytest.mark.parametrize("make", CLIENTS)
async def test_a_call_times_out_and_can_be_cancelled(
    make: Make, scripted_model: ScriptedModel
) -> None:
    client = make(scripted_model, ModelSettings("m-1", timeout=0.3, max_retries=0))
    try:
        scripted_model.script(Reply(text="late", delay=2.0))
        with pytest.raises(ModelError, match="Timeout"):
            await client.complete(HELLO)

        held = asyncio.Event()
        scripted_model.script(Reply(text="never", hold=held))
        patient = make(scripted_model, ModelSettings("m-1", timeout=30, max_retries=0))
        call = asyncio.create_task(patient.complete(HELLO))
        await scripted_model.wait_requests(2)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 2.0)  # at once, not when the server answers
        held.set()
        await patient.close()
    finally:
        await client.close()


def test_model_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ACTORBUS_MODEL", raising=False)
    with pytest.raises(ModelError, match="no model is configured: set OPENAI_API_KEY"):
        model_from_env()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # a local server, no key
    with pytest.raises(ModelError, match="set OPENAI_MODEL"):
        model_from_env()
    monkeypatch.setenv("OPENAI_MODEL", "llama3")
    local = model_from_env()
    assert (local.provider, local.model) == ("openai", "llama3")
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-x")
    assert model_from_env().provider == "anthropic"
    assert model_from_env("claude-y").model == "claude-y"
