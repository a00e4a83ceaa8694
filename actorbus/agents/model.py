"""The one interface an agent calls a model through, and how one is chosen.

Every provider is reached through its official SDK (``openai_model.py``,
``anthropic_model.py``): the SDKs already retry 429s and 5xx with backoff,
honouring ``Retry-After``, time calls out and speak their streaming formats, and
they follow the providers' changes; a hand-written HTTP client would lag them.
A client is configured in code or from the environment (:func:`model_from_env`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from actorbus.agents.messages import ChatMessage, ModelTurn, ToolSpec
from actorbus.codecs.errors import ModelError

#: Called with each piece of text as the model streams it.
TokenSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ModelSettings:
    """How calls to a model are made.

    ``timeout`` bounds one HTTP attempt; ``max_retries`` is how many times the SDK
    tries again after a 408, 409, 429 or 5xx, or a broken connection, waiting
    what the server's ``Retry-After`` says, else backing off exponentially.
    ``temperature`` and ``max_tokens`` go to the provider when set."""

    model: str
    timeout: float = 60.0
    max_retries: int = 3
    temperature: float | None = None
    max_tokens: int | None = None


@runtime_checkable
class ModelClient(Protocol):
    """A chat model: messages (and tools) in, one answer out."""

    @property
    def provider(self) -> str:
        """The provider's name as OpenTelemetry's GenAI conventions spell it
        (``openai``, ``anthropic``)."""
        ...

    @property
    def model(self) -> str:
        """The model asked for (the answer says which one answered)."""
        ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        output: type[BaseModel] | None = None,
        on_token: TokenSink | None = None,
    ) -> ModelTurn:
        """One call. With ``output``, the answer's text is JSON of that model
        (the provider's structured-output mode); with ``on_token``, the answer is
        streamed and each piece of text handed to it as it comes. Cancelling the
        awaiting task cancels the HTTP request. ModelError when the call fails
        for good."""
        ...

    async def close(self) -> None:
        """Release the HTTP connections."""
        ...


def model_from_env(model: str | None = None) -> ModelClient:
    """A client from the usual environment.

    ``ANTHROPIC_API_KEY`` (and no ``OPENAI_API_KEY``) picks Anthropic's SDK; else
    OpenAI's, which also serves every OpenAI-compatible server through
    ``OPENAI_BASE_URL`` (vLLM, Ollama, llama.cpp's server, LM Studio). The model
    is ``model``, else ``ACTORBUS_MODEL``, else ``OPENAI_MODEL`` /
    ``ANTHROPIC_MODEL``. ModelError naming what to set when nothing says which."""
    from actorbus.agents.anthropic_model import AnthropicModel
    from actorbus.agents.openai_model import OpenAIModel

    anthropic = bool(os.environ.get("ANTHROPIC_API_KEY")) and not os.environ.get("OPENAI_API_KEY")
    name = model or os.environ.get("ACTORBUS_MODEL")
    if anthropic:
        name = name or os.environ.get("ANTHROPIC_MODEL")
        if not name:
            raise ModelError("ANTHROPIC_API_KEY is set but no model: set ANTHROPIC_MODEL")
        return AnthropicModel(ModelSettings(model=name))
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        raise ModelError(
            "no model is configured: set OPENAI_API_KEY (or OPENAI_BASE_URL for an "
            "OpenAI-compatible server) and OPENAI_MODEL, or ANTHROPIC_API_KEY and "
            "ANTHROPIC_MODEL; or give the agent a model in code"
        )
    name = name or os.environ.get("OPENAI_MODEL")
    if not name:
        raise ModelError("OPENAI_API_KEY/OPENAI_BASE_URL are set but no model: set OPENAI_MODEL")
    return OpenAIModel(ModelSettings(model=name))


def structured(output: type[BaseModel], text: str, model: str) -> BaseModel:
    """The answer's text as ``output``; ModelError saying what did not fit."""
    try:
        return output.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
            for e in exc.errors()[:3]
        )
        raise ModelError(
            f"{model} answered {text[:200]!r}, which is not a valid {output.__name__}: {problems}"
        ) from None
