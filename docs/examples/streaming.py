"""A handler that yields streams its reply, item by item."""

import asyncio
from collections.abc import AsyncIterator

from actorbus import Actor, ActorSystem, handler


class Counter(Actor):
    @handler
    async def count(self, n: dict[str, int]) -> AsyncIterator[dict[str, int]]:
        for i in range(n["upto"]):
            yield {"i": i}


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Counter, key="1")
        async for item in system.stream("counter/1", {"upto": 3}):
            print(item)


if __name__ == "__main__":
    asyncio.run(main())
