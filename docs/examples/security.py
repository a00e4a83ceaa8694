"""Secure by default: the embedded broker takes only members, and every message
between systems is authenticated and sealed end to end."""

import asyncio

import nats

from actorbus import Actor, ActorSystem, SecuritySettings, handler


class Vault(Actor):
    @handler
    async def open(self, word: str) -> str:
        return "opened" if word == "sesame" else "still shut"


async def main() -> None:
    # hosts: this system's broker user may take vault's messages and no other type's
    async with ActorSystem.start(security=SecuritySettings(hosts=("vault",))) as system:
        await system.spawn(Vault, "1")  # takes only authenticated messages

        async with ActorSystem.connect(system.url) as member:  # joins from ACTORBUS_HOME
            print(await member.ask("vault/1", "sesame"))

        async def quiet(e: Exception) -> None: ...

        try:  # a plain client, no credentials
            await nats.connect(system.url, allow_reconnect=False, error_cb=quiet)
        except Exception as e:
            print("outsider refused:", type(e).__name__)


if __name__ == "__main__":
    asyncio.run(main())
