"""The Synadia Agent Protocol for NATS both ways: actor types served as
protocol agents, and protocol agents called from actorbus."""

import asyncio

from actorbus import Actor, ActorSystem, handler
from actorbus.services.synadia import SynadiaAgent, SynadiaBridge, SynadiaProxy


class Weather(Actor):
    @handler
    async def forecast(self, city: str) -> str:
        return f"sunny in {city}"


class WeatherProxy(SynadiaProxy):  # a protocol agent as an actor on the bus
    synadia_agent = "weather"
    synadia_owner = "acme"


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(Weather, "1")
        async with SynadiaBridge(system, [Weather], owner="acme"):  # served as "weather"
            weather = SynadiaAgent(system.nc, "weather", owner="acme")  # $SRV.INFO.agents
            print(await weather.ask("Paris"))  # the whole reply (text chunks joined)
            async for chunk in weather.stream("Oslo"):  # chunk by chunk, to the end marker
                print(chunk)
            await system.spawn(WeatherProxy, "1")
            print(await system.ask("weather-proxy/1", "Rome"))


if __name__ == "__main__":
    asyncio.run(main())
