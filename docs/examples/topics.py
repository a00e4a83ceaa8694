"""Pub/sub: every address subscribed to a matching topic gets a message once."""

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Headline(BaseModel):
    text: str


class Desk(Actor):
    seen: asyncio.Queue[str] = asyncio.Queue()

    @handler(topic="news.*")  # also subscribed to the topic, besides its own address
    async def on_headline(self, h: Headline) -> None:
        await self.seen.put(f"{self.address} read {h.text!r}")


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Desk, key="eu")
        await system.spawn(Desk, key="us")
        await system.publish("news.world", Headline(text="Agents speak NATS"))
        for line in sorted([await Desk.seen.get(), await Desk.seen.get()]):
            print(line)


if __name__ == "__main__":
    asyncio.run(main())
