"""A streaming handler: ``yield`` from an ``async def`` and the caller gets the items
one by one, as they are produced, with ``async for``.

    python examples/streaming.py

Leaving the ``async for`` early (``break``) cancels the producer on the other side.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Dictate(BaseModel):
    text: str
    delay_s: float = 0.05  # stands in for a model producing tokens


class Word(BaseModel):
    index: int
    text: str


class Typist(Actor):
    @handler
    async def dictate(self, request: Dictate) -> AsyncIterator[Word]:
        for index, word in enumerate(request.text.split()):
            await asyncio.sleep(request.delay_s)
            yield Word(index=index, text=word)


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Typist, key="1")
        request = Dictate(text="streams arrive in order, one item at a time")
        async for word in system.stream("typist/1", request):
            print(word.text, end=" ", flush=True)
        print()

        # Stop early: the typist is cancelled, not left typing into the void.
        async for word in system.stream("typist/1", Dictate(text="one two three four")):
            if word.index == 1:
                break
        print("stopped after", word.text)


if __name__ == "__main__":
    asyncio.run(main())
