"""A model client on the official ``anthropic`` SDK (the Messages API).

The SDK retries, honours ``Retry-After``, times out and parses the event stream;
this module maps the conversation onto Messages' shapes: the system prompt
apart, tool calls as ``tool_use`` blocks, their results as ``tool_result``
blocks of a user turn. Structured output is a forced tool whose input schema is
the output model, the way Anthropic documents JSON output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from actorbus import environment as env
from actorbus.agents.messages import ChatMessage, ModelTurn, ToolCall, ToolSpec, Usage
from actorbus.agents.model import ModelSettings, ProviderSdk, TokenSink
from actorbus.codecs.errors import ModelError

_SDK = ProviderSdk("anthropic", "the Anthropic model client")

_DEFAULT_MAX_TOKENS = 4096  # Messages requires one


class AnthropicModel:
    """Messages through ``anthropic.AsyncAnthropic``; ``api_key`` and
    ``base_url`` default to ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL``."""

    provider = "anthropic"

    def __init__(
        self,
        settings: ModelSettings | str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        anthropic = _SDK.get()
        self.settings = ModelSettings.of(settings)
        api_key = api_key or env.ANTHROPIC_API_KEY.get()
        if api_key is None:
            raise ModelError(
                "AnthropicModel needs an API key: set ANTHROPIC_API_KEY or give api_key="
            )
        self._errors: type[Exception] = anthropic.APIError
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url or env.ANTHROPIC_BASE_URL.get(),
            timeout=self.settings.timeout,
            max_retries=self.settings.max_retries,
        )

    @property
    def model(self) -> str:
        return self.settings.model

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        output: type[BaseModel] | None = None,
        on_token: TokenSink | None = None,
    ) -> ModelTurn:
        request = self._request(messages, tools, output)
        try:
            if on_token is None:
                answer = await self.client.messages.create(**request)
            else:
                async with self.client.messages.stream(**request) as stream:
                    async for event in stream:
                        if event.type == "text" and event.text:
                            await on_token(event.text)
                    answer = await stream.get_final_message()
        except self._errors as exc:
            status = getattr(exc, "status_code", None)
            http = f" (HTTP {status})" if status else ""
            raise ModelError(f"{self.model}: {type(exc).__name__}{http}: {exc}") from exc
        return _turn(answer, output)

    async def close(self) -> None:
        await self.client.close()

    def _request(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        output: type[BaseModel] | None,
    ) -> dict[str, Any]:
        s = self.settings
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        request: dict[str, Any] = {
            "model": s.model,
            "max_tokens": s.max_tokens or _DEFAULT_MAX_TOKENS,
            "messages": _turns([m for m in messages if m.role != "system"]),
        }
        if system:
            request["system"] = system
        specs = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in tools
        ]
        if output is not None:
            specs.append(
                {
                    "name": output.__name__,
                    "description": "Give the final answer in this shape.",
                    "input_schema": output.model_json_schema(),
                }
            )
            request["tool_choice"] = {"type": "tool", "name": output.__name__}
        if specs:
            request["tools"] = specs
        if s.temperature is not None:
            request["temperature"] = s.temperature
        return request


def _turns(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages' alternating turns; consecutive tool results are one user turn."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant" and m.tool_calls:
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m.content}] if m.content else []
            )
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c)}
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _input(call: ToolCall) -> Any:
    try:
        return json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {}


def _turn(answer: Any, output: type[BaseModel] | None) -> ModelTurn:
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in answer.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "tool_use":
            arguments = json.dumps(block.input)
            if output is not None and block.name == output.__name__:
                text = [arguments]  # the forced output tool: its input is the answer
                continue
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
    usage = answer.usage
    return ModelTurn(
        message=ChatMessage(role="assistant", content="".join(text), tool_calls=calls),
        usage=Usage(
            input_tokens=getattr(usage, "input_tokens", 0) or 0,
            output_tokens=getattr(usage, "output_tokens", 0) or 0,
        ),
        model=answer.model or "",
        finish_reason=answer.stop_reason,
        response_id=answer.id,
    )
