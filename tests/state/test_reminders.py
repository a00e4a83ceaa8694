"""Durable reminders: kept by the broker, fired into the actor's durable queue
(activating it), each firing taken once under its own idempotency key,
cancellable, listed; and a firing copied or forged by a sender is not run."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from _actors import Nudge, Nudged, Nudges
from _util import own_broker, raw_member

from actorbus import ActorSystem
from actorbus.testing import eventually

WAIT = 20.0


@contextlib.asynccontextmanager
async def secured_host(ns: str) -> AsyncIterator[tuple[Any, Any, ActorSystem]]:
    """A secured broker (TLS, NATS users per member) and a member limited to
    rm-nudged hosting it lazily: (server, broker, host)."""
    from actorbus.bus.server import EmbeddedServer, ServerConfig
    from actorbus.security.secure_broker import SecureBroker, join_options

    broker = SecureBroker()
    async with EmbeddedServer(
        ServerConfig(host="127.0.0.1", extra=broker.server_config([ns]))
    ) as server:
        joined = await join_options(server.url, ns, "host", hosts=["rm-nudged"])
        host = await ActorSystem.connect(server.url, namespace=ns, registry=False, **joined)
        try:
            await host.register(Nudged)
            yield server, broker, host
        finally:
            await host.close(timeout=2.0)


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
    await system.ask("rm-nudged/b", {"name": "marker", "after": 1.5}, intent="remind")
    seen = await eventually(lambda: ticked(at_cancel + 1), WAIT, "the marker fired")
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


async def test_insiders_can_neither_touch_a_reminder_nor_make_a_firing_run_again(
    actorbus_home: Any,
) -> None:
    """On the secured broker, a member limited to type spy: cannot set, replace or
    cancel rm-nudged's reminders; cannot purge a key's queue with a schedule
    message (the durable queues take none); a firing it copies into the queue
    runs no second time; a firing it forges ahead of a reminder's time is
    refused and dead-lettered."""
    import nats
    import nats.errors
    import pytest

    from actorbus.bus.jetstream import stream_name
    from actorbus.bus.schedules import reminder_stream_name
    from actorbus.codecs.wire import H_FIRED

    ns = f"r{uuid.uuid4().hex[:8]}"
    async with secured_host(ns) as (server, broker, host):
        violations: list[Exception] = []

        async def record(exc: Exception) -> None:
            violations.append(exc)

        spy = await raw_member(server.url, broker, ns, "spy", ["spy"], error_cb=record)
        try:
            address = "rm-nudged/v"
            await host.ask(address, {"name": "later", "after": 3600}, intent="remind")
            await host.ask(address, {"name": "soon", "after": 1}, intent="remind")

            async def fired() -> Nudges | None:
                seen = await nudges(host, address)
                return seen if seen.notes else None

            assert (await eventually(fired, WAIT, "the reminder fired")).notes == ["soon"]
            js = spy.jetstream(timeout=2.0)
            # Its reminders are out of the spy's reach ...
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await js.publish(f"{ns}.rem.rm-nudged.v.later", b"", timeout=2.0)
            assert [r.name for r in await host.reminders.list(address)] == ["later"]
            # ... and a schedule message on the key's queue is refused outright.
            with pytest.raises(nats.errors.Error, match="schedul"):
                await js.publish(
                    f"{ns}.d.rm-nudged.v",
                    b"",
                    headers={
                        "Nats-Schedule": "@every 1s",
                        "Nats-Schedule-Target": f"{ns}.d.rm-nudged.w",
                    },
                )
            # A copy of the firing it read from the queue runs no second time ...
            queue = stream_name(ns, "rm-nudged")
            stored = await js.get_last_msg(queue, f"{ns}.d.rm-nudged.v")
            assert stored.headers is not None
            assert H_FIRED in stored.headers
            copy = {k: v for k, v in stored.headers.items() if k != "Nats-Msg-Id"}
            await js.publish(f"{ns}.d.rm-nudged.v", stored.data or b"", headers=copy)
            # ... nor does a firing forged from the hour-long reminder's schedule.
            schedule = await js.get_last_msg(
                reminder_stream_name(ns, "rm-nudged"), f"{ns}.rem.rm-nudged.v.later"
            )
            forged = {
                **{k: v for k, v in (schedule.headers or {}).items() if not k.startswith("Nats-")},
                H_FIRED: "later purge",
            }
            await js.publish(f"{ns}.d.rm-nudged.v", schedule.data or b"", headers=forged)

            async def refused() -> bool:
                letters = await host.dead_letters(address)
                return any(x.code == "E_AUTH" and "before its time" in x.reason for x in letters)

            await eventually(refused, WAIT, "the forged firing dead-lettered")
            await host.tell(address, Nudge(note="after"), durable=True)

            async def marker() -> Nudges | None:
                seen = await nudges(host, address)
                return seen if "after" in seen.notes else None

            # In order per key: the copy and the forgery came before the marker.
            assert (await eventually(marker, WAIT, "the marker")).notes == ["soon", "after"]
            assert violations, "the broker reported the refused publish"
        finally:
            await spy.close()


async def _fired_while_away(system: ActorSystem, key: str, n: int = 1) -> None:
    """Wait until the server fired ``n`` reminders of ``rm-nudged/key`` that no
    relay has moved yet (they wait in the reminder stream)."""
    from actorbus.bus.schedules import reminder_stream_name

    stream = reminder_stream_name(system.namespace, "rm-nudged")
    subject = f"{system.namespace}.rem.rm-nudged.{key}"

    async def waiting() -> bool:
        info = await system.runtime.js.stream_info(stream, subjects_filter=subject)
        return (info.state.subjects or {}).get(subject, 0) >= n

    await eventually(waiting, WAIT, f"{n} firing(s) stored for rm-nudged/{key}")


async def test_a_reminder_due_while_its_process_is_dead_fires_once_it_is_back(
    make_system: Any, nats_server: Any, ns: str
) -> None:
    import signal

    from _util import run_host

    system = await make_system()
    async with run_host("_actors:Nudged", nats_server.url, ns, "*") as h:
        await system.ask("rm-nudged/k", {"name": "crash", "after": 1}, intent="remind")
        h.proc.send_signal(signal.SIGKILL)
        await h.proc.wait()
    await _fired_while_away(system, "k")  # due and fired with no host running
    assert await system.reminders.waiting("rm-nudged") == 1
    async with run_host("_actors:Nudged", nats_server.url, ns, "*"):

        async def fired() -> Nudges | None:
            seen = await nudges(system, "rm-nudged/k")
            return seen if seen.notes else None

        assert (await eventually(fired, WAIT, "the reminder handled")).notes == ["crash"]
        assert await system.reminders.waiting("rm-nudged") == 0


async def test_reminders_survive_a_broker_restart(tmp_path: Any, ns: str) -> None:
    """SIGKILL the broker with a one-time reminder pending and a repeating one
    running; on the same store, the one-time one fires once and the repeating
    one goes on."""
    from actorbus.bus.jetstream import DurableSettings

    async with own_broker(tmp_path) as broker:
        durable = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=5.0)
        system = await broker.system(ns, durable=durable)
        await system.register(Nudged)
        await system.ask("rm-nudged/b", {"name": "soon", "after": 2}, intent="remind")
        await system.ask("rm-nudged/b", {"name": "tick", "every": 1}, intent="remind")
        broker.kill_and_restart()

        async def fired() -> Nudges | None:
            try:  # an ask sent while the client reconnects is lost: ask again soon
                seen = await system.ask(
                    "rm-nudged/b", "", intent="nudges", returns=Nudges, timeout=2.0
                )
            except Exception:
                return None
            ticks = seen.notes.count("tick")
            return seen if "soon" in seen.notes and ticks >= 2 else None

        seen = await eventually(fired, 45.0, "both reminders after the restart")
        assert seen.notes.count("soon") == 1
        assert [r.name for r in await system.reminders.list("rm-nudged/b")] == ["tick"]


async def test_an_in_memory_timer_ticks_without_keeping_its_actor_alive(
    make_system: Any,
) -> None:
    from _actors import Ticker

    system = await make_system()
    await system.register(Ticker)
    await system.ask("rm-ticker/t", "0.05", intent="start", timeout=WAIT)
    await eventually(lambda: Ticker.ticks.get("t", 0) >= 3, WAIT, "three ticks")
    timers = Ticker.timers["t"]
    assert timers.running == ["tick"]
    # Ticks are no activity: the idle instance is passivated, and its timer stops.
    await eventually(lambda: "rm-ticker/t" not in system.local_actors(), WAIT, "passivated")
    assert timers.running == []
    stopped_at = Ticker.ticks["t"]
    # Asked again, a new instance starts: it has no timer until it starts one.
    assert await system.ask("rm-ticker/t", "tick", intent="stop", timeout=WAIT) is False
    assert Ticker.timers["t"] is not timers
    assert Ticker.ticks["t"] == stopped_at


async def test_a_reminder_due_after_its_senders_session_ended_still_opens(
    actorbus_home: Any, monkeypatch: Any
) -> None:
    """A reminder is sealed on a session when it is set; it fires long after that
    session ended (sessions last minutes, reminders days), and is opened as it
    stood when it was sealed."""
    from actorbus.security import sessions

    monkeypatch.setattr(sessions, "SESSION_LIFETIME_MS", 1_000)
    async with secured_host(f"r{uuid.uuid4().hex[:8]}") as (_, _, host):
        await host.ask("rm-nudged/s", {"name": "late", "after": 2.5}, intent="remind")

        async def fired() -> Nudges | None:
            seen = await nudges(host, "rm-nudged/s")
            return seen if seen.notes else None

        assert (await eventually(fired, WAIT, "the late reminder")).notes == ["late"]
        assert await host.dead_letters("rm-nudged/s") == []
