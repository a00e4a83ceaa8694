"""Actor lifecycle: on_start/on_stop, lazy activation, graceful shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _util import WAIT, barrier
from pydantic import BaseModel

from actorbus import (
    Actor,
    ActorBusError,
    ActorSystem,
    InvalidAddressError,
    NoRespondersError,
    handler,
)

pytestmark = pytest.mark.transports("nats", "local")


class LcPing(BaseModel):
    pass


class LcInfo(BaseModel):
    key: str
    address: str
    instance: int
    started: bool
    handled: int


class Recorder:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, int]] = []
        self.stopped = asyncio.Event()

    def add(self, what: str, actor: Actor) -> None:
        self.log.append((what, actor.key, id(actor)))
        if what == "stop":
            self.stopped.set()

    def of(self, what: str) -> list[tuple[str, int]]:
        return [(key, inst) for w, key, inst in self.log if w == what]


class Lively(Actor):
    type_name = "lively"

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.started = False
        self.handled = 0

    async def on_start(self) -> None:
        await asyncio.sleep(0)  # a real on_start awaits something (a database, a model)
        self.started = True
        self.rec.add("start", self)

    async def on_stop(self) -> None:
        self.rec.add("stop", self)

    @handler
    async def info(self, _: LcPing) -> LcInfo:
        self.handled += 1
        self.rec.add("msg", self)
        return LcInfo(
            key=self.key,
            address=self.address,
            instance=id(self),
            started=self.started,
            handled=self.handled,
        )


async def test_on_start_runs_before_first_message(system) -> None:
    rec = Recorder()
    ref = await system.spawn(Lively, "a", rec=rec)
    assert [w for w, _, _ in rec.log] == ["start"]  # spawn returns once started
    info = await ref.ask(LcPing(), timeout=2)
    assert info.started is True
    assert (info.key, info.address) == ("a", "lively/a")
    assert [w for w, _, _ in rec.log] == ["start", "msg"]


async def test_on_stop_runs_on_close(make_system) -> None:
    rec = Recorder()
    host = await make_system()
    ref = await host.spawn(Lively, "a", rec=rec)
    await ref.ask(LcPing(), timeout=2)
    await host.close()
    assert [w for w, _, _ in rec.log] == ["start", "msg", "stop"]
    assert rec.of("start") == rec.of("stop")


async def test_on_stop_runs_on_stop_actor(system) -> None:
    rec = Recorder()
    await system.spawn(Lively, "a", rec=rec)
    await system.spawn(Lively, "b", rec=rec)
    await system.stop_actor("lively/a")
    assert [k for k, _ in rec.of("stop")] == ["a"]
    assert system.local_actors() == {"lively/b": 1}
    with pytest.raises(NoRespondersError):
        await system.ask("lively/a", LcPing(), timeout=2)
    assert (await system.ask("lively/b", LcPing(), timeout=2)).key == "b"


async def test_spawn_generates_a_key(system) -> None:
    rec = Recorder()
    ref = await system.spawn(Lively, rec=rec)
    type_, key = ref.address.split("/")
    assert type_ == "lively"
    assert key
    assert (await ref.ask(LcPing(), timeout=2)).key == key
    ref2 = await system.spawn(Lively, rec=rec)
    assert ref2.address != ref.address


@pytest.mark.parametrize("key", ["a.b", "a b", "", "*", "x>"])
async def test_spawn_rejects_bad_keys(system, key: str) -> None:
    with pytest.raises(InvalidAddressError):
        await system.spawn(Lively, key, rec=Recorder())


async def test_spawn_replicas_must_be_positive(system) -> None:
    with pytest.raises(ValueError, match="replicas"):
        await system.spawn(Lively, "a", replicas=0, rec=Recorder())


async def test_actor_identity_outside_a_handler(system) -> None:
    seen: dict[str, Any] = {}

    class Introspect(Actor):
        type_name = "introspect"

        async def on_start(self) -> None:
            seen["key"] = self.key
            seen["address"] = self.address
            seen["system"] = self.system
            try:
                _ = self.envelope
            except RuntimeError as exc:
                seen["envelope_error"] = str(exc)

        @handler
        async def ping(self, _: LcPing) -> str:
            return self.envelope.intent

    await system.spawn(Introspect, "me")
    assert seen["key"] == "me"
    assert seen["address"] == "introspect/me"
    assert seen["system"] is system
    assert "no message" in seen["envelope_error"]
    assert await system.ask("introspect/me", LcPing(), timeout=2) == "LcPing"


# -- lazy activation ---------------------------------------------------------


async def test_lazy_activation_on_first_message(system) -> None:
    rec = Recorder()
    await system.register(Lively, rec=rec)
    assert rec.log == []
    assert system.local_actors() == {}
    first = await system.ask("lively/k1", LcPing(), timeout=2)
    assert first.key == "k1"
    assert first.started is True
    assert first.handled == 1
    assert rec.of("start") == [("k1", first.instance)]
    again = await system.ask("lively/k1", LcPing(), timeout=2)
    assert again.instance == first.instance
    assert again.handled == 2
    other = await system.ask("lively/k2", LcPing(), timeout=2)
    assert other.key == "k2"
    assert other.instance != first.instance
    assert other.handled == 1
    assert system.local_actors() == {"lively/k1": 1, "lively/k2": 1}
    assert len(rec.of("start")) == 2


async def test_lazy_activation_of_many_keys_at_once(system) -> None:
    rec = Recorder()
    await system.register(Lively, rec=rec)
    keys = [f"k{i}" for i in range(10)]
    replies = await asyncio.gather(
        *(system.ask(f"lively/{k}", LcPing(), timeout=3) for k in keys for _ in range(3))
    )
    by_key: dict[str, set[int]] = {}
    for r in replies:
        by_key.setdefault(r.key, set()).add(r.instance)
    assert set(by_key) == set(keys)
    assert all(len(instances) == 1 for instances in by_key.values())
    assert sorted(k for k, _ in rec.of("start")) == sorted(keys)


async def test_lazy_anycast_uses_an_active_instance_or_default(system) -> None:
    rec = Recorder()
    await system.register(Lively, rec=rec)
    reply = await system.ask("lively", LcPing(), timeout=2)
    assert reply.key == "default"
    await system.ask("lively/x", LcPing(), timeout=2)
    keys = {(await system.ask("lively", LcPing(), timeout=2)).key for _ in range(6)}
    assert keys <= {"default", "x"}


async def test_lazy_instances_stop_on_close(make_system) -> None:
    rec = Recorder()
    host = await make_system()
    await host.register(Lively, rec=rec)
    await host.ask("lively/a", LcPing(), timeout=2)
    await host.ask("lively/b", LcPing(), timeout=2)
    await host.close()
    assert sorted(rec.of("stop")) == sorted(rec.of("start"))
    assert len(rec.of("stop")) == 2


async def test_register_twice_or_after_spawn_refused(system) -> None:
    await system.register(Lively, rec=Recorder())
    with pytest.raises(ValueError, match="already registered"):
        await system.register(Lively, rec=Recorder())

    class Other(Actor):
        type_name = "lc-other"

        @handler
        async def ping(self, _: LcPing) -> None:
            return None

    await system.spawn(Other, "x")
    with pytest.raises(ValueError, match="before spawning"):
        await system.register(Other)


# -- graceful shutdown ---------------------------------------------------------


async def wait_entered(held: Held, asking: asyncio.Future[Any]) -> None:
    """Wait until the handler runs; if the ask fails first, say how."""
    entered = asyncio.ensure_future(held.entered.wait())
    done, _ = await asyncio.wait({entered, asking}, timeout=WAIT, return_when="FIRST_COMPLETED")
    if entered not in done:
        entered.cancel()
        if asking in done:
            asking.result()  # raises the ask's error
        raise AssertionError("the handler was never entered")


class Held:
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.stopped = asyncio.Event()


class Holder(Actor):
    type_name = "holder"

    def __init__(self, held: Held) -> None:
        self.held = held

    async def on_stop(self) -> None:
        self.held.stopped.set()

    @handler
    async def hold(self, _: LcPing) -> str:
        self.held.entered.set()
        try:
            await self.held.release.wait()
        except asyncio.CancelledError:
            self.held.cancelled.set()
            raise
        self.held.finished.set()
        return "finished"


class WideHolder(Holder):
    type_name = "wide-holder"
    concurrency = 2


@pytest.mark.parametrize("cls", [Holder, WideHolder], ids=["concurrency1", "concurrency2"])
async def test_close_waits_for_in_flight_handler_and_delivers_reply(
    system, make_system, cls: type[Holder]
) -> None:
    held = Held()
    host = await make_system()
    await host.spawn(cls, "h", held=held)
    await barrier(host)
    asking = asyncio.ensure_future(system.ask(f"{cls.type_name}/h", LcPing(), timeout=5))
    try:
        await wait_entered(held, asking)
        closing = asyncio.ensure_future(host.close(timeout=5))
        done, _ = await asyncio.wait({closing}, timeout=0.3)
        assert not done, "close() returned while a handler was still running"
        assert not held.cancelled.is_set(), "close() cancelled the in-flight handler"
        assert not held.stopped.is_set(), "on_stop ran before the handler finished"
    finally:
        held.release.set()
    assert await asyncio.wait_for(asking, WAIT) == "finished"
    await asyncio.wait_for(closing, WAIT)
    assert held.finished.is_set()
    assert held.stopped.is_set()


async def test_close_is_bounded_when_a_handler_never_finishes(system, make_system) -> None:
    held = Held()
    host = await make_system()
    await host.spawn(WideHolder, "stuck", held=held)
    await barrier(host)
    asking = asyncio.ensure_future(system.ask("wide-holder/stuck", LcPing(), timeout=5))
    await wait_entered(held, asking)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(host.close(timeout=0.3), WAIT)
    assert loop.time() - started < 3.0
    await asyncio.wait_for(held.cancelled.wait(), WAIT)
    assert held.stopped.is_set()
    asking.cancel()
    with pytest.raises((asyncio.CancelledError, ActorBusError)):
        await asking


async def test_close_with_embedded_server_stops_it() -> None:
    rec = Recorder()
    async with ActorSystem.start() as system:
        server = system.server
        assert server is not None
        assert server.running
        await system.spawn(Lively, "a", rec=rec)
        assert (await system.ask("lively/a", LcPing(), timeout=2)).key == "a"
    assert not server.running
    assert [w for w, _, _ in rec.log] == ["start", "msg", "stop"]


async def test_close_twice_concurrently(make_system) -> None:
    host = await make_system()
    await host.spawn(Lively, "a", rec=Recorder())
    await asyncio.wait_for(asyncio.gather(host.close(), host.close()), WAIT)


async def test_stop_actor_waits_for_in_flight_handler(system, make_system) -> None:
    held = Held()
    host = await make_system()
    await host.spawn(Holder, "h", held=held)
    await barrier(host)
    asking = asyncio.ensure_future(system.ask("holder/h", LcPing(), timeout=5))
    try:
        await wait_entered(held, asking)
        stopping = asyncio.ensure_future(host.stop_actor("holder/h", timeout=5))
        done, _ = await asyncio.wait({stopping}, timeout=0.3)
        assert not done, "stop_actor() returned while a handler was still running"
        assert not held.cancelled.is_set(), "stop_actor() cancelled the in-flight handler"
    finally:
        held.release.set()
    assert await asyncio.wait_for(asking, WAIT) == "finished"
    await asyncio.wait_for(stopping, WAIT)
    assert held.stopped.is_set()


async def test_close_waits_for_lazy_actor_in_flight(system, make_system) -> None:
    held = Held()
    host = await make_system()
    await host.register(Holder, held=held)
    await barrier(host)
    asking = asyncio.ensure_future(system.ask("holder/lazy", LcPing(), timeout=5))
    try:
        await wait_entered(held, asking)
        closing = asyncio.ensure_future(host.close(timeout=5))
        done, _ = await asyncio.wait({closing}, timeout=0.3)
        assert not done
    finally:
        held.release.set()
    assert await asyncio.wait_for(asking, WAIT) == "finished"
    await asyncio.wait_for(closing, WAIT)
    assert held.stopped.is_set()


async def test_failing_on_stop_does_not_break_close(make_system) -> None:
    class BadStop(Actor):
        type_name = "bad-stop"

        async def on_stop(self) -> None:
            raise RuntimeError("cleanup failed")

        @handler
        async def ping(self, _: LcPing) -> str:
            return "pong"

    host = await make_system()
    await host.spawn(BadStop, "a")
    await host.spawn(Lively, "b", rec=(rec := Recorder()))
    assert await host.ask("bad-stop/a", LcPing(), timeout=2) == "pong"
    await asyncio.wait_for(host.close(), WAIT)
    assert [w for w, _, _ in rec.log] == ["start", "stop"]


async def test_close_does_not_strand_queued_messages(system, make_system) -> None:
    """Messages queued behind an in-flight handler when close() starts are either
    handled or refused with a typed error, never left to time out."""
    held = Held()
    host = await make_system()
    await host.spawn(Holder, "q", held=held)
    await barrier(host)
    first = asyncio.ensure_future(system.ask("holder/q", LcPing(), timeout=3))
    try:
        await wait_entered(held, first)
        queued = [
            asyncio.ensure_future(system.ask("holder/q", LcPing(), timeout=3)) for _ in range(3)
        ]
        await barrier(system)
        closing = asyncio.ensure_future(host.close(timeout=3))
    finally:
        held.release.set()
    assert await asyncio.wait_for(first, WAIT) == "finished"
    results = await asyncio.wait_for(asyncio.gather(*queued, return_exceptions=True), WAIT)
    await asyncio.wait_for(closing, WAIT)
    for result in results:
        assert result == "finished" or isinstance(result, ActorBusError), result
        assert not isinstance(result, TimeoutError), "a queued ask was dropped silently"


async def test_an_unknown_option_is_a_clear_error(nats_server) -> None:
    from actorbus import ActorSystem

    with pytest.raises(TypeError, match=r"unknown ActorSystem option.*namepsace"):
        await ActorSystem.connect(nats_server.url, namepsace="typo")  # type: ignore[call-arg]


async def test_a_placement_ttl_too_short_for_its_renewals_is_a_clear_error(nats_server) -> None:
    from actorbus import ActorSystem

    with pytest.raises(ValueError, match=r"placement_ttl \(8\) must be .* four times"):
        await ActorSystem.connect(nats_server.url, activation_ttl=5, placement_ttl=8)


async def test_typed_options_reach_the_system(nats_server, ns: str) -> None:
    from actorbus import ActorSystem, DurableSettings, Encoding

    settings = DurableSettings(backoff=(0.1,))
    async with ActorSystem.connect(
        nats_server.url, namespace=ns, encoding=Encoding.JSON, durable=settings, name="typed"
    ) as system:
        assert system.namespace == ns
        assert system.runtime.encoding is Encoding.JSON
        assert system.runtime.durable_settings is settings
        assert system.runtime.conn.options.name == "typed"


async def test_a_system_closed_while_it_announces_leaves_no_task_behind(
    nats_server: Any, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Open, spawn, close at once, 30 times: every announcement and renewal ends with
    its system (renewals of closed systems used to run on, a task or two a cycle)."""
    import logging

    from actorbus import ActorSystem

    before = {t.get_name() for t in asyncio.all_tasks()}
    with caplog.at_level(logging.WARNING, logger="actorbus.registry.store"):
        for _ in range(30):
            system = await ActorSystem.connect(nats_server.url, namespace=ns)
            await system.spawn(Lively, "c", rec=Recorder())
            await system.close(timeout=2)
    left = [
        name
        for t in asyncio.all_tasks()
        if (name := t.get_name()) not in before and ("renewal" in name or "announce" in name)
    ]
    assert left == []
    assert not [r for r in caplog.records if "renewing service" in r.getMessage()]
