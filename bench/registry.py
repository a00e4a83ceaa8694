"""Registry benchmark: discovery lookups per second, blocking-query wake-up latency,
and the activation latency of a keyed (virtual) actor on its first message.

One embedded nats-server (loopback, JetStream, ``sync_interval: always``), one
registry instance in its own OS process (``python -m actorbus.services.registry``,
HTTP on 127.0.0.1), and this process as the client, holding two
``RegistryStore`` s on the same namespace: a *reader* (the in-memory mirror an
ActorSystem would use for discovery) and a *writer* (a registrant).

Measurements, each run in every round (the order alternates between rounds):

- ``lookups``: discovery reads of ``--services`` registered services (20 names,
  8 tags): ``store.get_service(id)``, ``store.services_named(name)`` and
  ``store.list_services(tags=[t])`` from the mirror; ``GET /services/{name}``
  over HTTP one at a time (with its latency) and with ``--inflight`` in flight;
  ``GET /services`` (every service, JSON) one at a time.
- ``wakeup``: ``--wakeups`` times, a blocking ``GET /services?index=I&wait=10s``
  and a ``store.wait_for_change(I)`` are parked, then the writer updates a
  service; the latency is from the start of that write to each waiter's wake-up
  (it includes the write itself: publish, fsync, ack). p50/p95/p99 in ms.

- ``activation``: ``--wakeups`` times, an ask to a new key of a keyed actor type
  (the host takes the activation lease, then creates the instance), to a new
  key of a lazily hosted type without single activation (the baseline), and to
  an already active key; p50/p95/p99 in ms. Host and caller are two
  ActorSystems in this process.

More measurements are added by appending a :class:`Measurement` to
``MEASUREMENTS``: each round runs every entry with the shared :class:`Context`,
and the per-round table, the medians and the JSON pick its metrics up.

    python bench/registry.py [--rounds 5] [--services 200] [--lookups 20000]
                             [--http 2000] [--inflight 16] [--wakeups 200]
                             [--out bench/results] [--quick]

Prints one line per measurement and round, then a table of medians over rounds;
writes ``registry.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import nats
from _harness import (
    machine_info,
    percentile,
    positive_int,
    presets,
    pyplot,
    report_console,
    stop_processes,
    write_report,
)
from rich.console import Console
from rich.table import Table

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.uap import ServiceResponse
from actorbus.services.registry.store import RegistryStore

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
NAMES = 20
TAGS = 8
WAKE_TAG = "wake"
PARK = 0.01  # seconds for a blocking query to reach the registry and park there
READY_TIMEOUT = 60.0

DEFAULTS = {"rounds": 5, "services": 200, "lookups": 20_000, "http": 2000, "wakeups": 200}
QUICK = {"rounds": 1, "services": 50, "lookups": 2000, "http": 200, "wakeups": 20}


@dataclass(frozen=True)
class Config:
    rounds: int
    services: int
    lookups: int
    http: int
    inflight: int
    wakeups: int
    out: Path
    quick: bool


@dataclass
class Context:
    """What every measurement may use; set up once per run."""

    nats_url: str
    http_url: str
    namespace: str
    reader: RegistryStore
    writer: RegistryStore
    http: aiohttp.ClientSession
    ids: list[str]
    names: list[str]
    tags: list[str]
    rng: random.Random = field(default_factory=lambda: random.Random(20261123))


Metrics = dict[str, float]
Summary = dict[str, dict[str, dict[str, float]]]  # measurement -> figure -> median/min/max


@dataclass(frozen=True)
class Measurement:
    """One thing measured every round: ``run`` returns named figures (higher
    ``/s`` figures are better, ``_ms`` and ``_us`` figures are latencies)."""

    name: str
    what: str
    run: Callable[[Context, Config], Awaitable[Metrics]]


# -- lookups -----------------------------------------------------------------------


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


async def measure_lookups(ctx: Context, cfg: Config) -> Metrics:
    rng, store = ctx.rng, ctx.reader
    ids = [rng.choice(ctx.ids) for _ in range(cfg.lookups)]
    names = [rng.choice(ctx.names) for _ in range(cfg.lookups)]
    out: Metrics = {}

    t = time.perf_counter()
    for sid in ids:
        store.get_service(sid)
    out["store_get_per_s"] = rate(len(ids), time.perf_counter() - t)
    t = time.perf_counter()
    for name in names:
        store.services_named(name)
    out["store_named_per_s"] = rate(len(names), time.perf_counter() - t)
    n = max(1, cfg.lookups // 10)
    t = time.perf_counter()
    for tag in (rng.choice(ctx.tags) for _ in range(n)):
        store.list_services(tags=[tag])
    out["store_list_tag_per_s"] = rate(n, time.perf_counter() - t)

    async def get(path: str) -> None:
        async with ctx.http.get(ctx.http_url + path) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}")

    paths = [f"/services/{rng.choice(ctx.names)}" for _ in range(cfg.http)]
    lat: list[float] = []
    t = time.perf_counter()
    for path in paths:
        t1 = time.perf_counter()
        await get(path)
        lat.append(time.perf_counter() - t1)
    out["http_named_per_s"] = rate(len(paths), time.perf_counter() - t)
    lat.sort()
    out["http_named_p50_ms"] = percentile(lat, 0.5) * 1000
    out["http_named_p99_ms"] = percentile(lat, 0.99) * 1000

    pending = list(paths)

    async def worker() -> None:
        while pending:
            await get(pending.pop())

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cfg.inflight)))
    out["http_named_concurrent_per_s"] = rate(len(paths), time.perf_counter() - t)

    n = max(1, cfg.http // 10)
    t = time.perf_counter()
    for _ in range(n):
        await get("/services")
    out["http_list_all_per_s"] = rate(n, time.perf_counter() - t)
    return out


# -- wake-up -----------------------------------------------------------------------


async def measure_wakeup(ctx: Context, cfg: Config) -> Metrics:
    waker = await ctx.writer.put_service(service(ctx.namespace, "wake", 0, tags=[WAKE_TAG]))
    while ctx.reader.services_index < waker.index:  # the reader starts from the same index
        await ctx.reader.wait_for_change(ctx.reader.services_index, 5.0, "services")
    http_ms: list[float] = []
    store_ms: list[float] = []
    write_ms: list[float] = []
    early = 0
    for i in range(cfg.wakeups):
        index = ctx.reader.services_index
        woke: dict[str, float] = {}
        url = f"{ctx.http_url}/services?index={index}&wait=10s&tag={WAKE_TAG}"
        http_task = asyncio.create_task(fetch(ctx.http, url))
        http_task.add_done_callback(stamp(woke, "http"))
        store_task = asyncio.create_task(ctx.reader.wait_for_change(index, 10.0, "services"))
        store_task.add_done_callback(stamp(woke, "store"))
        await asyncio.sleep(PARK)
        woke_early = bool(woke)  # before any write: would be a bug, so it is counted
        t0 = time.perf_counter()
        waker = await ctx.writer.put_service(
            waker.model_copy(update={"port": 1000 + i % 1000}),
            expect_index=waker.index,
        )
        write_ms.append((time.perf_counter() - t0) * 1000)
        await asyncio.gather(http_task, store_task)
        if woke_early:
            early += 1
            continue
        http_ms.append((woke["http"] - t0) * 1000)
        store_ms.append((woke["store"] - t0) * 1000)
    out: Metrics = {"early_wakeups": float(early)}
    for name, values in (("http", http_ms), ("store", store_ms), ("write", write_ms)):
        values.sort()
        for q in (50, 95, 99):
            out[f"{name}_p{q}_ms"] = percentile(values, q / 100)
    return out


def stamp(woke: dict[str, float], name: str) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback noting when a waiter woke (the loop runs it at once)."""

    def done(_: asyncio.Future[Any]) -> None:
        woke[name] = time.perf_counter()

    return done


async def fetch(http: aiohttp.ClientSession, url: str) -> None:
    async with http.get(url) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {url}: HTTP {resp.status}")


class BenchKeyed(Actor):
    """A keyed (virtual) actor: its first message takes the activation lease."""

    keyed = True
    advertise = False

    @handler
    async def ping(self, n: str) -> str:
        return n


class BenchLazy(Actor):
    """The same without single activation (lazy, no lease): the baseline."""

    advertise = False

    @handler
    async def ping(self, n: str) -> str:
        return n


async def measure_activation(ctx: Context, cfg: Config) -> Metrics:
    """First message to a new key of a keyed type (lease + activation) against a
    lazily hosted type without leases, and against an already active key."""
    ns = f"act{uuid.uuid4().hex[:8]}"
    host = await ActorSystem.connect(ctx.nats_url, namespace=ns, registry=False)
    caller = await ActorSystem.connect(ctx.nats_url, namespace=ns, registry=False)
    try:
        await host.register(BenchKeyed)
        await host.register(BenchLazy)
        await caller.ask("bench-keyed/warmup", "0")  # opens the lease bucket
        await caller.ask("bench-lazy/warmup", "0")
        series: dict[str, list[float]] = {"keyed_first": [], "lazy_first": [], "keyed_warm": []}
        for i in range(cfg.wakeups):
            for name, address in (
                ("keyed_first", f"bench-keyed/k{i}"),
                ("lazy_first", f"bench-lazy/k{i}"),
                ("keyed_warm", "bench-keyed/warmup"),
            ):
                t0 = time.perf_counter()
                await caller.ask(address, str(i))
                series[name].append((time.perf_counter() - t0) * 1000)
    finally:
        await caller.close()
        await host.close()
    out: Metrics = {}
    for name, values in series.items():
        values.sort()
        for q in (50, 95, 99):
            out[f"{name}_p{q}_ms"] = percentile(values, q / 100)
    return out


# Every round runs each of these, in this order (reversed every other round).
MEASUREMENTS: list[Measurement] = [
    Measurement(
        "lookups",
        "discovery reads: mirror get/by name/by tag, HTTP GET /services/{name} and /services",
        measure_lookups,
    ),
    Measurement(
        "wakeup",
        "blocking query wake-up after a write (HTTP and in-process watcher), from write start",
        measure_wakeup,
    ),
    Measurement(
        "activation",
        "ask latency: first message to a new key of a keyed actor (lease + activation), "
        "of a lazily hosted type without lease, and to an active key",
        measure_activation,
    ),
]


# -- setup -------------------------------------------------------------------------


def service(ns: str, name: str, i: int, *, tags: list[str]) -> ServiceResponse:
    """A persistent service without checks: nothing but the benchmark writes it."""
    return ServiceResponse(
        id=f"{name}-{i}",
        name=name,
        ephemeral=False,
        host="127.0.0.1",
        port=10_000 + i,
        protocol="http",
        tags=tags,
        agent_protocol="a2a",
        agent_info={"a2a_agent_card": {"name": name, "skills": [{"id": f"skill-{i}"}]}},
    )


async def populate(writer: RegistryStore, ns: str, n: int) -> tuple[list[str], list[str]]:
    names = [f"agent-{k}" for k in range(NAMES)]
    tags = [f"tag-{k}" for k in range(TAGS)]
    window = asyncio.Semaphore(32)

    async def one(i: int) -> str:
        async with window:
            svc = service(ns, names[i % NAMES], i, tags=[tags[i % TAGS], tags[(i * 7) % TAGS]])
            return (await writer.put_service(svc)).id

    ids = await asyncio.gather(*(one(i) for i in range(n)))
    return list(ids), names


def start_registry(nats_url: str, ns: str) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable,
        "-m",
        "actorbus.services.registry",
        *("--nats", nats_url, "--namespace", ns, "--http", "127.0.0.1:0"),
        *("--log-level", "warning", "--no-actor"),
    ]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = read_line(proc, READY_TIMEOUT)
        if read_line(proc, READY_TIMEOUT) != "ready":
            raise RuntimeError(f"registry process failed to start (said {first!r})")
    except BaseException:
        stop_processes([proc])
        raise
    return proc, first.split()[1]


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    stdout = proc.stdout
    assert stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        raise RuntimeError(f"registry process silent for {timeout:g}s") from None


# -- running -------------------------------------------------------------------------


@dataclass
class Round:
    index: int
    order: list[str]
    metrics: dict[str, Metrics]


async def run(cfg: Config, nats_url: str, http_url: str, ns: str, console: Console) -> list[Round]:
    nc = await nats.connect(nats_url, name="bench-registry")
    writer = await RegistryStore.open(nc.jetstream(), ns)
    reader = await RegistryStore.open(nc.jetstream(), ns)
    try:
        ids, names = await populate(writer, ns, cfg.services)
        await reader.sync()
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=cfg.inflight + 4)
        ) as http:
            ctx = Context(
                nats_url, http_url, ns, reader, writer, http, ids, names,
                [f"tag-{k}" for k in range(TAGS)],
            )  # fmt: skip
            await fetch(http, http_url + "/services")  # warm the connection and the route
            rounds: list[Round] = []
            for r in range(cfg.rounds):
                order = MEASUREMENTS if r % 2 == 0 else list(reversed(MEASUREMENTS))
                got: dict[str, Metrics] = {}
                for m in order:
                    got[m.name] = metrics = await m.run(ctx, cfg)
                    console.print(f"round {r + 1}/{cfg.rounds}  {m.name:<8} " + brief(metrics))
                rounds.append(Round(r + 1, [m.name for m in order], got))
            return rounds
    finally:
        await reader.close()
        await writer.close()
        await nc.close()


def brief(metrics: Metrics) -> str:
    return "  ".join(f"{k} {fmt(v)}" for k, v in metrics.items())


def fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def summarize(rounds: list[Round]) -> Summary:
    """Per measurement and metric: median, min and max over rounds."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for m in MEASUREMENTS:
        keys = rounds[0].metrics[m.name].keys()
        out[m.name] = {
            k: {
                "median": statistics.median(r.metrics[m.name][k] for r in rounds),
                "min": min(r.metrics[m.name][k] for r in rounds),
                "max": max(r.metrics[m.name][k] for r in rounds),
            }
            for k in keys
        }
    return out


def print_summary(console: Console, summary: Summary) -> None:
    table = Table(title="medians over rounds")
    for col in ("measurement", "metric", "median", "min", "max"):
        table.add_column(col, justify="left" if col in ("measurement", "metric") else "right")
    for name, metrics in summary.items():
        for k, v in metrics.items():
            table.add_row(name, k, fmt(v["median"]), fmt(v["min"]), fmt(v["max"]))
    console.print(table)


def plot(path: Path, rounds: list[Round], summary: Summary, title: str) -> bool:
    """One panel per measurement: each figure's median with its range and every
    round as a dot; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False

    fig, axes = plt.subplots(1, len(summary), figsize=(5 * len(summary), 4.8), squeeze=False)
    for ax, (name, metrics) in zip(axes[0], summary.items(), strict=True):
        keys = list(metrics)
        medians = [metrics[k]["median"] for k in keys]
        low = [metrics[k]["median"] - metrics[k]["min"] for k in keys]
        high = [metrics[k]["max"] - metrics[k]["median"] for k in keys]
        bars = ax.bar(range(len(keys)), medians, yerr=[low, high], color="#4c72b0", capsize=3)
        ax.bar_label(bars, labels=[fmt(m) for m in medians], fontsize=7)
        for j, k in enumerate(keys):
            points = [r.metrics[name][k] for r in rounds if k in r.metrics.get(name, {})]
            ax.scatter([j] * len(points), points, color="black", s=8, zorder=3)
        ax.set_xticks(range(len(keys)), keys, rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(
        prog="bench/registry.py",
        description="Registry discovery lookups per second and blocking-query wake-up latency.",
    )
    parser.add_argument("--rounds", type=positive_int, help="rounds (default 5)")
    parser.add_argument("--services", type=positive_int, help="registered services (200)")
    parser.add_argument("--lookups", type=positive_int, help="mirror lookups per kind (20000)")
    parser.add_argument("--http", type=positive_int, help="HTTP lookups per kind (2000)")
    parser.add_argument("--inflight", type=positive_int, default=16, help="HTTP in flight (16)")
    parser.add_argument("--wakeups", type=positive_int, help="blocking-query wake-ups (200)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 small round")
    args = parser.parse_args(argv)
    picked = presets(args, DEFAULTS, QUICK)
    return Config(
        rounds=picked["rounds"],
        services=picked["services"],
        lookups=picked["lookups"],
        http=picked["http"],
        inflight=args.inflight,
        wakeups=picked["wakeups"],
        out=args.out,
        quick=args.quick,
    )


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(140)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    ns = f"bench{uuid.uuid4().hex[:8]}"
    try:
        with EmbeddedServer(ServerConfig(host="127.0.0.1")) as server:
            info = machine_info(binary=server.binary, packages=("nats-py", "aiohttp"))
            console.print(
                f"nats-server {info['nats_server']} at {server.url}; nats-py {info['nats_py']}; "
                f"Python {info['python']}; {info['cpu_count']} CPUs; {cfg.services} services, "
                f"{cfg.rounds} round(s)"
            )
            proc, http_url = start_registry(server.url, ns)
            try:
                console.print(f"registry process at {http_url}")
                rounds = asyncio.run(run(cfg, server.url, http_url, ns, console))
            finally:
                stop_processes([proc])
    except KeyboardInterrupt:
        console.print("interrupted; processes stopped")
        return 130
    summary = summarize(rounds)
    print_summary(console, summary)
    data = {
        "benchmark": "registry discovery lookups and blocking-query wake-up",
        "started": started,
        "duration_s": round(time.perf_counter() - t_start, 2),
        "config": {
            "rounds": cfg.rounds,
            "services": cfg.services,
            "names": NAMES,
            "tags": TAGS,
            "lookups": cfg.lookups,
            "http": cfg.http,
            "inflight": cfg.inflight,
            "wakeups": cfg.wakeups,
            "quick": cfg.quick,
            "measurements": {m.name: m.what for m in MEASUREMENTS},
        },
        "machine": info,
        "rounds": [{"round": r.index, "order": r.order, **r.metrics} for r in rounds],
        "medians": {n: {k: v["median"] for k, v in ms.items()} for n, ms in summary.items()},
        "spread": summary,
    }
    title = (
        f"actorbus registry, {cfg.services} services, {len(rounds)} round(s); "
        f"nats-server {info['nats_server']}, Python {info['python']}, {info['cpu_count']} CPUs"
    )
    write_report(console, cfg.out, "registry", data, lambda png: plot(png, rounds, summary, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
