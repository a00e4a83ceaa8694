"""Overload: an actor that falls behind keeps a bounded mailbox, drops what does not
fit where everyone can see it, and refuses asks at once instead of letting them
time out."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from typing import Any

import nats
import pytest
from _util import WAIT, barrier, run_host, subject_of

from actorbus import Actor, RateLimitedError, handler
from actorbus.actors.pipeline import encode_request
from actorbus.codecs.wire import DEFAULT_LIMITS, Encoding
from actorbus.testing import eventually

pytestmark = pytest.mark.transports("nats", "local")


class Gated(Actor):
    """Handles nothing until the test opens its gate."""

    type_name = "gated"
    mailbox_size = 50

    def __init__(self, gate: asyncio.Event, seen: list[int]) -> None:
        self.gate = gate
        self.seen = seen

    @handler(intent="take")
    async def take(self, n: Any) -> int:
        await self.gate.wait()
        self.seen.append(n)
        return n


class GatedDrop(Gated):
    type_name = "gated-drop"
    mailbox_overflow = "drop"


def tell_bytes(address: str, n: int) -> tuple[bytes, Any]:
    out = encode_request(
        address,
        n,
        client_address="client/test",
        encoding=Encoding.MSGPACK,
        limits=DEFAULT_LIMITS,
        intent="take",
    )
    return out.body, out.headers


async def flood(nc: Any, ns: str, address: str, count: int) -> None:
    subject = subject_of(ns, address)
    for n in range(count):
        body, headers = tell_bytes(address, n)
        await nc.publish(subject, body, headers=dict(headers_of(headers)))
    await barrier(nc)


def headers_of(block: bytes) -> dict[str, str]:
    lines = block.decode().split("\r\n")[1:]
    return dict(line.split(": ", 1) for line in lines if line)


@pytest.mark.parametrize("hosting", ["spawn", "register"])
async def test_a_full_mailbox_drops_tells_visibly_and_refuses_asks_at_once(
    system: Any, ns: str, hosting: str, caplog: Any, monkeypatch: Any
) -> None:
    from actorbus.actors import mailbox

    monkeypatch.setattr(mailbox, "REPORT_EVERY", 1.0)  # the reporting window, shortened
    gate, seen = asyncio.Event(), []
    events: list[dict[str, Any]] = []

    async def on_event(env: Any) -> None:
        events.append(env.content)

    await system.subscribe("actor.overloaded", on_event, system=True)
    if hosting == "spawn":
        await system.spawn(Gated, "a", gate=gate, seen=seen)
    else:
        await system.register(Gated, gate=gate, seen=seen)
    with caplog.at_level(logging.WARNING, logger="actorbus.mailbox"):
        await flood(system.nc, ns, "gated/a", 500)
        started = time.monotonic()
        with pytest.raises(RateLimitedError, match="gated/a is overloaded"):
            await system.ask("gated/a", 999, intent="take", timeout=5)
        assert time.monotonic() - started < 1.0  # refused, not timed out
        gate.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while len(seen) + system.runtime.mailboxes.dropped.get("gated/a", 0) < 501:
            assert loop.time() < deadline, (len(seen), system.runtime.mailboxes.dropped)
            await asyncio.sleep(0.02)
    dropped = system.runtime.mailboxes.dropped["gated/a"]
    assert len(seen) + dropped == 501  # every tell and the ask: handled or counted
    assert seen == sorted(seen)  # what was taken keeps its order
    assert len(seen) <= Gated.mailbox_size + 2  # the one in hand, the bound, nothing more
    assert any("gated/a is overloaded" in r.getMessage() for r in caplog.records)
    await barrier(system)
    assert events
    assert events[0]["address"] == "gated/a"
    assert await system.ask("gated/a", 1000, intent="take", timeout=2) == 1000
    # The reports add up to every drop: the first at once, the rest at the end of
    # the reporting window, not only the first one.
    await eventually(
        lambda: sum(e["dropped"] for e in events) == dropped,
        what=f"events reporting all {dropped} drops (got {[e['dropped'] for e in events]})",
        timeout=10.0,
    )
    assert events[-1]["dropped_total"] == dropped
    said = [r.getMessage() for r in caplog.records if "gated/a is overloaded" in r.getMessage()]
    assert f"({dropped} in all)" in said[-1]


async def test_drop_policy_lets_asks_time_out(system: Any, ns: str) -> None:
    gate, seen = asyncio.Event(), []
    await system.spawn(GatedDrop, "a", gate=gate, seen=seen)
    await flood(system.nc, ns, "gated-drop/a", 200)
    with pytest.raises(TimeoutError):
        await system.ask("gated-drop/a", 999, intent="take", timeout=0.5)
    assert system.runtime.mailboxes.dropped["gated-drop/a"] >= 200 - GatedDrop.mailbox_size - 1
    gate.set()


class GatedBytes(Gated):
    """A lazily hosted type whose keys may each hold 1 MiB of waiting messages."""

    type_name = "gated-bytes"
    mailbox_size = 10_000
    mailbox_bytes = 1024 * 1024


def big_tell_bytes(address: str, n: int) -> tuple[bytes, dict[str, str]]:
    out = encode_request(
        address,
        {"n": n, "pad": "x" * 50_000},
        client_address="client/test",
        encoding=Encoding.MSGPACK,
        limits=DEFAULT_LIMITS,
        intent="take",
    )
    return out.body, headers_of(out.headers)


async def test_a_lazily_hosted_keys_queue_is_bounded_by_bytes_too(system: Any, ns: str) -> None:
    """300 tells of 50 KB (15 MB) for one key of a registered type whose mailbox takes
    1 MiB: about 20 wait, the rest are dropped and counted, not kept by count alone."""
    gate, seen = asyncio.Event(), []
    await system.register(GatedBytes, gate=gate, seen=seen)
    subject = subject_of(ns, "gated-bytes/k")
    for n in range(300):
        body, headers = big_tell_bytes("gated-bytes/k", n)
        await system.nc.publish(subject, body, headers=headers)
    await barrier(system)
    kept = 1024 * 1024 // 50_000 + 2  # what fits 1 MiB, one in the handler, one of slack
    await eventually(  # all but those dropped while the handler is held: the bound holds
        lambda: system.runtime.mailboxes.dropped.get("gated-bytes/k", 0) >= 300 - kept,
        what="the tells past 1 MiB dropped",
    )
    gate.set()
    await eventually(
        lambda: len(seen) + system.runtime.mailboxes.dropped.get("gated-bytes/k", 0) == 300,
        what="every tell handled or counted",
    )
    assert len(seen) <= kept


@pytest.mark.parametrize("kind", ["sluggish", "blocking"])
async def test_an_overloaded_actor_process_stays_within_its_mailbox_bound(
    nats_server: Any, raw_nc: nats.NATS, ns: str, system: Any, kind: str
) -> None:
    """50,000 tells of 2 KB (100 MB) at full speed to an actor taking 1 ms each, in its
    own process: its memory grows by its mailbox bound (4 MiB) and change, not by the
    flood, and every tell is either handled or counted as dropped. Also when the
    handler blocks the event loop for its millisecond: the process keeps reading
    (NATS does not cut it off as a slow consumer, which would lose tells silently)."""
    target = "_actors:Sluggish" if kind == "sluggish" else "_actors:Blocking"
    async with run_host(target, nats_server.url, ns, "s") as host:
        address = f"{kind}/s"
        before = await stats(system, address)
        subject = subject_of(ns, address)
        blob, blob_headers = _blob_tell(address)  # the same 2 KB tell every time
        total = 50_000
        peak = before["rss_kb"]
        for i in range(total):
            await raw_nc.publish(subject, blob, headers=blob_headers)
            if i % 5_000 == 0:
                await raw_nc.flush()
                peak = max(peak, await rss_kb(host.pid))
        await barrier(raw_nc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            peak = max(peak, await rss_kb(host.pid))
            now = await stats(system, address)
            if now["handled"] + now["dropped"] - before["handled"] >= total:
                break
            assert loop.time() < deadline, now
            await asyncio.sleep(0.2)
        log = host.stderr_text().lower()
        assert "slow consumer" not in log
        assert "lost connection" not in log
    assert now["handled"] + now["dropped"] - before["handled"] == total
    assert now["dropped"] > 0
    growth_mb = (peak - before["rss_kb"]) / 1024
    print(f"handled {now['handled']}, dropped {now['dropped']}, RSS growth {growth_mb:.1f} MB")
    assert growth_mb < 40, f"RSS grew {growth_mb:.1f} MB"


def _blob_tell(address: str) -> tuple[bytes, dict[str, str]]:
    out = encode_request(
        address,
        b"x" * 2_000,
        client_address="client/test",
        encoding=Encoding.MSGPACK,
        limits=DEFAULT_LIMITS,
        intent="bytes",
    )
    return out.body, headers_of(out.headers)


async def stats(system: Any, address: str) -> dict[str, int]:
    while True:
        try:
            result: dict[str, int] = await system.ask(address, {}, intent="stats", timeout=WAIT)
            return result
        except RateLimitedError:
            await asyncio.sleep(0.05)


async def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:  # noqa: ASYNC230 - a tiny procfs read
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def test_a_blocked_event_loop_is_reported(system: Any, caplog: Any) -> None:
    """A handler doing blocking work stops the whole process from reading: say so."""
    with caplog.at_level(logging.WARNING, logger="actorbus.bus"):
        blocking_line = sys._getframe().f_lineno + 1
        time.sleep(0.8)  # noqa: ASYNC251 - the blocking work being reported
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while not any("event loop was blocked" in r.getMessage() for r in caplog.records):
            assert loop.time() < deadline
            await asyncio.sleep(0.05)
    assert system.runtime.conn.loop_watch.longest >= 0.5
    said = next(r.getMessage() for r in caplog.records if "blocked" in r.getMessage())
    # where: the line that blocked, seen by the watch's thread meanwhile
    assert f"test_overload.py:{blocking_line} in test_a_blocked_event_loop_is_reported" in said


def test_a_block_inside_a_library_is_said_with_the_users_line_that_called_it() -> None:
    """The innermost line of a block in a library (a socket read under an HTTP
    client) is not the one to change; the warning adds the user's own."""
    from actorbus.bus.loopwatch import _frames

    release = threading.Event()
    calling_line = 0

    def waits_in_the_library() -> None:
        nonlocal calling_line
        calling_line = sys._getframe().f_lineno + 1
        release.wait(WAIT)

    thread = threading.Thread(target=waits_in_the_library)
    thread.start()
    try:
        for _ in range(500):  # until it waits inside threading.py (bounded)
            frame = sys._current_frames().get(thread.ident or 0)
            if frame is not None and frame.f_code.co_filename == threading.__file__:
                break
            time.sleep(0.01)
        assert frame is not None
        said = _frames(frame)
    finally:
        release.set()
        thread.join(WAIT)
    innermost, _, users = said.partition(", from ")
    assert "threading.py:" in innermost, said
    assert users.endswith(f"test_overload.py:{calling_line} in waits_in_the_library"), said


class Busy(Actor):
    """A lazily hosted type whose every turn does a little work of its own."""

    type_name = "busy"

    handled = 0

    @handler
    async def work(self, _: dict[str, Any]) -> None:
        Busy.handled += 1
        spent = time.perf_counter() + 0.0005
        while time.perf_counter() < spent:
            pass


async def longest_turn_of_the_loop(stop: asyncio.Event) -> float:
    """The most CPU time the loop spent between two of its passes until ``stop``:
    how long it was held, whatever else the machine ran meanwhile."""
    longest, last = 0.0, time.process_time()
    while not stop.is_set():
        await asyncio.sleep(0)
        now = time.process_time()
        longest, last = max(longest, now - last), now
    return longest


@pytest.mark.transports("nats")  # the in-process bus hands messages over its own way
async def test_a_burst_to_a_lazily_hosted_type_keeps_the_process_reading(
    make_system: Any, monkeypatch: Any
) -> None:
    """Thousands of messages at once to a lazily hosted type (2 s of handlers'
    work): its shared subscription hands each to its key's instance, and it used
    to go through its whole queue without the loop getting a pass (on 3.12 the
    turns themselves ran inside it; on 3.11 all of them started together), with
    nothing read meanwhile. It gives the loop a turn after 2 ms of work."""
    monkeypatch.setattr(Busy, "handled", 0)
    host, sender = await make_system(), await make_system()
    await host.register(Busy)
    stop = asyncio.Event()
    probe = asyncio.create_task(longest_turn_of_the_loop(stop))
    for n in range(4_000):
        await sender.tell(f"busy/k{n % 50}", {})
    await eventually(lambda: Busy.handled >= 4_000, 30, "the burst handled")
    stop.set()
    assert await probe < 0.2  # about 0.1 s on 3.11 and 0.01 s on 3.12; 0.39 s held before
    assert host.runtime.conn.loop_watch is sender.runtime.conn.loop_watch  # one per loop


def test_a_late_loop_is_said_to_be_a_burst_when_many_messages_came_in(caplog: Any) -> None:
    """A loop late while thousands of messages came in was busy, not blocked by a
    handler (a blocking handler keeps the connections from reading): the warning
    gives the advice that fits (more processes)."""
    from actorbus.bus.loopwatch import BURST, LoopWatch

    with caplog.at_level(logging.WARNING, logger="actorbus.bus"):
        LoopWatch()._blocked(0.7, in_collector=0.0, arrived=BURST)
        LoopWatch()._blocked(0.7, in_collector=0.0, arrived=3)
    burst, block = (r.getMessage() for r in caplog.records)
    assert "1000 messages came in" in burst
    assert "--workers" in burst
    assert "a handler is doing blocking work" not in burst
    assert "a handler is doing blocking work" in block


@pytest.mark.transports("nats")  # the collector is the process's, whatever the bus
async def test_a_loop_blocked_by_the_garbage_collector_is_said_to_be_its(
    system: Any, caplog: Any
) -> None:
    """A full collection over many objects blocks the loop as a blocking handler
    does; the warning says which it was, so nobody hunts for a handler."""
    import gc

    kept = [[i] for i in range(2_000_000)]  # objects the collector walks
    try:
        with caplog.at_level(logging.WARNING, logger="actorbus.bus"):
            for _ in range(5):  # enough collections to block for over half a second
                gc.collect()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while not any("event loop was blocked" in r.getMessage() for r in caplog.records):
                assert loop.time() < deadline
                await asyncio.sleep(0.05)
        said = next(r.getMessage() for r in caplog.records if "blocked" in r.getMessage())
        assert "garbage collector" in said
        assert "handler" not in said
    finally:
        del kept


async def test_a_process_suspended_is_not_blamed_on_a_handler(
    nats_server: Any, tmp_path: Any
) -> None:
    """SIGSTOP stops the watch's own thread too: the warning says the process was
    suspended instead of sending the user looking for a blocking handler."""
    import os
    import signal

    from actorbus.testing import eventually

    child = (
        "import asyncio, logging\n"
        "from actorbus import ActorSystem\n"
        "logging.basicConfig(format='%(message)s')\n"
        "async def main():\n"
        f"    async with ActorSystem.connect({nats_server.url!r}, registry=False):\n"
        "        print('ready', flush=True)\n"
        "        await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", child, stdout=stdout, stderr=stderr
        )
    try:
        await eventually(lambda: b"ready" in out.read_bytes(), timeout=WAIT, what="ready")
        os.kill(proc.pid, signal.SIGSTOP)
        await asyncio.sleep(1.5)  # the suspension itself is what is tested
        os.kill(proc.pid, signal.SIGCONT)
        said = await eventually(lambda: err.read_text(), timeout=WAIT, what="a warning")
        assert "stood still for" in said, said
        assert "suspended" in said
        assert "a handler is doing blocking work" not in said
    finally:
        proc.kill()
        await proc.wait()
