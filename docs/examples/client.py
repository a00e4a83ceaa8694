"""A program that talks to the newsroom: any process on this machine."""

import asyncio

from team import Brief, Finding

from actorbus import ActorSystem


async def main() -> None:
    async with ActorSystem.connect() as system:  # finds the server `actorbus up` runs
        async for finding in system.stream("researcher/1", Brief(topic="actors"), returns=Finding):
            print(finding.text)
        print(await system.ask("chief/1", Brief(topic="actors"), timeout=10))


if __name__ == "__main__":
    asyncio.run(main())
