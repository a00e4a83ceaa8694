"""The smallest useful actor: it answers every Ping with a Pong.

Run it all in one process (an embedded nats-server is started and stopped)::

    python examples/echo.py

or host it on a running server and call it from anywhere::

    actorbus up                                       # prints nats://127.0.0.1:PORT
    actorbus run examples.echo:Echo --url nats://127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Ping(BaseModel):
    text: str


class Pong(BaseModel):
    text: str
    by: str  # which instance answered: useful once there are replicas


class Echo(Actor):
    @handler
    async def ping(self, msg: Ping) -> Pong:
        return Pong(text=msg.text, by=self.address)


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Echo, key="1")
        reply = await system.ask("echo/1", Ping(text="hello"))
        print(repr(reply))


if __name__ == "__main__":
    asyncio.run(main())
