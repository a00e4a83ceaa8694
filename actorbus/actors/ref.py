"""ActorRef: a handle on one address, cheap to create and safe to pass around."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar, overload

from actorbus.actors.actor import ActorContext

R = TypeVar("R")


class ActorRef:
    """``ask``/``tell``/``stream`` bound to one address (``system.ref(address)``,
    or what ``spawn`` returns)."""

    __slots__ = ("address", "system")

    def __init__(self, system: ActorContext, address: str) -> None:
        self.system = system
        self.address = address

    @overload
    async def ask(self, message: Any, *, returns: type[R], **kwargs: Any) -> R: ...
    @overload
    async def ask(self, message: Any, **kwargs: Any) -> Any: ...
    async def ask(self, message: Any, **kwargs: Any) -> Any:
        return await self.system.ask(self.address, message, **kwargs)

    async def tell(self, message: Any, **kwargs: Any) -> None:
        await self.system.tell(self.address, message, **kwargs)

    def stream(self, message: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return self.system.stream(self.address, message, **kwargs)

    def __repr__(self) -> str:
        return f"ActorRef({self.address!r})"
