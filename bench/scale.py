"""Figures of scale, each with its baseline in the same run, on one embedded
nats-server (loopback, open bus), every side in processes of its own
(``bench/_scale_side.py``):

- ``activations``: one host process receives N messages, each to a new key of a
  lazily hosted type (each activates an instance), from a sender process that
  publishes prebuilt envelopes; then the same N keys again: the baseline, the
  same path to instances that are there. Activations per second and their
  ratio to it; memory (RSS) and collector-tracked objects per idle activation;
  then passivation of all of them, its rate, and what came back. The same for a
  keyed type, whose activations each claim their key (``--keyed``, fewer),
  beside its own baselines: as many raw nats-py KV creates of such records, as
  many in flight as a host claims at once, before and after it, one by one
  (each a write the server syncs to disk) and in atomic batches as a host
  sends a burst of them (``bus/record_batches.py``).
- ``streaming``: an actor streams N small items (about 50 bytes) to a caller in
  this process, against raw nats-py pub/sub of the same items between the same
  two processes; and the time to the first item of a stream against an ask.
- ``fanout``: M messages published to a topic that 1,000 actors in 4 host
  processes subscribe to, against raw nats-py with 1,000 subscriptions in 4
  processes; deliveries per second. The actors are spawned under generated
  keys (they share a subscription per process); ``named`` is the same with
  keys given to them (a subscription each, as an address another process
  could also host needs).
- ``cluster``: ask and durable-send throughput (a caller in this process, 100
  in flight, over 16 actors per host) with 1, 2 and 4 hosting processes, on one
  node and on a 3-node cluster (durable streams with 3 replicas there, each host
  on a node of its own); for durable sends, stored/s (the caller's acks) and
  handled/s (until the hosts handled them all).

Rounds interleave the two sides of each comparison, in alternating order; the
report takes medians over rounds and of per-round ratios. Activations run
``--activation-rounds`` times (one by default: a million of them take minutes).

    python bench/scale.py [--only activations,streaming,fanout] [--rounds 5]
                          [--activations 1000000] [--keyed 50000]
                          [--activation-rounds 1] [--items 100000]
                          [--fan-messages 500] [--out bench/results] [--quick]

Writes ``scale.json`` and ``scale.png``. Every process started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import nats
from _harness import (
    compile_sources,
    machine_info,
    positive_int,
    presets,
    pyplot,
    report_console,
    write_report,
)
from _scale_side import FAN_TOPIC, Item, Ping, StreamRequest
from nats.js.api import KeyValueConfig, StorageType
from rich.console import Console
from rich.table import Table

from actorbus import ActorSystem
from actorbus.actors.placement import CLAIMS_AT_ONCE
from actorbus.bus.claims import RECORD_TTL
from actorbus.bus.record_batches import BATCH_MOST
from actorbus.bus.server import EmbeddedServer, ServerConfig

HERE = Path(__file__).resolve().parent
SIDE = str(HERE / "_scale_side.py")
NAMESPACE = "scale"
RAW_STREAM = "bench.scale.raw-stream"
RAW_FAN = "bench.scale.raw-fan"
FAN_PROCESSES = 4
FAN_ACTORS = 1_000
SECTIONS = ("activations", "streaming", "fanout", "cluster")
HOST_COUNTS = (1, 2, 4)
WORKERS_PER_HOST = 16
INFLIGHT = 100

DEFAULTS = {
    "rounds": 5,
    "activations": 1_000_000,
    "keyed": 50_000,
    "activation_rounds": 1,
    "items": 100_000,
    "first_items": 300,
    "fan_messages": 500,
    "cluster_rounds": 2,
    "cluster_asks": 10_000,
    "cluster_durable": 4_000,
}
QUICK = {
    "rounds": 2,
    "activations": 20_000,
    "keyed": 3_000,
    "items": 20_000,
    "first_items": 100,
    "fan_messages": 20,
    "cluster_rounds": 1,
    "cluster_asks": 1_000,
    "cluster_durable": 300,
}
GOALS = {
    "lazy_activations_per_s": 25_000,
    "keyed_activations_per_s": 5_000,
    "rss_per_activation": 1_536,
    "streaming_ratio": 0.5,
    "first_item_ratio": 1.2,
    "fanout_ratio": 0.7,
}


# -- child processes -----------------------------------------------------------------
@contextlib.asynccontextmanager
async def child(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """A side process; stopped (stdin closed, then SIGTERM, then SIGKILL) on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        SIDE,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 20,
    )
    try:
        yield proc
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def line_of(proc: asyncio.subprocess.Process, timeout: float, what: str) -> str:
    assert proc.stdout is not None
    try:
        raw = await asyncio.wait_for(proc.stdout.readline(), timeout)
    except TimeoutError:
        raise RuntimeError(f"{what}: nothing said within {timeout:g}s") from None
    if not raw:
        raise RuntimeError(f"{what}: the process ended (exit code {await proc.wait()})")
    return raw.decode().strip()


async def expect(proc: asyncio.subprocess.Process, said: str, timeout: float, what: str) -> None:
    line = await line_of(proc, timeout, what)
    if line != said:
        raise RuntimeError(f"{what}: said {line!r}, not {said!r}")


# -- activations ---------------------------------------------------------------------
async def activations(url: str, kind: str, n: int, console: Console) -> dict[str, Any]:
    """One host, three passes (activate, the same keys again, passivate)."""
    type_name = "scale-keyed" if kind == "keyed" else "scale-lazy"
    ns = f"{NAMESPACE}-{kind}-{time.monotonic_ns()}"
    result: dict[str, Any] = {"kind": kind, "n": n}
    budget = 60 + n / 1_000  # seconds a pass may take: generous, but bounded
    if kind == "keyed":
        raw_before = await raw_claims(url, n)
        batched_before = await raw_claims(url, n, batched=True)
    async with child("activations", url, ns, kind, str(n)) as host:
        for phase in ("activate", "warm"):
            await expect(host, "ready", 30, f"{kind} host")
            async with child("sender", url, ns, type_name, str(n)) as sender:
                line = await line_of(host, budget, f"{kind} host, {phase} pass")
                await sender.wait()
            result[phase] = json.loads(line)
            console.print(f"  {kind} {phase}: {result[phase]['per_s']:,.0f}/s")
        result["passivate"] = json.loads(await line_of(host, budget, f"{kind} passivation"))
    result["ratio"] = result["activate"]["per_s"] / result["warm"]["per_s"]
    if kind == "keyed":
        raw = statistics.mean((raw_before, await raw_claims(url, n)))
        batched = statistics.mean((batched_before, await raw_claims(url, n, batched=True)))
        result["raw_claims_per_s"] = raw
        result["claims_ratio"] = result["activate"]["per_s"] / raw
        result["raw_batched_claims_per_s"] = batched
        result["batched_claims_ratio"] = result["activate"]["per_s"] / batched
        console.print(
            f"  raw nats-py claims (KV creates, {CLAIMS_AT_ONCE} in flight): {raw:,.0f}/s "
            f"one by one, {batched:,.0f}/s in atomic batches of {BATCH_MOST}; keyed "
            f"activations {result['claims_ratio']:.2f}x / {result['batched_claims_ratio']:.2f}x"
        )
    return result


async def raw_claims(url: str, n: int, *, batched: bool = False) -> float:
    """KV creates of ``n`` new names, each a record like a keyed activation's claim
    (history 1, on disk, with its ttl), CLAIMS_AT_ONCE in flight: per second.
    ``batched``: as atomic batches of BATCH_MOST (``bus/record_batches.py``), the
    ceiling of what the server stores that way."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        bucket = f"scale-raw-claims-{time.monotonic_ns()}"
        kv = await js.create_key_value(
            KeyValueConfig(bucket=bucket, history=1, storage=StorageType.FILE)
        )
        info = (await kv.status()).stream_info
        await js.update_stream(
            dataclasses.replace(info.config, allow_msg_ttl=True, allow_atomic=batched)
        )
        at_once = CLAIMS_AT_ONCE // BATCH_MOST if batched else CLAIMS_AT_ONCE
        gate = asyncio.Semaphore(at_once)

        async def claim(i: int) -> None:
            async with gate:
                await kv.create(f"k{i}", b"holder", msg_ttl=RECORD_TTL)

        async def claim_batch(first: int) -> None:
            names = [f"k{i}" for i in range(first, min(first + BATCH_MOST, n))]
            batch_id = f"b{first}"
            async with gate:
                for seq, name in enumerate(names, 1):
                    headers = {
                        "Nats-Batch-Id": batch_id,
                        "Nats-Batch-Sequence": str(seq),
                        "Nats-Expected-Last-Subject-Sequence": "0",
                        "Nats-TTL": str(int(RECORD_TTL)),
                    }
                    if seq < len(names):
                        await nc.publish(f"$KV.{bucket}.{name}", b"holder", headers=headers)
                        continue
                    headers["Nats-Batch-Commit"] = "1"
                    ack = await nc.request(f"$KV.{bucket}.{name}", b"holder", headers=headers)
                    assert b'"error"' not in ack.data, ack.data

        started = time.perf_counter()
        if batched:
            await asyncio.gather(*(claim_batch(i) for i in range(0, n, BATCH_MOST)))
        else:
            await asyncio.gather(*(claim(i) for i in range(n)))
        rate = n / (time.perf_counter() - started)
        await js.delete_key_value(bucket)
        return rate
    finally:
        await nc.close()


# -- streaming -----------------------------------------------------------------------
async def stream_actorbus(system: ActorSystem, n: int) -> float:
    started = time.perf_counter()
    got = 0
    async for _ in system.stream("streamer/1", StreamRequest(n=n), returns=Item, timeout=30):
        got += 1
    assert got == n, f"stream gave {got} of {n} items"
    return n / (time.perf_counter() - started)


async def stream_raw(nc: Any, publisher: asyncio.subprocess.Process, n: int) -> float:
    done, count = asyncio.Event(), 0

    async def on_item(msg: Any) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    sub = await nc.subscribe(RAW_STREAM, cb=on_item, pending_msgs_limit=max(65_536, n))
    await nc.flush()
    assert publisher.stdin is not None
    started = time.perf_counter()
    publisher.stdin.write(b"go\n")
    await publisher.stdin.drain()
    await asyncio.wait_for(done.wait(), 60)
    rate = n / (time.perf_counter() - started)
    await sub.unsubscribe()
    return rate


async def first_items(system: ActorSystem, count: int) -> dict[str, float]:
    """p50 of an ask and of a stream's first item, asked alternately (µs)."""
    ask, first = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        await system.ask("streamer/1", Ping(), returns=Ping)
        t1 = time.perf_counter()
        items = system.stream("streamer/1", StreamRequest(n=1), returns=Item)
        await anext(aiter(items))
        t2 = time.perf_counter()
        async for _ in items:  # the end
            pass
        ask.append((t1 - t0) * 1e6)
        first.append((t2 - t1) * 1e6)
    return {"ask_p50_us": statistics.median(ask), "first_item_p50_us": statistics.median(first)}


async def streaming(url: str, n: int, firsts: int, rounds: int, console: Console) -> dict[str, Any]:
    ns = f"{NAMESPACE}-stream"
    per_round: list[dict[str, float]] = []
    async with (
        child("stream-host", url, ns) as host,
        child("raw-publisher", url, RAW_STREAM, str(n)) as publisher,
    ):
        await expect(host, "ready", 30, "stream host")
        await expect(publisher, "ready", 30, "raw publisher")
        nc = await nats.connect(url)
        try:
            async with ActorSystem.connect(url, namespace=ns, registry=False) as system:
                await stream_actorbus(system, min(n, 2_000))  # warm both paths
                await stream_raw(nc, publisher, n)
                for r in range(rounds):
                    row: dict[str, float] = {}
                    for side in ("actorbus", "raw") if r % 2 == 0 else ("raw", "actorbus"):
                        if side == "actorbus":
                            row["actorbus"] = await stream_actorbus(system, n)
                        else:
                            row["raw"] = await stream_raw(nc, publisher, n)
                    row.update(await first_items(system, firsts))
                    row["ratio"] = row["actorbus"] / row["raw"]
                    row["first_item_ratio"] = row["first_item_p50_us"] / row["ask_p50_us"]
                    per_round.append(row)
                    console.print(
                        f"  streaming round {r + 1}: actorbus {row['actorbus']:,.0f} items/s, "
                        f"raw {row['raw']:,.0f} msgs/s ({row['ratio']:.2f}x); first item "
                        f"{row['first_item_p50_us']:.0f} µs, ask {row['ask_p50_us']:.0f} µs"
                    )
        finally:
            await nc.close()
    return {"n": n, "rounds": per_round, "median": medians(per_round)}


# -- fan-out -------------------------------------------------------------------------
async def fan_round(url: str, side: str, messages: int, round_no: int) -> float:
    ns = f"{NAMESPACE}-fan-{round_no}-{side}"
    per = FAN_ACTORS // FAN_PROCESSES
    ours = side != "raw"
    role, target = ("fan-host", ns) if ours else ("fan-raw", RAW_FAN)
    named = ["named"] if side == "named" else []
    async with contextlib.AsyncExitStack() as stack:
        hosts = [
            await stack.enter_async_context(
                child(role, url, target, str(i), str(per), str(messages), *named)
            )
            for i in range(FAN_PROCESSES)
        ]
        for i, host in enumerate(hosts):
            await expect(host, "ready", 60, f"fan-out host {i}")
        body = {"headline": "x" * 32}
        send: Callable[[], Awaitable[None]]
        if ours:
            opening = ActorSystem.connect(url, namespace=ns, registry=False)
            system = await stack.enter_async_context(opening)

            def send() -> Awaitable[None]:
                return system.publish(FAN_TOPIC, body)
        else:
            nc = await nats.connect(url)
            stack.push_async_callback(nc.close)
            data = msgpack.packb(body)

            def send() -> Awaitable[None]:
                return nc.publish(RAW_FAN, data)

        started = time.perf_counter()
        for _ in range(messages):
            await send()
        for i, host in enumerate(hosts):
            await expect(host, "done", 120, f"{side} fan-out host {i}")
        took = time.perf_counter() - started
    return FAN_ACTORS * messages / took


async def fanout(url: str, messages: int, rounds: int, console: Console) -> dict[str, Any]:
    per_round: list[dict[str, float]] = []
    sides = ["actorbus", "named", "raw"]
    for r in range(rounds):
        row: dict[str, float] = {}
        for side in sides[r % 3 :] + sides[: r % 3]:  # each side first in turn
            row[side] = await fan_round(url, side, messages, r)
        row["ratio"] = row["actorbus"] / row["raw"]
        row["named_ratio"] = row["named"] / row["raw"]
        per_round.append(row)
        console.print(
            f"  fan-out round {r + 1}: actorbus {row['actorbus']:,.0f} deliveries/s "
            f"({row['ratio']:.2f}x), named {row['named']:,.0f} ({row['named_ratio']:.2f}x), "
            f"raw {row['raw']:,.0f}"
        )
    return {"messages": messages, "rounds": per_round, "median": medians(per_round)}


# -- cluster -------------------------------------------------------------------------
async def in_flight(count: int, call: Any) -> float:
    """``count`` calls, INFLIGHT at a time: calls per second."""
    calls = iter(range(count))

    async def worker() -> None:
        for i in calls:
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(INFLIGHT)))
    return count / (time.perf_counter() - started)


async def cluster_round(
    urls: list[str], topology: str, hosts: int, cfg: dict[str, int], tag: str
) -> dict[str, float]:
    from _scale_side import PROGRESS, Job, Tally

    from actorbus.bus.jetstream import DurableSettings

    ns = f"{NAMESPACE}-{tag}"
    replicas = 3 if topology == "cluster" else 1
    addresses = [f"work/h{i}-{j}" for i in range(hosts) for j in range(WORKERS_PER_HOST)]
    async with contextlib.AsyncExitStack() as stack:
        procs = [
            await stack.enter_async_context(
                child(
                    "work-host",
                    urls[i % len(urls)],
                    ns,
                    str(i),
                    str(WORKERS_PER_HOST),
                    str(replicas),
                )
            )
            for i in range(hosts)
        ]
        for i, proc in enumerate(procs):
            await expect(proc, "ready", 60, f"work host {i}")
        handled = [0] * hosts
        all_handled = asyncio.Event()
        durable_n = cfg["cluster_durable"]
        nc = await nats.connect(urls[0])
        stack.push_async_callback(nc.close)

        async def on_progress(msg: Any) -> None:
            handled[int(msg.subject.rsplit(".", 1)[1])] = int(msg.data)
            if sum(handled) >= durable_n:
                all_handled.set()

        await nc.subscribe(f"{PROGRESS}.*", cb=on_progress)
        settings = DurableSettings(replicas=replicas)
        async with ActorSystem.connect(
            urls[0], namespace=ns, registry=False, durable=settings
        ) as system:

            async def ask(i: int) -> None:
                await system.ask(addresses[i % len(addresses)], Job(n=i), returns=Job)

            async def tell(i: int) -> None:
                await system.tell(addresses[i % len(addresses)], Tally(n=i), durable=True)

            await in_flight(len(addresses) * 4, ask)  # warm: every actor, every path
            asks = await in_flight(cfg["cluster_asks"], ask)
            started = time.perf_counter()
            stored = await in_flight(durable_n, tell)
            await asyncio.wait_for(all_handled.wait(), 120)
            handled_per_s = durable_n / (time.perf_counter() - started)
    return {"asks_per_s": asks, "stored_per_s": stored, "handled_per_s": handled_per_s}


async def cluster(url: str, cfg: dict[str, int], console: Console) -> dict[str, Any]:
    from actorbus.bus.cluster import EmbeddedCluster

    rows: dict[str, list[dict[str, float]]] = {}
    async with EmbeddedCluster(3) as nodes:
        topologies = {"one node": [url], "cluster": nodes.urls}
        for r in range(cfg["cluster_rounds"]):
            for hosts in HOST_COUNTS:
                order = list(topologies) if (r + hosts) % 2 == 0 else list(topologies)[::-1]
                for topology in order:
                    tag = f"c{r}-{hosts}-{topology.replace(' ', '')}"
                    row = await cluster_round(topologies[topology], topology, hosts, cfg, tag)
                    rows.setdefault(f"{topology}/{hosts}", []).append(row)
                    console.print(
                        f"  cluster round {r + 1}, {topology}, {hosts} host(s): "
                        f"{row['asks_per_s']:,.0f} asks/s, durable {row['stored_per_s']:,.0f} "
                        f"stored/s, {row['handled_per_s']:,.0f} handled/s"
                    )
    return {"rounds": rows, "median": {k: medians(v) for k, v in rows.items()}}


# -- report --------------------------------------------------------------------------
def medians(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(row[k] for row in rows) for k in rows[0]}


def median_of(runs: Sequence[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for part in path:
            value = value[part]
        values.append(float(value))
    return statistics.median(values)


def verdicts(results: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(figure, measured, goal, met) for each goal this run measured."""
    out: list[tuple[str, str, str, bool]] = []
    for kind in ("lazy", "keyed"):
        runs = results.get("activations", {}).get(kind)
        if not runs:
            continue
        rate = median_of(runs, "activate", "per_s")
        goal = GOALS[f"{kind}_activations_per_s"]
        measured = f"{rate:,.0f}"
        if kind == "keyed":
            raw = median_of(runs, "raw_claims_per_s")
            batched = median_of(runs, "raw_batched_claims_per_s")
            measured += (
                f" ({median_of(runs, 'claims_ratio'):.2f}x of {raw:,.0f} raw claims/s one by one,"
                f" {median_of(runs, 'batched_claims_ratio'):.2f}x of {batched:,.0f} batched)"
            )
        out.append((f"{kind} activations/s", measured, f">= {goal:,}", rate >= goal))
        if kind == "lazy":
            rss = median_of(runs, "activate", "rss_per_activation")
            limit = GOALS["rss_per_activation"]
            out.append(
                ("memory per idle activation", f"{rss:,.0f} B", f"<= {limit:,} B", rss <= limit)
            )
    if "streaming" in results:
        m = results["streaming"]["median"]
        out.append(("streaming vs raw pub/sub", f"{m['ratio']:.2f}x", ">= 0.5x", m["ratio"] >= 0.5))
        out.append(
            (
                "first item vs ask (p50)",
                f"{m['first_item_ratio']:.2f}x",
                "<= 1.2x",
                m["first_item_ratio"] <= GOALS["first_item_ratio"],
            )
        )
    if "fanout" in results:
        m = results["fanout"]["median"]
        measured = f"{m['ratio']:.2f}x (named keys: {m['named_ratio']:.2f}x)"
        out.append(("fan-out vs raw", measured, ">= 0.7x", m["ratio"] >= 0.7))
    return out


def print_tables(console: Console, results: dict[str, Any]) -> None:
    acts = results.get("activations", {})
    if acts:
        table = Table(title="Activations in one host process (median over runs)")
        for col in (
            "type",
            "n",
            "activations/s",
            "warm msgs/s",
            "ratio",
            "RSS/activation",
            "objects/activation",
            "passivations/s",
            "objects returned",
            "RSS returned",
        ):
            table.add_column(col, justify="right")
        for kind, runs in acts.items():
            table.add_row(
                kind,
                f"{runs[0]['n']:,}",
                f"{median_of(runs, 'activate', 'per_s'):,.0f}",
                f"{median_of(runs, 'warm', 'per_s'):,.0f}",
                f"{median_of(runs, 'ratio'):.2f}x",
                f"{median_of(runs, 'activate', 'rss_per_activation'):,.0f} B",
                f"{median_of(runs, 'activate', 'objects_per_activation'):.2f}",
                f"{median_of(runs, 'passivate', 'per_s'):,.0f}",
                f"{median_of(runs, 'passivate', 'objects_returned'):.0%}",
                f"{median_of(runs, 'passivate', 'rss_returned'):.0%}",
            )
        console.print(table)
    if "cluster" in results:
        table = Table(title="Asks and durable sends by hosting processes (median over rounds)")
        for col in ("topology", "hosts", "asks/s", "durable stored/s", "durable handled/s"):
            table.add_column(col, justify="right")
        for key, m in results["cluster"]["median"].items():
            topology, hosts = key.split("/")
            table.add_row(
                topology,
                hosts,
                f"{m['asks_per_s']:,.0f}",
                f"{m['stored_per_s']:,.0f}",
                f"{m['handled_per_s']:,.0f}",
            )
        console.print(table)
    if not verdicts(results):
        return
    table = Table(title="Verdicts")
    for col in ("figure", "measured", "goal", "met"):
        table.add_column(col)
    for figure, measured, goal, met in verdicts(results):
        table.add_row(figure, measured, goal, "yes" if met else "NO")
    console.print(table)


def plot(path: Path, results: dict[str, Any]) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    bars: list[tuple[str, float, float]] = []  # (label, measured ratio, goal ratio)
    for kind in ("lazy", "keyed"):
        runs = results.get("activations", {}).get(kind)
        if runs:
            rate = median_of(runs, "activate", "per_s")
            goal = GOALS[f"{kind}_activations_per_s"]
            bars.append((f"{kind} activations\n(/ goal)", rate / goal, 1.0))
            if kind == "keyed":
                ratio = median_of(runs, "claims_ratio")
                bars.append(("keyed activations\n(/ raw claims)", ratio, float("nan")))
    if "streaming" in results:
        bars.append(("streaming\n(/ raw pub/sub)", results["streaming"]["median"]["ratio"], 0.5))
    if "fanout" in results:
        bars.append(("fan-out\n(/ raw)", results["fanout"]["median"]["ratio"], 0.7))
        named = results["fanout"]["median"]["named_ratio"]
        bars.append(("fan-out, named\n(/ raw)", named, float("nan")))
    panels = [bool(bars), "cluster" in results]
    fig, axes = plt.subplots(1, sum(panels) or 1, figsize=(6 * (sum(panels) or 1), 4))
    axes = list(axes) if sum(panels) > 1 else [axes]
    if bars:
        ax = axes.pop(0)
        xs = range(len(bars))
        ax.bar(xs, [b[1] for b in bars], color="#3b7dd8", label="measured")
        ax.scatter(xs, [b[2] for b in bars], color="#d83b3b", marker="_", s=900, label="goal")
        ax.set_xticks(list(xs), [b[0] for b in bars])
        ax.set_ylabel("ratio")
        ax.set_title("ratios to the baselines and goals")
        ax.legend()
    if "cluster" in results:
        ax = axes.pop(0)
        median = results["cluster"]["median"]
        for topology, style in (("one node", "-o"), ("cluster", "--s")):
            for figure, color in (("asks_per_s", "#3b7dd8"), ("handled_per_s", "#d8893b")):
                ys = [median[f"{topology}/{h}"][figure] for h in HOST_COUNTS]
                label = f"{topology}: {'asks' if figure == 'asks_per_s' else 'durable handled'}/s"
                ax.plot(HOST_COUNTS, ys, style, color=color, label=label)
        ax.set_xticks(list(HOST_COUNTS))
        ax.set_xlabel("hosting processes")
        ax.set_ylabel("per second")
        ax.set_title("asks and durable sends by hosting processes")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- main ----------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, dict[str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections, comma-separated")
    for name in DEFAULTS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=positive_int, default=None)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a minute")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    return args, presets(args, DEFAULTS, QUICK)


async def measure(
    url: str, only: set[str], cfg: dict[str, int], console: Console
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if "activations" in only:
        acts: dict[str, list[dict[str, Any]]] = {"lazy": [], "keyed": []}
        for r in range(cfg["activation_rounds"]):
            console.print(f"activations, run {r + 1} of {cfg['activation_rounds']}")
            acts["lazy"].append(await activations(url, "lazy", cfg["activations"], console))
            acts["keyed"].append(await activations(url, "keyed", cfg["keyed"], console))
        results["activations"] = acts
    if "streaming" in only:
        console.print("streaming")
        results["streaming"] = await streaming(
            url, cfg["items"], cfg["first_items"], cfg["rounds"], console
        )
    if "fanout" in only:
        console.print(f"fan-out: {FAN_ACTORS} actors in {FAN_PROCESSES} processes")
        results["fanout"] = await fanout(url, cfg["fan_messages"], cfg["rounds"], console)
    if "cluster" in only:
        console.print(f"cluster: 1, 2 and 4 hosts of {WORKERS_PER_HOST} actors each")
        results["cluster"] = await cluster(url, cfg, console)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args, cfg = parse_args(argv)
    only = set(args.only.split(","))
    console = report_console()
    compile_sources()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        with EmbeddedServer(ServerConfig(host="127.0.0.1")) as server:
            machine = machine_info(binary=server.binary, packages=("nats-py",), git=True)
            console.print(
                f"nats-server {machine['nats_server']} at {server.url}; Python "
                f"{machine['python']}; {machine['cpu_count']} CPUs; {cfg}"
            )
            results = asyncio.run(measure(server.url, only, cfg, console))
    except KeyboardInterrupt:
        console.print("interrupted; every process started was stopped")
        return 130
    print_tables(console, results)
    met = verdicts(results)
    data = {
        "benchmark": "actorbus at scale: activations, streaming, fan-out",
        "started": started,
        "config": {
            **cfg,
            "only": sorted(only),
            "fan_processes": FAN_PROCESSES,
            "fan_actors": FAN_ACTORS,
        },
        "goals": GOALS,
        "machine": machine,
        "results": results,
        "verdicts": [{"figure": f, "measured": m, "goal": g, "met": ok} for f, m, g, ok in met],
    }
    missed = [f for f, _, _, ok in met if not ok]
    if not met:
        verdict = "figures only: no goal for these sections"
    else:
        verdict = "every goal met" if not missed else f"goals not met: {', '.join(missed)}"
    write_report(console, args.out, "scale", data, lambda p: plot(p, results), verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
