"""The ``Agent`` actor: instructions, a model, tools, memory, resumable runs.

An agent type is a lazily hosted, keyed actor type, keyed by session: every
conversation (an A2A context through the gateway, a ``session_id`` on the bus,
or an explicit key, ``assistant/alice``) is an actor of its own, with its own
persistent state (sealed like any actor's), activated where its lease is held
and passivated when idle. Its state holds the conversation (bounded by
``memory_window``; older turns go through :meth:`Agent.summarize`) and the runs
not finished yet, so memory survives passivation, a crash and a redeploy, and a
run resumes where it stopped (``run.py``).

Three ways in:

- ``chat`` (text in, tokens out): a stream; the gateway streams it over A2A SSE
  and MCP, and collects it for a plain A2A ``message/send``.
- ``run`` (:class:`AgentTask` in, :class:`AgentAnswer` out): an ask; ``run_id``
  resumes a run that failed part-way.
- ``run_durably`` (:class:`DurableTask`): a durable message; the run is recorded
  step by step, resumes after SIGKILL on redelivery, and its answer is told
  (durably, exactly once) to ``reply_to``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.actors.interim import InputRequired
from actorbus.agents.bus_tools import ToolSource
from actorbus.agents.from_env import model_from_env
from actorbus.agents.messages import ChatMessage, ToolCall, Usage
from actorbus.agents.model import ModelClient, TokenSink, structured
from actorbus.agents.run import AgentRun, RunPaused, RunRecord, RunSettings, decide
from actorbus.agents.telemetry import AgentTelemetry
from actorbus.agents.tools import Tool, ToolContext
from actorbus.codecs.envelope import new_id

_KEPT_RUNS = 16  # unfinished runs kept in the state (the oldest are dropped)


class AgentTask(BaseModel):
    """A prompt for :meth:`Agent.run`; the same ``run_id`` resumes a run that
    failed. ``history``: earlier messages the run starts from (a handoff passes
    the conversation it hands over)."""

    prompt: str
    run_id: str | None = None
    history: list[ChatMessage] = Field(default_factory=list)


class AgentAnswer(BaseModel):
    """A run's answer: its text, the structured output when the agent declares
    one (as JSON data), and what it took. ``question`` set: the run waits for a
    person (an approval, an answer); the next message in the conversation is
    taken as theirs and the run goes on."""

    text: str
    output: Any = None
    run_id: str
    steps: int
    usage: Usage = Field(default_factory=Usage)
    question: str | None = None


class DurableTask(BaseModel):
    """A prompt sent durably: the run survives its host's crash and its answer is
    told to ``reply_to`` (an address) exactly once."""

    prompt: str
    reply_to: str | None = None


class AgentState(BaseModel):
    """An agent's memory: the conversation, a summary of what fell out of its
    window, the runs not finished, the tokens used."""

    conversation: list[ChatMessage] = Field(default_factory=list)
    summary: str = ""
    runs: dict[str, RunRecord] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    waiting: str | None = None  # the run that waits for a person's next message


ModelChoice = ModelClient | Callable[[], ModelClient] | None


class Agent(Actor):
    """Base class of agents; set the class attributes, add handlers if you like.

    - ``instructions``: the system prompt
    - ``model``: a :class:`~actorbus.agents.ModelClient`, or a function making one
      (called once per process), or None for :func:`~actorbus.agents.model_from_env`
    - ``tools``: tools (``@tool`` functions, :class:`ActorTool`) and sources of
      tools looked up at each run (:func:`actor_tools`, MCP servers)
    - ``max_steps``: model calls per run (a run still calling tools after it
      fails with :class:`StepLimitError`)
    - ``tool_timeout``: seconds a tool call may take before it is cancelled (its
      result then says so to the model); a tool's own ``timeout`` wins
    - ``memory_window``: messages of the conversation kept verbatim
    - ``output``: a pydantic model the final answer must fit (structured output)
    - ``ask_user``: offer the model a tool to ask the person a question; the run
      pauses (an A2A task turns ``input-required``) until the answer comes
    - ``approval_required``: names of tools a person approves each call of (and
      tools made with ``@tool(approval=True)``); the run pauses the same way
    """

    keyed = True
    key_by_session = True
    idle_timeout = 300.0
    advertise = False  # the base class is not an agent anyone can call

    instructions: ClassVar[str] = "You are a helpful assistant."
    model: ClassVar[ModelChoice] = None
    tools: ClassVar[Sequence[Tool | ToolSource]] = ()
    max_steps: ClassVar[int] = 10
    tool_timeout: ClassVar[float] = 60.0
    memory_window: ClassVar[int] = 40
    output: ClassVar[type[BaseModel] | None] = None
    ask_user: ClassVar[bool] = False
    approval_required: ClassVar[Collection[str]] = ()

    state: AgentState
    _made_model: ClassVar[ModelClient | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        cls.advertise = cls.__dict__.get("advertise", True)
        cls._made_model = None
        super().__init_subclass__(**kwargs)
        if cls.max_steps < 1 or cls.memory_window < 2:
            raise TypeError(f"{cls.__qualname__}: max_steps >= 1 and memory_window >= 2")

    # -- the ways in -------------------------------------------------------------
    @handler
    async def chat(self, text: str) -> AsyncIterator[str | InputRequired]:
        """Answer ``text``, streaming the answer's tokens as the model writes them
        (and, when the run waits for a person, the question as ``InputRequired``)."""
        tokens: asyncio.Queue[str | None] = asyncio.Queue()

        async def sink(token: str) -> None:
            tokens.put_nowait(token)

        running = asyncio.create_task(self.answer(text, new_id(), sink))
        running.add_done_callback(lambda _: tokens.put_nowait(None))
        streamed = False
        try:
            while (token := await tokens.get()) is not None:
                streamed = True
                yield token
            answer = await running
            if not streamed and answer.text and answer.question is None:
                yield answer.text  # an answer no model call wrote here (a resumed run)
            if answer.question is not None:
                yield InputRequired(message=answer.question)
        finally:
            if not running.done():  # the caller went away: so does the run
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    @handler
    async def run(self, task: AgentTask) -> AgentAnswer:
        """Answer a task; its ``run_id`` (when given) resumes what a failed run did."""
        return await self.answer(task.prompt, task.run_id or new_id(), history=task.history)

    @handler(durable=True)
    async def run_durably(self, task: DurableTask) -> None:
        """Answer a durable task (resumed on redelivery after a crash) and tell the
        answer to ``reply_to``."""
        answer = await self.answer(task.prompt, f"d-{self.envelope.id}", durable=True)
        if task.reply_to:
            await self.tell(task.reply_to, answer, durable=True)

    # -- the run -----------------------------------------------------------------
    async def chat_model(self) -> ModelClient:
        """This type's model client, made on first use once per process (in a
        thread: importing a provider's SDK takes the better part of a second)."""
        cls = type(self)
        chosen = cls.model
        if isinstance(chosen, ModelClient):
            return chosen
        if cls._made_model is None:
            cls._made_model = await asyncio.to_thread(chosen or model_from_env)
        return cls._made_model

    async def answer(
        self,
        prompt: str,
        run_id: str,
        on_token: TokenSink | None = None,
        history: Sequence[ChatMessage] = (),
        durable: bool = False,
    ) -> AgentAnswer:
        """Run (or resume) run ``run_id`` on ``prompt`` and remember the exchange;
        when a run waits for a person, ``prompt`` is their answer and that run
        goes on. ``durable``: the turn is a durable message's (its final answer
        is recorded before the turn commits)."""
        model = await self.chat_model()
        record = self._run_for(prompt, run_id, history)
        run_id = record.id
        cls = type(self)
        tools = await self.resolve_tools()
        approval = {t.spec.name for t in tools if getattr(t, "needs_approval", False)}
        telemetry = AgentTelemetry(self.system.telemetry)
        run = AgentRun(
            record,
            model=model,
            tools=tools,
            settings=RunSettings(
                cls.max_steps,
                cls.tool_timeout,
                cls.output,
                ask_user=cls.ask_user,
                approval=frozenset(approval | set(cls.approval_required)),
                record_final=durable,
            ),
            checkpoint=self.save_state,
            context=lambda call: self.tool_context(run_id, call),
            on_token=on_token,
            telemetry=telemetry,
        )
        with telemetry.agent_run(self.type_name, run_id, model.model):
            try:
                final = await run.answer()
            except RunPaused as paused:
                self.state.waiting = run_id
                question = paused.waiting.question
                return AgentAnswer(
                    text=question,
                    run_id=run_id,
                    steps=record.steps,
                    usage=record.usage,
                    question=question,
                )
        output = type(self).output
        data = None
        if output is not None:
            data = structured(output, final.content, model.model).model_dump(mode="json")
        del self.state.runs[run_id]
        self.state.usage = self.state.usage + record.usage
        await self.remember(record.prompt, final)
        return AgentAnswer(
            text=final.content, output=data, run_id=run_id, steps=record.steps, usage=record.usage
        )

    def context(self) -> list[ChatMessage]:
        """What a new run starts from: the instructions (with the summary of older
        turns), then the conversation so far."""
        system = type(self).instructions
        if self.state.summary:
            system += f"\n\nEarlier in this conversation: {self.state.summary}"
        return [ChatMessage.system(system), *self.state.conversation]

    def tool_context(self, run_id: str, call: ToolCall) -> ToolContext:
        """A tool call's context; its key is the same when the run resumes."""
        return ToolContext(f"{self.address}:{run_id}:{call.id}", run_id, self)

    async def resolve_tools(self) -> list[Tool]:
        """The tools offered for a run: the fixed ones and what each source finds now."""
        found: list[Tool] = []
        for t in type(self).tools:
            if isinstance(t, ToolSource):
                found += await t.tools(self)
            else:
                found.append(t)
        return found

    async def remember(self, prompt: str, final: ChatMessage) -> None:
        """Keep the exchange in the conversation; what falls out of the window
        goes through :meth:`summarize`."""
        conversation = self.state.conversation
        conversation += [
            ChatMessage.user(prompt),
            ChatMessage(role="assistant", content=final.content),
        ]
        window = type(self).memory_window
        if len(conversation) > window:
            dropped = conversation[:-window]
            self.state.conversation = conversation[-window:]
            self.state.summary = await self.summarize(dropped, self.state.summary)

    async def summarize(self, dropped: list[ChatMessage], summary: str) -> str:
        """The summary of older turns, given the ones leaving the window. The
        default keeps the summary as it is (the dropped turns are forgotten);
        override it to ask a model, say, for a few sentences."""
        return summary

    def _run_for(self, prompt: str, run_id: str, history: Sequence[ChatMessage]) -> RunRecord:
        """The run this message is for: the one waiting for a person (the message
        is their answer), the one named (resumed), or a new one."""
        waiting = self.state.runs.get(self.state.waiting or "")
        self.state.waiting = None
        if waiting is not None:
            decide(waiting, prompt)
            return waiting
        record = self.state.runs.get(run_id)
        if record is None:
            messages = [*self.context(), *history, ChatMessage.user(prompt)]
            record = RunRecord(id=run_id, prompt=prompt, messages=messages)
            self._keep_run(record)
        return record

    def _keep_run(self, record: RunRecord) -> None:
        runs = self.state.runs
        runs[record.id] = record
        for old in list(runs)[: max(0, len(runs) - _KEPT_RUNS)]:
            del runs[old]
