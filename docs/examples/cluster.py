"""A 3-node JetStream cluster on loopback: durable messages have a copy on
every node, so losing one node loses nothing."""

import asyncio

from actorbus import Actor, ActorSystem, DurableSettings, handler
from actorbus.bus.cluster import EmbeddedCluster


class Ledger(Actor):
    durable = True
    entries: asyncio.Queue[int] = asyncio.Queue()

    @handler
    async def add(self, entry: dict[str, int]) -> None:
        await self.entries.put(entry["n"])


async def main() -> None:
    cluster = EmbeddedCluster(size=3)  # what `actorbus up --cluster 3` runs
    async with (
        cluster,
        ActorSystem.connect(
            cluster.urls,  # every node: the client moves to another when one dies
            durable=DurableSettings(replicas=3),  # a copy of each stream on every node
        ) as system,
    ):
        system.learn(Ledger)
        for n in range(5):
            await system.tell("ledger/1", {"n": n})
        cluster.kill(0)  # SIGKILL one node
        await system.spawn(Ledger, "1")
        print(sorted([await Ledger.entries.get() for _ in range(5)]))


if __name__ == "__main__":
    asyncio.run(main())
