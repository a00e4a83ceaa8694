"""The same agent's tests on the in-process bus: no server, a millisecond a system."""

from actorbus import Actor, ActorSystem, handler
from actorbus.testing import SystemFactory


class Greeter(Actor):
    @handler
    async def greet(self, name: str) -> str:
        return f"hello {name}"


class Visits(Actor):
    keyed = True  # one live instance per key, whichever system a message reaches

    def __init__(self) -> None:
        self.count = 0

    @handler
    async def visit(self, who: str) -> int:
        self.count += 1
        return self.count


async def test_greeter(actorbus_in_process_system: ActorSystem) -> None:
    await actorbus_in_process_system.spawn(Greeter, "1")
    assert await actorbus_in_process_system.ask("greeter/1", "ada") == "hello ada"


async def test_one_keyed_instance_across_systems(
    actorbus_in_process_systems: SystemFactory,
) -> None:
    a, b = await actorbus_in_process_systems(), await actorbus_in_process_systems()
    await a.register(Visits)
    await b.register(Visits)
    counts = [await (a if n % 2 else b).ask("visits/ada", "ada") for n in range(4)]
    assert counts == [1, 2, 3, 4]  # one instance kept the count, wherever it was asked
