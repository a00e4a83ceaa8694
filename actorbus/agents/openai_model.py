"""A model client on the official ``openai`` SDK: OpenAI's Chat Completions API
and every server that speaks it (vLLM, Ollama, llama.cpp's server, LM Studio,
Azure OpenAI through its OpenAI-compatible endpoint).

Retries, ``Retry-After``, timeouts and SSE are the SDK's; this module converts
the conversation to the API's messages and its answer (streamed or not) back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from actorbus import environment as env
from actorbus.agents.messages import ChatMessage, ModelTurn, ToolCall, ToolSpec, Usage
from actorbus.agents.model import ModelSettings, ProviderSdk, TokenSink
from actorbus.codecs.errors import ModelError

_SDK = ProviderSdk("openai", "the OpenAI model client")


class OpenAIModel:
    """Chat Completions through ``openai.AsyncOpenAI``.

    ``api_key`` and ``base_url`` default to ``OPENAI_API_KEY`` and
    ``OPENAI_BASE_URL``; a local server that wants no key gets a placeholder."""

    provider = "openai"

    def __init__(
        self,
        settings: ModelSettings | str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        openai = _SDK.get()
        self.settings = ModelSettings.of(settings)
        base_url = base_url or env.OPENAI_BASE_URL.get()
        api_key = api_key or env.OPENAI_API_KEY.get() or ("unused" if base_url else None)
        if api_key is None:
            raise ModelError("OpenAIModel needs an API key: set OPENAI_API_KEY or give api_key=")
        self._errors: type[Exception] = openai.APIError
        self.client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
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
                return _turn(await self.client.chat.completions.create(**request))
            return await self._streamed(request, on_token)
        except self._errors as exc:
            raise ModelError(f"{self.model}: {_describe(exc)}") from exc

    async def close(self) -> None:
        await self.client.close()

    def _request(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        output: type[BaseModel] | None,
    ) -> dict[str, Any]:
        s = self.settings
        request: dict[str, Any] = {
            "model": s.model,
            "messages": [_message(m) for m in messages],
        }
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        if output is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": output.__name__, "schema": output.model_json_schema()},
            }
        if s.temperature is not None:
            request["temperature"] = s.temperature
        if s.max_tokens is not None:
            request["max_completion_tokens"] = s.max_tokens
        return request

    async def _streamed(self, request: dict[str, Any], on_token: TokenSink) -> ModelTurn:
        stream = await self.client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}  # by the delta's index
        usage, model, finish, response_id = Usage(), self.model, None, None
        async with stream:
            async for chunk in stream:
                model, response_id = chunk.model or model, chunk.id or response_id
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices[:1]:
                    finish = choice.finish_reason or finish
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        await on_token(delta.content)
                    for part in delta.tool_calls or ():
                        call = calls.setdefault(part.index, {"id": "", "name": "", "args": ""})
                        call["id"] = part.id or call["id"]
                        if part.function is not None:
                            call["name"] += part.function.name or ""
                            call["args"] += part.function.arguments or ""
        message = ChatMessage(
            role="assistant",
            content="".join(text),
            tool_calls=[
                ToolCall(id=c["id"], name=c["name"], arguments=c["args"] or "{}")
                for _, c in sorted(calls.items())
            ],
        )
        return ModelTurn(
            message=message, usage=usage, model=model, finish_reason=finish, response_id=response_id
        )


def _message(m: ChatMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id or ""}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in m.tool_calls
        ]
        out["content"] = m.content or None
    return out


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        output_tokens=getattr(usage, "completion_tokens", 0) or 0,
    )


def _turn(completion: Any) -> ModelTurn:
    if not completion.choices:
        raise ModelError(f"{completion.model}: the answer has no choices")
    choice = completion.choices[0]
    m = choice.message
    calls = [
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
        for c in (m.tool_calls or ())
        if getattr(c, "function", None) is not None
    ]
    return ModelTurn(
        message=ChatMessage(role="assistant", content=m.content or "", tool_calls=calls),
        usage=_usage(completion.usage) if completion.usage is not None else Usage(),
        model=completion.model or "",
        finish_reason=choice.finish_reason,
        response_id=completion.id,
    )


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    return f"{kind} (HTTP {status}): {exc}" if status else f"{kind}: {exc}"
