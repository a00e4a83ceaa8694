"""A message whose handler keeps failing is retried with backoff, then
dead-lettered with the reason; the messages behind it go on."""

import asyncio

from actorbus import Actor, ActorSystem, handler


class Mailer(Actor):
    durable = True
    retry_backoff = (0.1, 0.2)  # two retries, then the dead-letter stream
    sent: asyncio.Queue[str] = asyncio.Queue()

    @handler
    async def send(self, to: str) -> None:
        if "@" not in to:
            raise ValueError(f"not an address: {to!r}")
        await self.sent.put(to)


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Mailer, "1")
        await system.tell("mailer/1", "nobody", durable=True)
        await system.tell("mailer/1", "ada@example.org", durable=True)
        print("sent to", await Mailer.sent.get())  # after the failing one gave up
        for letter in await system.dead_letters("mailer/1"):
            print(f"dead letter #{letter.seq}: {letter.reason} after {letter.attempts} attempts")


if __name__ == "__main__":
    asyncio.run(main())
