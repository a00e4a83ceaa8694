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
from typing import Any, Literal

from pydantic import BaseModel, Field

from actorbus.actors import faults
from actorbus.agents.messages import ChatMessage, ToolCall, ToolSpec, Usage
from actorbus.agents.model import ModelClient, TokenSink
from actorbus.agents.telemetry import AgentTelemetry
from actorbus.agents.tools import Tool, ToolContext, result_text
from actorbus.codecs.errors import ModelError
from actorbus.telemetry import OFF


class Waiting(BaseModel):
    """What a paused run waits for: a person's approval of a tool call, or their
    answer to the model's question (``ask_user``)."""

    call_id: str
    kind: Literal["approval", "question"]
    question: str


class RunRecord(BaseModel):
    """What a run did so far (module docstring)."""

    id: str
    prompt: str
    messages: list[ChatMessage]
    steps: int = 0  # model answers recorded
    begun: list[str] = Field(default_factory=list)  # tool call ids begun, not finished
    usage: Usage = Field(default_factory=Usage)
    waiting: Waiting | None = None
    decisions: dict[str, str] = Field(default_factory=dict)  # call id -> a person's word

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


class RunPaused(Exception):
    """The run waits for a person (``RunRecord.waiting``); it is saved, and goes on
    when the answer comes (:meth:`decide`)."""

    def __init__(self, waiting: Waiting) -> None:
        super().__init__(waiting.question)
        self.waiting = waiting


#: The tool a model asks the person behind the conversation through.
ASK_USER = ToolSpec(
    name="ask_user",
    description="Ask the user a question and wait for the answer (when you cannot go on "
    "without it).",
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
)
_YES = frozenset({"y", "yes", "ok", "okay", "approve", "approved", "go", "go ahead", "sure"})


def decide(record: RunRecord, text: str) -> None:
    """Record a person's answer to what ``record`` waits for: for an approval,
    yes (``yes``, ``ok``, ``approve`` ...) or anything else as a refusal with
    its reason; for a question, the answer itself."""
    waiting = record.waiting
    if waiting is None:
        return
    if waiting.kind == "approval":
        approved = text.strip().lower().rstrip(".!") in _YES
        record.decisions[waiting.call_id] = "approved" if approved else f"declined: {text}"
    else:
        record.decisions[waiting.call_id] = text
    record.waiting = None


@dataclass
class RunSettings:
    """What one run may do (from the agent's class attributes)."""

    max_steps: int
    tool_timeout: float
    output: type[BaseModel] | None = None
    ask_user: bool = False  # offer the model ASK_USER
    approval: frozenset[str] = frozenset()  # tools a person approves each call of
    # Record the final answer before the turn commits (a durable run: a crash in
    # between must not ask the model again). An ask's turn saves right after it,
    # and a caller that got no answer asks again anyway: one write fewer.
    record_final: bool = True


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
        telemetry: AgentTelemetry | None = None,
    ) -> None:
        self.record = record
        self.model = model
        self.tools = {t.spec.name: t for t in tools}
        self.settings = settings
        self.checkpoint = checkpoint
        self.context = context
        self.on_token = on_token
        self.telemetry = telemetry or AgentTelemetry(OFF)

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
        if self.settings.ask_user:
            specs.append(ASK_USER)
        with self.telemetry.model_call(model.provider, model.model) as call:
            turn = await model.complete(
                rec.messages, tools=specs, output=self.settings.output, on_token=self.on_token
            )
            call.finish(turn)
        rec.messages.append(turn.message)
        rec.steps += 1
        rec.usage = rec.usage + turn.usage
        # The calls count as begun from here (one write, not two): a resumed run
        # makes a begun call again with the same key, which is what it is for.
        rec.begun = sorted(set(rec.begun) | {c.id for c in turn.message.tool_calls})
        if turn.message.tool_calls or self.settings.record_final:
            await self.checkpoint()
        faults.reached(faults.MODEL_ANSWERED)

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        rec = self.record
        for c in calls:
            if c.id not in rec.decisions and (question := self._needs_person(c)) is not None:
                kind: Literal["approval", "question"] = (
                    "question" if c.name == ASK_USER.name else "approval"
                )
                rec.waiting = Waiting(call_id=c.id, kind=kind, question=question)
                await self.checkpoint()
                raise RunPaused(rec.waiting)
        rec.begun = sorted(set(rec.begun) | {c.id for c in calls})
        await self.checkpoint()  # begun before it has effects: a resumed run knows
        faults.reached(faults.TOOLS_BEGUN)
        results = await asyncio.gather(*(self._one(c) for c in calls))
        for c, (text, _) in zip(calls, results, strict=True):
            rec.messages.append(ChatMessage.tool_result(c, text))
        handed = [
            text for c, (text, ok) in zip(calls, results, strict=True) if ok and self._final(c)
        ]
        if handed:  # a handoff answered: its answer is the run's
            rec.messages.append(ChatMessage(role="assistant", content=handed[0]))
        rec.begun = [b for b in rec.begun if b not in {c.id for c in calls}]
        await self.checkpoint()
        faults.reached(faults.TOOLS_ANSWERED)
        if handed and self.on_token is not None:
            # the other agent's answer is this run's: a caller reading the tokens
            # (the chat stream, A2A's message/stream) gets it too, as one piece
            await self.on_token(handed[0])

    def _needs_person(self, call: ToolCall) -> str | None:
        """The question for a person this call needs answered first, if any."""
        if call.name == ASK_USER.name and self.settings.ask_user:
            try:
                return str(call.parsed_arguments().get("question") or "(no question given)")
            except ValueError:
                return "(the model asked something it did not manage to phrase)"
        if call.name in self.settings.approval:
            return f"Approve {call.name} with {call.arguments}? (yes/no)"
        return None

    def _final(self, call: ToolCall) -> bool:
        """Does this tool's result end the run (a handoff)?"""
        return bool(getattr(self.tools.get(call.name), "final", False))

    async def _one(self, call: ToolCall) -> tuple[str, bool]:
        """The call's result for the model, and whether the tool succeeded."""
        decision = self.record.decisions.get(call.id)
        if call.name == ASK_USER.name and decision is not None:
            return decision, True  # the person's answer is the tool's result
        if decision is not None and decision != "approved":
            return f"error: the user did not approve this call ({decision})", False
        found = self.tools.get(call.name)
        kind = type(found).__name__ if found is not None else "unknown"
        with self.telemetry.tool_call(call.name, call.id, kind) as span:
            if found is None:
                known = ", ".join(sorted(self.tools))
                return f"error: there is no tool named {call.name!r}; the tools are: {known}", False
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
                return result_text(value), True
            if span is not None:
                span.set_attribute("error.type", "tool_error")
            return error, False
