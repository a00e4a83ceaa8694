"""Every error is a typed ActorBusError with a stable code; an exception in a
handler reaches the caller as a RemoteError and the actor goes on."""

import asyncio

from actorbus import Actor, ActorBusError, ActorSystem, RemoteError, handler


class Divider(Actor):
    @handler
    async def divide(self, pair: dict[str, int]) -> float:
        return pair["a"] / pair["b"]


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Divider, "1")
        try:
            await system.ask("divider/1", {"a": 1, "b": 0})
        except RemoteError as e:
            print(e.code, e.remote_type)
        print(await system.ask("divider/1", {"a": 1, "b": 4}))  # it goes on
        for address, message in [("divider/1", "text"), ("nobody/1", {})]:
            try:
                await system.ask(address, message, timeout=1)
            except ActorBusError as e:
                print(type(e).__name__, e.code)


if __name__ == "__main__":
    asyncio.run(main())
