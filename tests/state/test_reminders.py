"""Durable reminders: kept by the broker, fired into the actor's durable queue
(activating it), each firing taken once under its own idempotency key,
cancellable, listed; and a firing copied or forged by a sender is not run."""

from __future__ import annotations

from typing import Any

from _actors import Nudge, Nudged, Nudges
from _util import eventually

from actorbus import ActorSystem

WAIT = 20.0


async def nudges(system: ActorSystem, address: str) -> Nudges:
    result: Nudges = await system.ask(address, "", intent="nudges", returns=Nudges, timeout=WAIT)
    return result


async def test_a_reminder_fires_once_when_due_and_is_listed_until_then(make_system: Any) -> None:
    system = await make_system()
    await system.register(Nudged)
    schedule = await system.ask("rm-nudged/a", {"name": "once", "after": 1}, intent="remind")
    assert schedule.startswith("@at ")
    assert await system.ask("rm-nudged/a", "", intent="reminders") == ["once"]

    async def fired() -> Nudges | None:
        seen = await nudges(system, "rm-nudged/a")
        return seen if seen.notes else None

    seen = await eventually(fired, WAIT, "the reminder fired")
    assert seen.notes == ["once"]
    assert seen.keys == [f"reminder:once:at:{schedule.removeprefix('@at ')}"]
    assert await system.reminders.list("rm-nudged") == []  # fired: gone


async def test_a_repeating_reminder_fires_until_cancelled_each_firing_once(
    make_system: Any,
) -> None:
    system = await make_system()
    await system.register(Nudged)
    await system.ask("rm-nudged/b", {"name": "tick", "every": 1}, intent="remind")
    [reminder] = await system.reminders.list("rm-nudged/b")
    assert (reminder.name, reminder.schedule, reminder.repeats) == ("tick", "@every 1000ms", True)

    async def ticked(n: int) -> Nudges | None:
        seen = await nudges(system, "rm-nudged/b")
        return seen if len(seen.notes) >= n else None

    await eventually(lambda: ticked(2), WAIT, "two firings")
    assert await system.ask("rm-nudged/b", "tick", intent="cancel") is True
    at_cancel = len((await nudges(system, "rm-nudged/b")).notes)
    assert await system.ask("rm-nudged/b", "tick", intent="cancel") is False
    assert await system.reminders.list("rm-nudged/b") == []
    # A one-time reminder set after the cancel and due after the next ticks would
    # have come: once it fired, any firing of the cancelled one would have too.
    await system.ask("rm-nudged/b", {"name": "marker", "after": 2.5}, intent="remind")
    seen = await eventually(
        lambda: ticked(at_cancel + 1), WAIT, "the marker fired"
    )
    seen = await nudges(system, "rm-nudged/b")
    assert "marker" in seen.notes
    ticks = [k for n, k in zip(seen.notes, seen.keys, strict=True) if n == "tick"]
    assert len(ticks) <= at_cancel + 1  # at most the one in hand at the cancel
    assert len(set(ticks)) == len(ticks)  # every firing its own key
    assert all(k.startswith("reminder:tick:every:1000@") for k in ticks)


async def test_setting_a_reminder_again_replaces_it(make_system: Any) -> None:
    system = await make_system()
    await system.register(Nudged)
    await system.ask("rm-nudged/c", {"name": "r", "after": 3600}, intent="remind")
    await system.ask("rm-nudged/c", {"name": "r", "after": 1}, intent="remind")
    [reminder] = await system.reminders.list("rm-nudged/c")
    assert reminder.schedule.startswith("@at ")

    async def fired() -> Nudges | None:
        seen = await nudges(system, "rm-nudged/c")
        return seen if seen.notes else None

    assert (await eventually(fired, WAIT, "the replacement fired")).notes == ["r"]
    assert await system.reminders.list("rm-nudged/c") == []  # the hour-long one is gone


async def test_reminder_arguments_are_checked(make_system: Any) -> None:
    import pytest

    from actorbus import InvalidAddressError, RemoteError

    system = await make_system()
    await system.register(Nudged)
    for spec, error in [
        ({"name": "bad.name", "after": 1}, "subject token"),
        ({"name": "x", "every": 0.2}, "at most once a second"),
        ({"name": "x"}, "exactly one of"),
        ({"name": "x", "after": -1}, "in the past"),
    ]:
        with pytest.raises(RemoteError, match=error):
            await system.ask("rm-nudged/d", spec, intent="remind", timeout=WAIT)
    with pytest.raises(InvalidAddressError):
        await system.reminders.set("rm-nudged", "x", Nudge(), after=1)
