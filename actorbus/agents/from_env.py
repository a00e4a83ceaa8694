"""Which model client the environment names (the variables each SDK reads)."""

from __future__ import annotations

from actorbus import environment as env
from actorbus.agents.anthropic_model import AnthropicModel
from actorbus.agents.model import ModelClient, ModelSettings
from actorbus.agents.openai_model import OpenAIModel
from actorbus.codecs.errors import ModelError


def model_from_env(model: str | None = None, *, temperature: float | None = None) -> ModelClient:
    """A client from the usual environment.

    ``ANTHROPIC_API_KEY`` (and no ``OPENAI_API_KEY``) picks Anthropic's SDK; else
    OpenAI's, which also serves every OpenAI-compatible server through
    ``OPENAI_BASE_URL`` (vLLM, Ollama, llama.cpp's server, LM Studio). The model
    is ``model``, else ``ACTORBUS_MODEL``, else ``OPENAI_MODEL`` /
    ``ANTHROPIC_MODEL``. ``temperature`` goes to every call when given. ModelError
    naming what to set when nothing says which."""
    anthropic = bool(env.ANTHROPIC_API_KEY.get()) and not env.OPENAI_API_KEY.get()
    name = model or env.ACTORBUS_MODEL.get()
    if anthropic:
        name = name or env.ANTHROPIC_MODEL.get()
        if not name:
            raise ModelError("ANTHROPIC_API_KEY is set but no model: set ANTHROPIC_MODEL")
        return AnthropicModel(ModelSettings(model=name, temperature=temperature))
    if not (env.OPENAI_API_KEY.get() or env.OPENAI_BASE_URL.get()):
        raise ModelError(
            "no model is configured: set OPENAI_API_KEY (or OPENAI_BASE_URL for an "
            "OpenAI-compatible server) and OPENAI_MODEL, or ANTHROPIC_API_KEY and "
            "ANTHROPIC_MODEL; or give the agent a model in code"
        )
    name = name or env.OPENAI_MODEL.get()
    if not name:
        raise ModelError("OPENAI_API_KEY/OPENAI_BASE_URL are set but no model: set OPENAI_MODEL")
    return OpenAIModel(ModelSettings(model=name, temperature=temperature))
