"""A durable agent run, and a tool with an effect that it makes once.

The run is a durable message: its steps are recorded in the agent's state as
they happen, so a host killed mid-run resumes it on redelivery. A tool call it
repeats after a crash carries the same idempotency key, and the mailer answers
a repeat from its state instead of mailing again.
"""

import asyncio

from pydantic import BaseModel, Field

from actorbus import Actor, ActorSystem, handler
from actorbus.agents import Agent, AgentAnswer, DurableTask, OpenAIModel, actor_tools
from actorbus.testing.scripted_model import ScriptedModel, call, say


class Mail(BaseModel):
    to: str
    body: str


class Sent(BaseModel):
    receipts: dict[str, str] = Field(default_factory=dict)  # idempotency key -> receipt


class Mailer(Actor):
    """Sends mail."""

    keyed = True
    state: Sent

    @handler
    async def send(self, mail: Mail) -> str:
        key = self.envelope.context.idempotency_key or ""
        if key in self.state.receipts:  # a resumed run's repeat: no second mail
            return self.state.receipts[key]
        receipt = f"mailed {mail.to} ({len(self.state.receipts) + 1} in all)"
        self.state.receipts[key] = receipt
        return receipt


class Inbox(Actor):
    durable = True
    answers: asyncio.Queue[AgentAnswer] = asyncio.Queue()

    @handler
    async def answer(self, answer: AgentAnswer) -> None:
        await self.answers.put(answer)


class Reporter(Agent):
    instructions = "Report by mail."
    tools = (actor_tools("mailer"),)


async def main() -> None:
    async with ScriptedModel() as model, ActorSystem.start() as system:
        model.script(call("mailer_send", to="ann", body="the report"), say("Mailed Ann."))
        Reporter.model = OpenAIModel("scripted", api_key="-", base_url=model.openai_url)
        for cls in (Mailer, Inbox, Reporter):
            await system.register(cls)

        task = DurableTask(prompt="Mail the report to Ann.", reply_to="inbox/1")
        await system.tell("reporter/weekly", task, durable=True)  # stored before it returns
        answer = await asyncio.wait_for(Inbox.answers.get(), 30)
        print(answer.text, f"({answer.steps} model calls)")
        print("the tool said:", model.requests[-1].messages[-1]["content"])


if __name__ == "__main__":
    asyncio.run(main())
