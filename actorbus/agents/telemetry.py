"""The agent's spans and metrics, in OpenTelemetry's GenAI semantic conventions.

``invoke_agent {name}`` around a run, ``chat {model}`` around each model call,
``execute_tool {name}`` around each tool call, with the ``gen_ai.*`` attributes
(provider, request and response model, token usage, finish reasons, tool name
and call id), and the OpenInference span kind (AGENT, LLM, TOOL) so Phoenix
draws the agent's tree. A tool that is an actor is called inside its
``execute_tool`` span, so the message's own spans (and the tool actor's, in
its process) hang below it: one trace across processes.

Token usage is recorded as ``gen_ai.client.token.usage`` (by token type) and
the call's duration as ``gen_ai.client.operation.duration``. Content (prompts,
answers, arguments) never goes into a span, as for the bus's messages. What is
recorded is what the agent's system records (its ``Telemetry``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from actorbus.agents.messages import ModelTurn
from actorbus.telemetry import Telemetry
from actorbus.telemetry.spans import OPENINFERENCE_KIND

_tracer = trace.get_tracer("actorbus.agents")
_meter = metrics.get_meter("actorbus.agents")

token_usage = _meter.create_histogram(
    "gen_ai.client.token.usage", unit="{token}", description="tokens used per model call"
)
operation_duration = _meter.create_histogram(
    "gen_ai.client.operation.duration", unit="s", description="duration of a model call"
)


class ModelCall:
    """One model call's span and metrics: ``finish(turn)`` records the answer."""

    def __init__(self, provider: str, model: str, metered: bool) -> None:
        self.provider = provider
        self.model = model
        self.metered = metered
        self.started = time.perf_counter()
        self.span: Span | None = None

    def finish(self, turn: ModelTurn) -> None:
        attributes = {"gen_ai.provider.name": self.provider, "gen_ai.request.model": self.model}
        if turn.model:
            attributes["gen_ai.response.model"] = turn.model
        if self.metered:
            elapsed = time.perf_counter() - self.started
            operation_duration.record(elapsed, {**attributes, "gen_ai.operation.name": "chat"})
            for token_type, count in (
                ("input", turn.usage.input_tokens),
                ("output", turn.usage.output_tokens),
            ):
                token_usage.record(
                    count,
                    {
                        **attributes,
                        "gen_ai.operation.name": "chat",
                        "gen_ai.token.type": token_type,
                    },
                )
        span = self.span
        if span is None:
            return
        span.set_attribute("gen_ai.response.model", turn.model or self.model)
        span.set_attribute("gen_ai.usage.input_tokens", turn.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", turn.usage.output_tokens)
        if turn.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [turn.finish_reason])
        if turn.response_id:
            span.set_attribute("gen_ai.response.id", turn.response_id)


class AgentTelemetry:
    """The GenAI spans and metrics of one agent, as its system's telemetry says."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    @contextlib.contextmanager
    def _span(self, name: str, kind: str, attributes: dict[str, Any]) -> Iterator[Span | None]:
        if not self.telemetry.tracing:
            yield None
            return
        with _tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT if kind == "LLM" else SpanKind.INTERNAL,
            attributes={OPENINFERENCE_KIND: kind, **attributes},
            record_exception=True,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.set_attribute("error.type", type(exc).__name__)
                raise

    @contextlib.contextmanager
    def agent_run(self, name: str, run_id: str, model: str) -> Iterator[Span | None]:
        """The span of one run of the agent (``invoke_agent``)."""
        with self._span(
            f"invoke_agent {name}",
            "AGENT",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": name,
                "gen_ai.agent.id": run_id,
                "gen_ai.request.model": model,
            },
        ) as span:
            yield span

    @contextlib.contextmanager
    def model_call(self, provider: str, model: str) -> Iterator[ModelCall]:
        """The span and metrics of one model call (``chat``)."""
        call = ModelCall(provider, model, self.telemetry.metrics)
        with self._span(
            f"chat {model}",
            "LLM",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model,
            },
        ) as span:
            call.span = span
            yield call

    @contextlib.contextmanager
    def tool_call(self, name: str, call_id: str, kind: str) -> Iterator[Span | None]:
        """The span of one tool call (``execute_tool``)."""
        with self._span(
            f"execute_tool {name}",
            "TOOL",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": kind,
            },
        ) as span:
            yield span
