"""Eager instances, replicas sharing an address, lazily created keys, anycast."""

import asyncio

from actorbus import Actor, ActorSystem, handler


class Worker(Actor):
    @handler
    async def work(self, job: str) -> str:
        await asyncio.sleep(0.01)
        return f"{job} done at {self.address}"


class Session(Actor):
    def __init__(self) -> None:
        self.turns = 0  # in memory: each key has its own instance

    @handler
    async def turn(self, text: str) -> str:
        self.turns += 1
        return f"{self.address}: turn {self.turns}"


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Worker, key="pool", replicas=3)  # 3 instances share worker/pool
        jobs = await asyncio.gather(*(system.ask("worker/pool", f"job{i}") for i in range(6)))
        print(len(jobs), "jobs answered")
        print(await system.ask("worker", "anycast"))  # any instance of the type

        await system.register(Session)  # session/<any key> is made on its first message
        print(await system.ask("session/alice", "hi"))
        print(await system.ask("session/alice", "again"))
        print(await system.ask("session/bob", "hi"))
        print(system.local_actors())


if __name__ == "__main__":
    asyncio.run(main())
