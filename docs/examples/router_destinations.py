"""Destination routing: pick among instances, survive bad ones."""

import asyncio

from actorbus import Actor, ActorSystem, handler
from actorbus.services.router.client import DestinationRouter
from actorbus.services.router.destinations import LatencyAware


class Translator(Actor):
    skills = ("translate",)

    @handler
    async def translate(self, text: str) -> str:
        return text[::-1]


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Translator, "1")
        await system.spawn(Translator, "2")
        router = DestinationRouter(system, LatencyAware(), bulkhead=32, hedge_after=0.05)
        question, session_id = "hello", "s-42"
        # worker/9 serves nobody: the router goes on to a live one
        print(await router.ask(question, to=["translator/9", "translator/1"], key=session_id))
        print(await router.ask(question, skill="translate"))  # healthy instances from the registry


if __name__ == "__main__":
    asyncio.run(main())
