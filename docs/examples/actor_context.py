"""What an actor knows about itself, constructor arguments from spawn, and
calls made from inside a handler."""

import asyncio

from actorbus import Actor, ActorSystem, handler


class Greeter(Actor):
    def __init__(self, greeting: str) -> None:  # spawn(..., greeting=...) passes it
        self.greeting = greeting

    @handler
    async def greet(self, name: str) -> str:
        return f"{self.greeting} {name}, from {self.address} (key {self.key})"


class Front(Actor):
    @handler
    async def welcome(self, name: str) -> str:
        # self.ask carries this message's trace and session along
        reply: str = await self.ask("greeter/fr", name)
        return f"{reply}, in namespace {self.system.namespace!r}"


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Greeter, "fr", greeting="bonjour")
        await system.spawn(Front, "1")
        print(await system.ask("front/1", "ada"))


if __name__ == "__main__":
    asyncio.run(main())
