"""Supervision: handler errors become typed replies, crashes restart the instance,
repeated start failures stop the actor with an ``actor.failed`` event; the
context (trace, session) follows calls made from inside handlers."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from _util import WAIT
from pydantic import BaseModel

from actorbus import (
    Actor,
    ActorBusError,
    ActorStoppedError,
    Crash,
    Encoding,
    Envelope,
    NoRespondersError,
    RemoteError,
    UnknownIntentError,
    ValidationFailedError,
    handler,
)

pytestmark = pytest.mark.transports("nats", "local")


class SvIncr(BaseModel):
    pass


class SvFail(BaseModel):
    how: str


class SvState(BaseModel):
    count: int
    instance: int
    starts: int


class Lives:
    def __init__(self) -> None:
        self.starts = 0
        self.stops = 0
        self.instances: list[int] = []
        self.restarted = asyncio.Event()


class Worker(Actor):
    type_name = "sv-worker"
    crash_on: ClassVar[tuple[type[BaseException], ...]] = (KeyError,)
    restart_backoff = (0.01, 0.05)

    def __init__(self, lives: Lives) -> None:
        self.lives = lives
        self.count = 0

    async def on_start(self) -> None:
        self.lives.starts += 1
        self.lives.instances.append(id(self))
        if self.lives.starts > 1:
            self.lives.restarted.set()

    async def on_stop(self) -> None:
        self.lives.stops += 1

    @handler
    async def incr(self, _: SvIncr) -> SvState:
        self.count += 1
        return SvState(count=self.count, instance=id(self), starts=self.lives.starts)

    @handler
    async def fail(self, f: SvFail) -> None:
        if f.how == "value":
            raise ValueError("bad value 42")
        if f.how == "crash":
            raise Crash("state is broken")
        if f.how == "key":
            raise KeyError("missing")
        if f.how == "typed":
            raise UnknownIntentError("a typed error passes through as itself")
        raise RuntimeError(f.how)


async def incr(system: Any, address: str = "sv-worker/w") -> SvState:
    result: SvState = await system.ask(address, SvIncr(), timeout=2)
    return result


async def test_handler_exception_becomes_remote_error(system) -> None:
    lives = Lives()
    await system.spawn(Worker, "w", lives=lives)
    with pytest.raises(RemoteError) as info:
        await system.ask("sv-worker/w", SvFail(how="value"), timeout=2)
    err = info.value
    assert err.remote_type == "ValueError"
    assert err.remote_message == "bad value 42"
    assert err.address == "sv-worker/w"
    assert str(err) == "ValueError in sv-worker/w: bad value 42"
    assert err.remote_traceback is None
    assert err.code == "E_HANDLER"


async def test_actor_keeps_serving_and_keeps_state_after_handler_error(system) -> None:
    lives = Lives()
    await system.spawn(Worker, "w", lives=lives)
    assert (await incr(system)).count == 1
    for _ in range(3):
        with pytest.raises(RemoteError):
            await system.ask("sv-worker/w", SvFail(how="value"), timeout=2)
    state = await incr(system)
    assert state.count == 2  # a plain exception is not a crash: same instance, same state
    assert lives.starts == 1


async def test_typed_errors_pass_through(system) -> None:
    await system.spawn(Worker, "w", lives=Lives())
    with pytest.raises(UnknownIntentError, match="passes through"):
        await system.ask("sv-worker/w", SvFail(how="typed"), timeout=2)


async def test_handler_error_on_tell_is_logged_and_actor_goes_on(system, caplog) -> None:
    await system.spawn(Worker, "w", lives=Lives())
    with caplog.at_level("WARNING", logger="actorbus.actors"):
        await system.tell("sv-worker/w", SvFail(how="value"))
        assert (await incr(system)).count == 1
    assert any("bad value 42" in r.getMessage() for r in caplog.records)


async def test_traceback_only_in_debug_mode(system, make_system) -> None:
    debug_host = await make_system(debug=True)
    await debug_host.spawn(Worker, "dbg", lives=Lives())
    with pytest.raises(RemoteError) as info:
        await system.ask("sv-worker/dbg", SvFail(how="value"), timeout=2)
    tb = info.value.remote_traceback
    assert tb is not None
    assert "Traceback" in tb
    assert "bad value 42" in tb
    assert "fail" in tb  # the handler's frame
    # and not in normal mode, even when the caller is in debug mode
    await system.spawn(Worker, "plain", lives=Lives())
    with pytest.raises(RemoteError) as info:
        await debug_host.ask("sv-worker/plain", SvFail(how="value"), timeout=2)
    assert info.value.remote_traceback is None


@pytest.mark.parametrize("how", ["crash", "key"], ids=["Crash", "crash_on"])
async def test_crash_restarts_with_fresh_state(system, how: str) -> None:
    lives = Lives()
    await system.spawn(Worker, "w", lives=lives)
    first = await incr(system)
    assert (await incr(system)).count == 2
    with pytest.raises(RemoteError) as info:
        await system.ask("sv-worker/w", SvFail(how=how), timeout=2)
    assert info.value.remote_type == ("Crash" if how == "crash" else "KeyError")
    after = await incr(system)
    assert after.count == 1, "state survived the restart"
    assert after.instance != first.instance, "same instance after a crash"
    assert after.starts == 2, "on_start did not run again"
    assert lives.stops == 1, "on_stop did not run for the crashed instance"
    assert lives.restarted.is_set()


async def test_restart_emits_restarting_event(system) -> None:
    events: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_event(env: Envelope) -> None:
        events.put_nowait(env)

    await system.subscribe("actor.restarting", on_event, system=True)
    await system.spawn(Worker, "w", lives=Lives())
    with pytest.raises(RemoteError):
        await system.ask("sv-worker/w", SvFail(how="crash"), timeout=2)
    env = await asyncio.wait_for(events.get(), WAIT)
    assert env.intent == "actor.restarting"
    assert env.content["address"] == "sv-worker/w"
    assert env.content["where"] == "handler"
    assert "state is broken" in env.content["error"]
    assert env.content["restarts"] == 1


async def test_messages_queued_during_restart_are_handled(system) -> None:
    lives = Lives()
    await system.spawn(Worker, "w", lives=lives)
    await system.tell("sv-worker/w", SvFail(how="crash"))
    replies = await asyncio.gather(*(incr(system) for _ in range(5)))
    assert sorted(r.count for r in replies) == [1, 2, 3, 4, 5]
    assert {r.starts for r in replies} == {2}


class Doomed(Actor):
    type_name = "sv-doomed"
    max_restarts = 2
    restart_backoff = (0.01, 0.02)
    attempts: ClassVar[list[int]] = []

    async def on_start(self) -> None:
        Doomed.attempts.append(id(self))
        raise ConnectionError("database unreachable")

    @handler
    async def ping(self, _: SvIncr) -> str:
        return "never"


async def watch_failed(system: Any) -> asyncio.Queue[Envelope]:
    failed: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_failed(env: Envelope) -> None:
        failed.put_nowait(env)

    await system.subscribe("actor.failed", on_failed, system=True)
    return failed


async def test_on_start_always_failing_stops_actor_and_emits_failed(system) -> None:
    Doomed.attempts.clear()
    failed = await watch_failed(system)
    with pytest.raises(ActorBusError, match="sv-doomed/d"):
        await system.spawn(Doomed, "d")
    env = await asyncio.wait_for(failed.get(), WAIT)
    assert env.intent == "actor.failed"
    assert env.content["address"] == "sv-doomed/d"
    assert env.content["where"] == "on_start"
    assert "database unreachable" in env.content["error"]
    assert env.content["restarts"] == 2
    assert len(Doomed.attempts) == 3  # first start + max_restarts
    assert "sv-doomed/d" not in system.local_actors()
    with pytest.raises(NoRespondersError):
        await system.ask("sv-doomed/d", SvIncr(), timeout=2)


async def test_lazy_actor_failing_on_start_answers_stopped(system) -> None:
    Doomed.attempts.clear()
    failed = await watch_failed(system)
    await system.register(Doomed)
    with pytest.raises(ActorStoppedError, match="sv-doomed/lazy"):
        await system.ask("sv-doomed/lazy", SvIncr(), timeout=3)
    env = await asyncio.wait_for(failed.get(), WAIT)
    assert env.content["address"] == "sv-doomed/lazy"
    assert len(Doomed.attempts) == 3


class Fragile(Actor):
    """Starts once, then every restart fails: a crash ends with the actor stopped."""

    type_name = "sv-fragile"
    max_restarts = 2
    restart_backoff = (0.01, 0.02)
    starts: ClassVar[int] = 0

    async def on_start(self) -> None:
        Fragile.starts += 1
        if Fragile.starts > 1:
            raise RuntimeError("cannot come back")

    @handler
    async def crash(self, _: SvFail) -> None:
        raise Crash("fatal")

    @handler
    async def ping(self, _: SvIncr) -> str:
        return "alive"


async def test_crash_then_failing_restarts_stop_the_actor(system) -> None:
    Fragile.starts = 0
    failed = await watch_failed(system)
    await system.spawn(Fragile, "f")
    assert await system.ask("sv-fragile/f", SvIncr(), timeout=2) == "alive"
    with pytest.raises(RemoteError, match="fatal"):
        await system.ask("sv-fragile/f", SvFail(how="crash"), timeout=2)
    env = await asyncio.wait_for(failed.get(), WAIT)
    assert env.content["address"] == "sv-fragile/f"
    assert "cannot come back" in env.content["error"]
    assert "sv-fragile/f" not in system.local_actors()
    with pytest.raises((NoRespondersError, ActorStoppedError)):
        await system.ask("sv-fragile/f", SvIncr(), timeout=2)


async def test_restart_window_forgets_old_restarts(system) -> None:
    class Flappy(Actor):
        type_name = "sv-flappy"
        max_restarts = 1
        restart_window = 0.02
        restart_backoff = (0.06, 0.06)  # each restart waits >= 0.03 s, longer than the window

        @handler
        async def crash(self, _: SvFail) -> None:
            raise Crash("again")

        @handler
        async def ping(self, _: SvIncr) -> str:
            return "alive"

    await system.spawn(Flappy, "f")
    for _ in range(3):
        with pytest.raises(RemoteError):
            await system.ask("sv-flappy/f", SvFail(how="crash"), timeout=2)
        assert await system.ask("sv-flappy/f", SvIncr(), timeout=2) == "alive"


# -- context travels with calls made inside handlers ---------------------------


class CtxCall(BaseModel):
    then: str | None = None


class CtxSeen(BaseModel):
    id: str
    src: str
    trace_id: str | None
    parent_id: str | None
    session_id: str | None
    downstream: CtxSeen | None = None


class Hop(Actor):
    type_name = "sv-hop"

    @handler
    async def call(self, c: CtxCall) -> CtxSeen:
        env = self.envelope
        downstream = None
        if c.then:
            downstream = await self.ask(c.then, CtxCall(), timeout=2)
        return CtxSeen(
            id=env.id,
            src=env.src,
            trace_id=env.context.trace_id,
            parent_id=env.context.parent_id,
            session_id=env.context.session_id,
            downstream=downstream,
        )


async def test_trace_and_session_follow_calls_from_handlers(system) -> None:
    await system.spawn(Hop, "a")
    await system.spawn(Hop, "b")
    await system.spawn(Hop, "c")
    first = await system.ask("sv-hop/a", CtxCall(then="sv-hop/b"), session_id="sess-7", timeout=3)
    second = first.downstream
    assert second is not None
    assert first.src == system.client_address
    assert first.session_id == "sess-7"
    assert first.trace_id is not None
    assert len(first.trace_id) == 32
    assert second.trace_id == first.trace_id
    assert second.session_id == "sess-7"
    assert second.parent_id == first.id
    assert second.src == "sv-hop/a"


async def test_each_top_level_call_gets_its_own_trace(system) -> None:
    await system.spawn(Hop, "a")
    one = await system.ask("sv-hop/a", CtxCall(), timeout=2)
    two = await system.ask("sv-hop/a", CtxCall(), timeout=2)
    assert one.trace_id != two.trace_id
    assert one.session_id is None
    assert one.parent_id is None


async def test_context_follows_tell_from_handler(system) -> None:
    seen: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()

    class Sink(Actor):
        type_name = "sv-sink"

        @handler
        async def take(self, _: dict[str, Any]) -> None:
            if not seen.done():
                seen.set_result(self.envelope)

    class Forwarder(Actor):
        type_name = "sv-forwarder"

        @handler
        async def fwd(self, _: CtxCall) -> str:
            await self.tell("sv-sink/s", {"x": 1})
            return self.envelope.context.trace_id or ""

    await system.spawn(Sink, "s")
    await system.spawn(Forwarder, "f")
    trace = await system.ask("sv-forwarder/f", CtxCall(), session_id="s-9", timeout=2)
    env = await asyncio.wait_for(seen, WAIT)
    assert env.context.trace_id == trace
    assert env.context.session_id == "s-9"
    assert env.src == "sv-forwarder/f"


async def collect(stream: Any, into: list[Any]) -> None:
    async for item in stream:
        into.append(item)


class StreamCrasher(Actor):
    type_name = "sv-stream-crasher"
    restart_backoff = (0.01, 0.02)

    def __init__(self, lives: Lives) -> None:
        self.lives = lives
        self.count = 0

    async def on_start(self) -> None:
        self.lives.starts += 1

    @handler
    async def incr(self, _: SvIncr) -> SvState:
        self.count += 1
        return SvState(count=self.count, instance=id(self), starts=self.lives.starts)

    @handler
    async def items(self, _: SvFail) -> Any:
        yield {"i": 0}
        raise Crash("stream state is broken")


async def test_crash_in_streaming_handler_restarts(system) -> None:
    lives = Lives()
    await system.spawn(StreamCrasher, "s", lives=lives)
    first = await system.ask("sv-stream-crasher/s", SvIncr(), timeout=2)
    assert first.count == 1
    got: list[Any] = []
    with pytest.raises(RemoteError, match="stream state is broken"):
        await collect(system.stream("sv-stream-crasher/s", SvFail(how="x"), timeout=2), got)
    assert got == [{"i": 0}]
    after = await system.ask("sv-stream-crasher/s", SvIncr(), timeout=2)
    assert after.count == 1, "Crash raised in a streaming handler did not restart the instance"
    assert after.instance != first.instance
    assert lives.starts == 2


async def test_on_start_failing_once_is_retried(system) -> None:
    attempts: list[int] = []

    class Flaky(Actor):
        type_name = "sv-flaky-start"
        restart_backoff = (0.01, 0.02)

        async def on_start(self) -> None:
            attempts.append(id(self))
            if len(attempts) == 1:
                raise ConnectionError("not yet")

        @handler
        async def ping(self, _: SvIncr) -> int:
            return id(self)

    await system.spawn(Flaky, "f")
    assert len(attempts) == 2
    assert await system.ask("sv-flaky-start/f", SvIncr(), timeout=2) == attempts[1]


async def test_returns_model_mismatch_is_validation_error(system) -> None:
    await system.spawn(Worker, "w", lives=Lives())
    with pytest.raises(ValidationFailedError, match="SvFail"):
        await system.ask("sv-worker/w", SvIncr(), returns=SvFail, timeout=2)


async def test_handler_error_reaches_a_json_caller(system, make_system) -> None:
    await system.spawn(Worker, "w", lives=Lives())
    json_client = await make_system(encoding=Encoding.JSON)
    with pytest.raises(RemoteError) as info:
        await json_client.ask("sv-worker/w", SvFail(how="value"), timeout=2)
    assert info.value.remote_type == "ValueError"
    assert info.value.remote_message == "bad value 42"


def test_handler_failures_are_logged_with_tracebacks_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler failing thousands of times a second logs a burst, then a line now and
    then that says how many it held back; each line carries the traceback."""
    import logging

    from actorbus.actors import failure_log

    now = [100.0]
    monkeypatch.setattr(failure_log.time, "monotonic", lambda: now[0])
    failures = failure_log.FailureLog(burst=3, per_minute=60.0)

    def fail(n: int) -> None:
        try:
            raise KeyError(f"k{n}")
        except KeyError as exc:
            failures.handler_failed("buggy", "buggy/1.look_up", f"m{n}", exc)

    with caplog.at_level(logging.ERROR, logger="actorbus.actors"):
        for n in range(1000):
            fail(n)
        now[0] += 1.0  # one more allowed a second
        fail(1000)
    lines = [r for r in caplog.records if "buggy/1.look_up failed" in r.getMessage()]
    assert len(lines) == 4
    assert all(r.exc_info and r.exc_info[0] is KeyError for r in lines)
    assert "997 more failure(s) of buggy not logged" in lines[-1].getMessage()
