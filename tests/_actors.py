"""Actors used by tests that host them in another OS process (see _host.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from pydantic import BaseModel

from actorbus import Actor, handler


class WhoAsk(BaseModel):
    n: int


class WhoCount(BaseModel):
    n: int


class WhoReply(BaseModel):
    n: int
    pid: int
    instance: int


class Whoami(Actor):
    """Answers with its process id and instance id, so a test can tell replicas apart."""

    type_name = "whoami"

    @handler
    async def who(self, q: WhoAsk) -> WhoReply:
        return WhoReply(n=q.n, pid=os.getpid(), instance=id(self))

    @handler
    async def fail(self, q: dict) -> dict:  # type: ignore[type-arg]
        raise ValueError(f"remote failure {q.get('why')}")

    @handler
    async def count(self, req: WhoCount) -> AsyncIterator[WhoReply]:
        for i in range(req.n):
            yield WhoReply(n=i, pid=os.getpid(), instance=id(self))
