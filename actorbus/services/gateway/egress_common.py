"""What the egress adapters share: reading SSE data from an outside agent, and
the proxy actor that makes an outside agent look like any other actor."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Self

import aiohttp

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.codecs.errors import ActorBusError, AskTimeoutError, ConnectionLostError

log = logging.getLogger("actorbus.gateway.egress")


async def sse_data(
    resp: aiohttp.ClientResponse, url: str, item_timeout: float, protocol: str
) -> AsyncIterator[bytes]:
    """The ``data`` of each SSE event (multi-line data joined by newlines)."""
    lines: list[bytes] = []
    while True:
        try:
            async with asyncio.timeout(item_timeout):
                line = await resp.content.readline()
        except TimeoutError:
            raise AskTimeoutError(url, "stream item", item_timeout) from None
        except aiohttp.ClientPayloadError as e:
            raise ConnectionLostError(f"{protocol} stream from {url} broke: {e}") from e
        if not line:  # the server closed the stream
            if lines:
                yield b"\n".join(lines)
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if lines:
                yield b"\n".join(lines)
                lines = []
            continue
        if line.startswith(b"data:"):
            lines.append(line[5:].removeprefix(b" "))


class HttpAdapter:
    """The HTTP session an egress adapter reuses for every call: its own (made on
    first use, closed by ``cleanup``) or one it was given (left open)."""

    timeout: float

    def __init__(self, session: aiohttp.ClientSession | None) -> None:
        self._session = session
        self._owns_session = session is None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout)
            )
            self._owns_session = True
        return self._session

    async def initialize(self) -> Any:
        raise NotImplementedError

    async def cleanup(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cleanup()


class EgressProxy(Actor):
    """An outside agent as an actor: text, dict and bytes are sent, ``stream-text``
    streams. Subclasses say how to reach it (``make_egress``) and what the
    protocol calls the conversation (``session_arg``)."""

    advertise = False  # a base, not an agent: its subclasses are
    session_arg: ClassVar[str] = "session_id"
    protocol: ClassVar[str] = "outside"

    def __init__(self, url: str, **options: Any) -> None:
        self.egress = self.make_egress(url, **options)

    def make_egress(self, url: str, **options: Any) -> Any:
        """The adapter: ``initialize``, ``cleanup``, ``send`` and ``stream`` (each
        taking the conversation as ``session_arg``), and ``url``."""
        raise NotImplementedError

    async def on_start(self) -> None:
        try:  # the agent may come later: calls initialize again when needed
            await self.egress.initialize()
        except ActorBusError as e:
            log.warning("%s agent at %s not ready yet: %s", self.protocol, self.egress.url, e)

    async def on_stop(self) -> None:
        await self.egress.cleanup()

    def _session(self) -> dict[str, Any]:
        return {self.session_arg: self.envelope.context.session_id}

    @handler
    async def text(self, text: str) -> Any:
        return await self.egress.send(text, **self._session())

    @handler
    async def data(self, data: dict[str, Any]) -> Any:
        return await self.egress.send(data, **self._session())

    @handler
    async def raw(self, data: bytes) -> Any:
        return await self.egress.send(data, **self._session())

    @handler(intent="stream-text")
    async def stream_text(self, text: str) -> AsyncIterator[Any]:
        async for item in self.egress.stream(text, **self._session()):
            yield item
