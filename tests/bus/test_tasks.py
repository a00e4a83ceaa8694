"""Background tasks: supervised loops restart, one-shot failures are logged, and no
stop can hang, even on a task that swallows its cancellation (as
``asyncio.wait_for`` can on Python 3.11)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import pytest

from actorbus.bus.registration import Registration
from actorbus.bus.tasks import LoopPasses, YieldEvery, spawn, stop_task, supervise
from actorbus.codecs.uap import ephemeral_service
from actorbus.services.registry.store import RegistryStore


async def test_a_supervised_loop_that_crashes_is_restarted_and_logged(caplog: Any) -> None:
    runs: list[int] = []
    again = asyncio.Event()

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise RuntimeError(f"crash {len(runs)}")
        again.set()
        await asyncio.sleep(3600)

    with caplog.at_level(logging.ERROR, logger="actorbus.tasks"):
        task = supervise("flaky reader", flaky, backoff=(0.01, 0.05))
        await asyncio.wait_for(again.wait(), 5)
        assert await stop_task(task, 2)
    assert len(runs) == 3
    crashes = [r for r in caplog.records if "flaky reader crashed" in r.getMessage()]
    assert len(crashes) == 2
    assert crashes[0].exc_info is not None  # the traceback is in the log


async def test_a_one_shot_failure_is_logged_not_left_unretrieved(caplog: Any) -> None:
    tasks: set[asyncio.Task[Any]] = set()

    async def boom() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="actorbus.tasks"):
        task = spawn(boom(), "one-shot", tasks)
        await asyncio.wait({task})
        await asyncio.sleep(0)
    assert not tasks
    assert any("one-shot failed" in r.getMessage() for r in caplog.records)


async def test_an_eager_task_runs_at_once_where_python_can_and_is_its_own_task() -> None:
    seen: list[Any] = []
    go_on = asyncio.Event()

    async def turn() -> None:
        seen.append(asyncio.current_task())
        await go_on.wait()
        seen.append("after its wait")

    tasks: set[asyncio.Task[Any]] = set()
    task = spawn(turn(), "eager turn", tasks, eager=True)
    # Python 3.12+ runs it up to its first wait inside spawn(); 3.11 cannot.
    assert seen == ([task] if sys.version_info >= (3, 12) else [])
    assert task in tasks
    go_on.set()
    await asyncio.wait_for(task, 5)
    assert seen == [task, "after its wait"]
    await asyncio.sleep(0)  # its done-callback runs on the next pass
    assert not tasks


async def test_an_eager_task_that_fails_at_once_is_logged(caplog: Any) -> None:
    async def boom() -> None:
        raise ValueError("boom at once")

    with caplog.at_level(logging.ERROR, logger="actorbus.tasks"):
        task = spawn(boom(), "eager one-shot", eager=True)
        await asyncio.wait({task})
        await asyncio.sleep(0)
    assert any("eager one-shot failed" in r.getMessage() for r in caplog.records)


async def test_stop_task_stops_a_task_that_swallows_cancellation() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed >= 3:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert await stop_task(task, 5)
    assert swallowed == 3


async def test_stop_task_gives_up_on_a_task_that_never_stops_instead_of_hanging(
    caplog: Any,
) -> None:
    released = asyncio.Event()

    async def immortal() -> None:
        while not released.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(immortal())
    await asyncio.sleep(0)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="actorbus.tasks"):
        assert not await stop_task(task, 0.5, what="immortal")
    assert time.monotonic() - started < 2.0
    assert any("immortal did not stop" in r.getMessage() for r in caplog.records)
    released.set()  # the test's own clean-up: let it end
    task.cancel()
    await asyncio.wait({task}, timeout=2)
    assert task.done()


@pytest.fixture
async def store(nats_server: Any, ns: str) -> Any:
    import nats

    nc = await nats.connect(nats_server.url)
    store = await RegistryStore.open(nc.jetstream(), ns)
    try:
        yield store
    finally:
        await store.close()
        await nc.close()


async def test_registration_stop_never_hangs_while_renewing(store: RegistryStore) -> None:
    """The renewal loop is mid-wait for the mirror most of the time (interval 10 ms
    and a busy bucket); every stop must return, bounded, and leave nothing renewing."""
    noise = ephemeral_service("noise", service_id="noise", renewal_interval=0.01)
    churn = Registration(store, noise)
    await churn.start()  # keeps the mirror changing under the others
    try:
        for i in range(40):
            record = ephemeral_service(
                "echo",
                service_id=f"sys-{i}",
                renewal_interval=0.01,
                unhealthy_after=2,
                delete_after=5,
            )
            reg = Registration(store, record)
            await reg.start()
            await asyncio.sleep(0.005 * (i % 4))
            async with asyncio.timeout(10):
                await reg.stop()
            assert reg._task is None
    finally:
        await churn.stop()


async def test_a_cancelled_wait_for_news_is_never_swallowed(nats_server: Any, ns: str) -> None:
    """The 3.11 race behind the hanging ``Registration.stop()``: news arrives in the
    same instant as the cancellation. The waiter must still be cancelled."""
    import nats
    from nats.js.api import KeyValueConfig

    from actorbus.bus.bucket_mirror import BucketMirror

    nc = await nats.connect(nats_server.url)
    try:
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=f"{ns}-news"))
        mirror = BucketMirror(kv, lambda *_: None, "news")
        await mirror.start(5)
        try:
            for _ in range(20):
                waiting = asyncio.create_task(mirror.next_change(10))
                await asyncio.sleep(0)  # inside its wait
                mirror._notify()  # news arrives (what the watcher does) ...
                waiting.cancel()  # ... as the owner cancels
                with pytest.raises(asyncio.CancelledError):
                    await waiting
        finally:
            await mirror.stop()
    finally:
        await nc.close()


def _busy(seconds: float) -> None:
    """Work that never waits (a handler doing blocking work)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_the_loop_passes_counted_change_only_when_the_loop_runs() -> None:
    passes = LoopPasses()
    first = passes.seen()
    _busy(0.01)
    assert passes.seen() == first  # nothing awaited: the loop has not run
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert passes.seen() == first + 1


async def test_work_back_to_back_gives_the_loop_a_turn_and_work_that_waited_does_not() -> None:
    """The turn is due after ``every`` seconds of work with no pass of the loop
    between; a pause that let the loop run starts the count again, however short
    (the clock alone took a loaded actor's steady batches for one long run)."""
    turns = YieldEvery(every=0.5)
    started = time.monotonic()
    _busy(0.2)
    assert not turns.due(started)
    started = time.monotonic()
    _busy(0.35)  # no await: 0.55 s back to back
    assert turns.due(started)
    for _ in range(3):  # 0.6 s of work since the turn, with the loop run in between
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        started = time.monotonic()
        _busy(0.2)
        assert not turns.due(started)
