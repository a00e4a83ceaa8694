"""Agents and the actors they use as tools, for tests/agents (also hosted in
processes of their own by tests/_host.py; the model comes from OPENAI_* there)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

import _actors  # noqa: F401  (ACTORBUS_TEST_KILL_AT: the SIGKILL hook of fault tests)
from pydantic import BaseModel, Field

from actorbus import Actor, handler
from actorbus.actors.interim import InputRequired
from actorbus.agents import Agent, AgentAnswer, actor_tools, tool


class AddArgs(BaseModel):
    a: int
    b: int


class UpTo(BaseModel):
    n: int


class Calculator(Actor):
    """Does arithmetic."""

    @handler
    async def add(self, args: AddArgs) -> int:
        """Add two integers."""
        return args.a + args.b

    @handler
    async def count(self, upto: UpTo) -> AsyncIterator[int]:
        """Count from 1."""
        for i in range(1, upto.n + 1):
            yield i

    @handler(intent="ask-a-person")
    async def person(self, question: str) -> InputRequired | str:
        return InputRequired(message=question)


class Mail(BaseModel):
    to: str
    body: str


class Sent(BaseModel):
    effects: dict[str, str] = Field(default_factory=dict)  # idempotency key -> receipt
    calls: int = 0  # calls, repeats included


class Mailer(Actor):
    """Sends mail: an effect, done once per idempotency key however often it is
    called (a run resumed after a crash calls it again with the same key)."""

    keyed = True
    state: Sent
    started: ClassVar[asyncio.Event | None] = None  # set when a send starts (tests)
    pause: ClassVar[float] = 0.0  # seconds each send takes

    @handler
    async def send(self, mail: Mail) -> str:
        self.state.calls += 1
        key = self.envelope.context.idempotency_key or ""
        done = self.state.effects.get(key)
        if done is not None:
            return done
        if Mailer.started is not None:
            Mailer.started.set()
        await asyncio.sleep(Mailer.pause)
        receipt = f"sent #{len(self.state.effects) + 1} to {mail.to}"
        self.state.effects[key] = receipt
        return receipt

    @handler(intent="counts")
    async def counts(self, _: str) -> Sent:
        return self.state


class Answers(Actor):
    """Where durable agent runs tell their answers."""

    durable = True
    got: ClassVar[list[AgentAnswer]] = []
    arrived: ClassVar[asyncio.Event] = asyncio.Event()

    @handler
    async def answer(self, answer: AgentAnswer) -> None:
        Answers.got.append(answer)
        Answers.arrived.set()


@tool
def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()


class Researcher(Agent):
    """Researches with a calculator and a mailer, which run anywhere on the bus."""

    instructions = "You research and report by mail."
    tools = (shout, actor_tools("calculator", "mailer"))
    tool_timeout = 20.0
    # Each host killed mid-run is an attempt of the durable message: a test that
    # kills six in a row needs more than the usual four.
    retry_backoff = (0.1,) * 8
