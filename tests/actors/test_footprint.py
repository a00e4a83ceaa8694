"""What an idle activation costs a process that hosts many: few objects for the
collector to walk, all of them returned by passivation, and a collector tuned
for a hosting process unless the process tuned its own."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from _util import WAIT

from actorbus import Actor, handler
from actorbus.testing import eventually

ACTIVATIONS = 1000


class Idle(Actor):
    type_name = "idle-footprint"

    @handler
    async def ping(self, q: dict[str, Any]) -> int:
        return 1


class Dozy(Idle):
    type_name = "dozy-footprint"
    idle_timeout = 0.2


def tracked() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects())


# What an activation may keep; the rest that grows is a message's, on its way out.
KEPT = {"ActorCell", "Lock", "list", "set", "dict", "deque", "Event", "Semaphore", "Timers"}


async def activate(system: Any, type_name: str, count: int, prefix: str) -> None:
    keys = iter(range(count))

    async def worker() -> None:
        for k in keys:
            await system.ask(f"{type_name}/{prefix}{k}", {}, timeout=WAIT)

    await asyncio.gather(*(worker() for _ in range(20)))
    cells = system.hosting.residents.cells.values
    # a handler's task ends just after its reply went out, and its cell lets go of it
    await eventually(lambda: all(c._tasks is None for cs in cells() for c in cs), WAIT, "done")


@pytest.fixture
def collector_threshold() -> Iterator[None]:
    """The interpreter's thresholds as the test found them, put back after it."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


async def test_an_idle_activation_keeps_four_objects_for_the_collector(system) -> None:
    """Its cell, its instance, its turn's lock and its entry in the residents table:
    every container more is walked by each full collection, times the activations
    a process hosts (a million is the goal)."""
    await system.register(Idle)
    await activate(system, "idle-footprint", ACTIVATIONS, "first")
    before = tracked()  # with what a thousand asks leave around for a moment
    await activate(system, "idle-footprint", ACTIVATIONS, "second")
    grown = tracked() - before  # the same passing things again, and what was kept
    assert grown["Idle"] == grown["ActorCell"] == ACTIVATIONS
    per_activation = sum(n for name, n in grown.items() if name in KEPT | {"Idle"}) / ACTIVATIONS
    assert per_activation <= 4.1, f"{per_activation:.2f} objects each: {grown.most_common(8)}"


async def test_passivation_gives_an_activations_objects_back(system) -> None:
    await system.register(Dozy)
    await activate(system, "dozy-footprint", 20, "first")
    await eventually(lambda: not system.local_actors(), WAIT, "the first ones passivated")
    before = tracked()
    await activate(system, "dozy-footprint", ACTIVATIONS, "k")
    await eventually(lambda: not system.local_actors(), WAIT, "all passivated")
    left = tracked() - before
    kept = sum(n for name, n in left.items() if name in KEPT | {"Dozy"})
    assert kept < ACTIVATIONS / 20, f"kept: {left.most_common(8)}"


async def test_a_hosting_process_collects_its_young_objects_less_often(
    make_system, collector_threshold: None
) -> None:
    gc.set_threshold(700, 10, 10)  # the interpreter's default
    system = await make_system()
    assert gc.get_threshold() == (700, 10, 10), "a system that hosts nothing changes nothing"
    await system.register(Idle)
    assert gc.get_threshold() == (20_000, 10, 10)


@pytest.mark.parametrize("option", ["own threshold", "gc_young=None"])
async def test_a_process_that_tuned_its_collector_keeps_its_settings(
    make_system, collector_threshold: None, option: str
) -> None:
    gc.set_threshold(5_000 if option == "own threshold" else 700, 10, 10)
    before = gc.get_threshold()
    kwargs = {"gc_young": None} if option == "gc_young=None" else {}
    system = await make_system(**kwargs)
    await system.spawn(Idle, "one")
    assert gc.get_threshold() == before
