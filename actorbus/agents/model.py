"""The one interface an agent calls a model through, and how one is chosen.

Every provider is reached through its official SDK (``openai_model.py``,
``anthropic_model.py``): the SDKs already retry 429s and 5xx with backoff,
honouring ``Retry-After``, time calls out and speak their streaming formats, and
they follow the providers' changes; a hand-written HTTP client would lag them.
A client is configured in code or from the environment
(:func:`~actorbus.agents.from_env.model_from_env`).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from actorbus.agents.messages import ChatMessage, ModelTurn, ToolSpec
from actorbus.codecs.errors import ModelError
from actorbus.extras import missing

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

    @classmethod
    def of(cls, settings: ModelSettings | str) -> ModelSettings:
        """Settings as given, or a model's name with the defaults."""
        return cls(model=settings) if isinstance(settings, str) else settings


class ProviderSdk:
    """A provider's official SDK, imported with the client's module (not on an
    event loop at first use: importing one takes about half a second); absent,
    :meth:`get` says which extra brings it."""

    def __init__(self, module: str, what: str) -> None:
        self.what = what
        self.module: ModuleType | None = None
        self.absent: ImportError | None = None
        try:
            self.module = importlib.import_module(module)
        except ImportError as exc:
            self.absent = exc

    def get(self) -> ModuleType:
        if self.module is None:
            assert self.absent is not None
            raise missing("agents", self.what, self.absent)
        return self.module


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
