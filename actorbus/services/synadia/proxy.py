"""An actor standing for a Synadia agent, so the rest of the bus reaches it
like any actor (``ask``, ``stream``, skills, the registry, the gateway).

    class Weather(SynadiaProxy):
        synadia_agent = "weather"
        synadia_owner = "acme"

    await system.spawn(Weather, key="1")
    await system.ask("weather/1", "Paris")                      # the whole reply
    async for item in system.stream("weather/1", "Paris", intent="stream"): ...

Text and dict messages are prompts (``ask``: the reply joined as
:meth:`SynadiaAgent.ask` does); intent ``stream`` streams the reply's items.
The session id of the message being handled goes along to the agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.codecs.synadia import CLIENT_INACTIVITY_TIMEOUT_S, DEFAULT_SESSION
from actorbus.services.synadia.egress import SynadiaAgent


class SynadiaProxy(Actor):
    """Base class: set ``synadia_agent`` (and ``synadia_owner``, ``synadia_session``)."""

    synadia_agent: ClassVar[str] = ""
    synadia_owner: ClassVar[str | None] = None  # None: any owner
    synadia_session: ClassVar[str | None] = DEFAULT_SESSION
    synadia_timeout: ClassVar[float] = CLIENT_INACTIVITY_TIMEOUT_S  # per frame

    _agent: SynadiaAgent | None = None

    def synadia(self) -> SynadiaAgent:
        """The agent (found on first use, then kept: one discovery per instance)."""
        if self._agent is None:
            if not self.synadia_agent:
                raise TypeError(f"{type(self).__qualname__} does not set synadia_agent")
            self._agent = SynadiaAgent(
                self.system.nc,
                self.synadia_agent,
                owner=self.synadia_owner,
                session=self.synadia_session,
                src=self.address,
                timeout=self.synadia_timeout,
            )
        return self._agent

    def _session(self) -> str | None:
        return self.envelope.context.session_id

    @handler
    async def prompt_text(self, text: str) -> Any:
        return await self.synadia().ask(text, session_id=self._session())

    @handler
    async def prompt_data(self, message: dict[str, Any]) -> Any:
        return await self.synadia().ask(message, session_id=self._session())

    @handler(intent="stream")
    async def prompt_stream(self, message: Any) -> AsyncIterator[Any]:
        async for item in self.synadia().stream(message, session_id=self._session()):
            yield item
