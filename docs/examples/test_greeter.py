"""A user's test of their own agent, against a real broker (actorbus[testing])."""

from actorbus import Actor, ActorSystem, handler
from actorbus.testing import SystemFactory


class Greeter(Actor):
    @handler
    async def greet(self, name: str) -> str:
        return f"hello {name}"


async def test_greeter(actorbus_system: ActorSystem) -> None:
    await actorbus_system.spawn(Greeter, "1")
    assert await actorbus_system.ask("greeter/1", "ada") == "hello ada"


async def test_a_caller_in_another_system(actorbus_systems: SystemFactory) -> None:
    host, caller = await actorbus_systems(), await actorbus_systems()
    await host.spawn(Greeter, "2")
    assert await caller.ask("greeter/2", "bob") == "hello bob"
