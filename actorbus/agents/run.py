"""One agent run: the tool-calling loop, recorded step by step so it can resume.

A run's record (:class:`RunRecord`, kept in the agent's persistent state) is its
transcript: the messages it started from, then each model answer and each tool
result as they come, plus the tool calls begun and not finished. ``checkpoint``
saves it after every step. A run started again with the same id (a durable
message redelivered after its host was killed, a caller retrying with the run
id) reads the record and goes on from the last step saved:

- a model answer recorded is not asked for again;
- a tool result recorded is not run again;
- a tool call begun but not recorded (the process died during it) runs again
  with the same idempotency key (the agent's address, the run and the call id),
  so a tool with effects can recognise the repeat.

The loop: ask the model (tokens handed to ``on_token`` as they stream); if it
called tools, run them all at once, each bound by its timeout, and put every
result (or error, as text the model can read) in the transcript; ask again;
until the model answers without tool calls, or ``max_steps`` model calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from actorbus.actors import faults
from actorbus.agents import telemetry
from actorbus.agents.messages import ChatMessage, ToolCall, Usage
from actorbus.agents.model import ModelClient, TokenSink
from actorbus.agents.tools import Tool, ToolContext, result_text
from actorbus.codecs.errors import ModelError


class RunRecord(BaseModel):
    """What a run did so far (module docstring)."""

    id: str
    messages: list[ChatMessage]
    steps: int = 0  # model answers recorded
    begun: list[str] = Field(default_factory=list)  # tool call ids begun, not finished
    usage: Usage = Field(default_factory=Usage)

    @property
    def answer(self) -> ChatMessage | None:
        """The final answer, once the model gave one (no tool calls)."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant" and not last.tool_calls:
            return last
        return None

    def unanswered(self) -> list[ToolCall]:
        """The last answer's tool calls that have no result yet."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if m.role == "assistant":
                done = {r.tool_call_id for r in self.messages[i + 1 :] if r.role == "tool"}
                return [c for c in m.tool_calls if c.id not in done]
        return []


class StepLimitError(ModelError):
    """The model was still calling tools after the agent's ``max_steps``."""


@dataclass
class RunSettings:
    """What one run may do (from the agent's class attributes)."""

    max_steps: int
    tool_timeout: float
    output: type[BaseModel] | None = None


class AgentRun:
    """Drives one :class:`RunRecord` to its answer."""

    def __init__(
        self,
        record: RunRecord,
        *,
        model: ModelClient,
        tools: Sequence[Tool],
        settings: RunSettings,
        checkpoint: Callable[[], Awaitable[None]],
        context: Callable[[ToolCall], ToolContext],
        on_token: TokenSink | None = None,
    ) -> None:
        self.record = record
        self.model = model
        self.tools = {t.spec.name: t for t in tools}
        self.settings = settings
        self.checkpoint = checkpoint
        self.context = context
        self.on_token = on_token

    async def answer(self) -> ChatMessage:
        rec = self.record
        while True:
            final = rec.answer
            if final is not None:
                return final
            pending = rec.unanswered()
            if pending:
                await self._run_tools(pending)
                continue
            if rec.steps >= self.settings.max_steps:
                raise StepLimitError(
                    f"no final answer within max_steps={self.settings.max_steps} model calls "
                    f"(run {rec.id})"
                )
            await self._ask_model()

    async def _ask_model(self) -> None:
        rec, model = self.record, self.model
        specs = [t.spec for t in self.tools.values()]
        with telemetry.model_call(model.provider, model.model) as call:
            turn = await model.complete(
                rec.messages, tools=specs, output=self.settings.output, on_token=self.on_token
            )
            call.finish(turn)
        rec.messages.append(turn.message)
        rec.steps += 1
        rec.usage = rec.usage + turn.usage
        await self.checkpoint()
        faults.reached(faults.MODEL_ANSWERED)

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        rec = self.record
        rec.begun = sorted(set(rec.begun) | {c.id for c in calls})
        await self.checkpoint()  # begun before it has effects: a resumed run knows
        faults.reached(faults.TOOLS_BEGUN)
        results = await asyncio.gather(*(self._one(c) for c in calls))
        for c, text in zip(calls, results, strict=True):
            rec.messages.append(ChatMessage.tool_result(c, text))
        rec.begun = [b for b in rec.begun if b not in {c.id for c in calls}]
        await self.checkpoint()
        faults.reached(faults.TOOLS_ANSWERED)

    async def _one(self, call: ToolCall) -> str:
        found = self.tools.get(call.name)
        kind = type(found).__name__ if found is not None else "unknown"
        with telemetry.tool_call(call.name, call.id, kind) as span:
            if found is None:
                return f"error: there is no tool named {call.name!r}; the tools are: " + ", ".join(
                    sorted(self.tools)
                )
            timeout = found.timeout if found.timeout is not None else self.settings.tool_timeout
            try:
                arguments = call.parsed_arguments()
                async with asyncio.timeout(timeout):
                    value: Any = await found.call(arguments, self.context(call))
            except TimeoutError:
                error = f"error: {call.name} did not finish within {timeout:g}s and was cancelled"
            except Exception as exc:  # a tool's failure is the model's to read, not the run's
                error = f"error: {call.name} failed: {type(exc).__name__}: {exc}"
            else:
                return result_text(value)
            if span is not None:
                span.set_attribute("error.type", "tool_error")
            return error
