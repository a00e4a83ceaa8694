"""Agents find each other by skill, tag or protocol, without hand-written addresses."""

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Text(BaseModel):
    text: str


class Summarizer(Actor):
    """Summarizes English text."""  # the registry's description: the first line

    skills = ("summarize",)  # default: the intents it handles
    tags = ("nlp", "en")

    @handler
    async def summarize(self, t: Text) -> str:
        return t.text.split(".")[0] + "."


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Summarizer, "s1")  # announced in the background
        for agent in await system.discover(skill="summarize", tags=["nlp"]):
            print(agent.name, agent.address, sorted(agent.tags), agent.healthy)
        text = Text(text="NATS carries it. The rest is detail.")
        print(await system.ask(skill="summarize", message=text))


if __name__ == "__main__":
    asyncio.run(main())
