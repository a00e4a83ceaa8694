"""Agents served by the official host SDK (synadia-ai-agent-service), called from
actorbus through the egress (:class:`SynadiaAgent`): discovery via $SRV.INFO,
plain and streamed replies, mid-stream questions, error frames as typed errors.
Skipped when the host package is not installed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from actorbus import Actor, ActorSystem, handler
from actorbus.codecs.errors import ActorNotFoundError, RemoteError, ValidationFailedError
from actorbus.services.synadia import SynadiaAgent, SynadiaProxy, discover_agents, find_agent

host = pytest.importorskip("synadia_ai.agent_service", reason="synadia-ai-agent-service missing")
sdk = pytest.importorskip("synadia_ai.agents", reason="synadia-ai-agents is not installed")


async def weather(envelope: Any, stream: Any) -> None:
    """An agent as the SDK's examples write one: chunks of text, a question, errors."""
    prompt = envelope.prompt
    if prompt == "boom":
        raise RuntimeError("secret internals")
    if prompt == "bad":
        raise sdk.ProtocolError("a city, please")
    if prompt == "ask":
        answer = await stream.ask("which city?", timeout=5)
        await stream.send(f"sunny in {answer.prompt}")
        return
    for word in ("sunny", " in ", prompt):
        await stream.send(word)


@contextlib.asynccontextmanager
async def served(nc: Any, owner: str, agent: str = "weather") -> AsyncIterator[Any]:
    service = host.AgentService(
        agent=agent, owner=owner, session_name="default", nc=nc, description="Weather"
    )
    service.on_prompt(weather)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def test_discover_finds_the_sdk_agent(raw_nc: NATS, ns: str) -> None:
    async with served(raw_nc, ns) as service:
        info = await find_agent(raw_nc, "weather", owner=ns)
        assert info.instance_id == service.instance_id
        assert info.prompt_subject == f"agents.prompt.weather.{ns}.default"
        assert info.protocol_version == "0.3"
        assert info.description == "Weather"
        assert info.max_payload
        assert info.attachments_ok is True
        everyone = await discover_agents(raw_nc, stall=0.1)
        assert service.instance_id in {i.instance_id for i in everyone}
        with pytest.raises(ActorNotFoundError):
            await find_agent(raw_nc, "weather", owner=f"{ns}-other", timeout=0.3)


async def test_prompt_streamed_and_one_shot(system: ActorSystem, raw_nc: NATS, ns: str) -> None:
    async with served(raw_nc, ns):
        agent = SynadiaAgent(system.nc, "weather", owner=ns)
        assert [x async for x in agent.stream("Paris")] == ["sunny", " in ", "Paris"]
        assert await agent.ask("Oslo") == "sunny in Oslo"


async def test_errors_become_typed_errors(system: ActorSystem, raw_nc: NATS, ns: str) -> None:
    async with served(raw_nc, ns):
        agent = SynadiaAgent(system.nc, "weather", owner=ns)
        with pytest.raises(RemoteError, match="handler error"):  # 500, internals kept back
            await agent.ask("boom")
        with pytest.raises(ValidationFailedError, match="a city, please"):  # 400
            await agent.ask("bad")


async def test_mid_stream_question_is_answered(system: ActorSystem, raw_nc: NATS, ns: str) -> None:
    async def on_query(query: dict[str, Any]) -> str:
        assert query["prompt"] == "which city?"
        return "Rome"

    async with served(raw_nc, ns):
        agent = SynadiaAgent(system.nc, "weather", owner=ns, on_query=on_query)
        assert await agent.ask("ask") == "sunny in Rome"


class Forecaster(Actor):
    """An actor that delegates to a Synadia agent (owner given by the test)."""

    owner = ""

    @handler
    async def forecast(self, city: str) -> str:
        agent = SynadiaAgent(self.system.nc, "weather", owner=Forecaster.owner, src=self.address)
        reply = await agent.ask(city)
        return f"forecast: {reply}"


async def test_an_actor_calls_the_sdk_agent(system: ActorSystem, raw_nc: NATS, ns: str) -> None:
    Forecaster.owner = ns
    async with served(raw_nc, ns):
        await system.spawn(Forecaster, key="1")
        assert await system.ask("forecaster/1", "Lima", timeout=5) == "forecast: sunny in Lima"


class Weather(SynadiaProxy):
    """The SDK agent as an actor."""

    synadia_agent = "weather"


async def test_a_proxy_actor_stands_for_the_sdk_agent(
    system: ActorSystem, raw_nc: NATS, ns: str
) -> None:
    Weather.synadia_owner = ns
    async with served(raw_nc, ns):
        await system.spawn(Weather, key="1")
        assert await system.ask("weather/1", "Kyiv", timeout=5) == "sunny in Kyiv"
        items = [x async for x in system.stream("weather/1", "Kyiv", intent="stream", timeout=5)]
        assert items == ["sunny", " in ", "Kyiv"]
        with pytest.raises(RemoteError, match="handler error"):
            await system.ask("weather/1", "boom", timeout=5)
