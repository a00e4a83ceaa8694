"""ActorRef: a handle on one address, cheap to create and safe to pass around."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar, Unpack, overload

from actorbus.actors.actor import ActorContext
from actorbus.actors.call_options import AskOptions, StreamOptions, TellOptions

R = TypeVar("R")


class ActorRef:
    """``ask``/``tell``/``stream`` bound to one address (``system.ref(address)``,
    or what ``spawn`` returns)."""

    __slots__ = ("address", "system")

    def __init__(self, system: ActorContext, address: str) -> None:
        self.system = system
        self.address = address

    @overload
    async def ask(self, message: Any, *, returns: type[R], **options: Unpack[AskOptions]) -> R: ...
    @overload
    async def ask(
        self, message: Any, *, returns: None = None, **options: Unpack[AskOptions]
    ) -> Any: ...
    async def ask(
        self, message: Any, *, returns: type[Any] | None = None, **options: Unpack[AskOptions]
    ) -> Any:
        """Ask the actor at this address and wait for its reply (typed by
        ``returns``); options as :meth:`actorbus.ActorSystem.ask`."""
        return await self.system.ask(self.address, message, returns=returns, **options)

    async def tell(self, message: Any, **options: Unpack[TellOptions]) -> None:
        """Send to this address without waiting; options as
        :meth:`actorbus.ActorSystem.tell` (``durable=True`` stores it first)."""
        await self.system.tell(self.address, message, **options)

    def stream(
        self, message: Any, *, returns: type[Any] | None = None, **options: Unpack[StreamOptions]
    ) -> AsyncIterator[Any]:
        """Call this address's streaming handler and iterate its items; options as
        :meth:`actorbus.ActorSystem.stream`."""
        return self.system.stream(self.address, message, returns=returns, **options)

    def __repr__(self) -> str:
        return f"ActorRef({self.address!r})"
