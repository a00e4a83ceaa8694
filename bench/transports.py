"""The two transports side by side: an ask on the in-process bus vs on NATS.

What a test suite gains from ``ActorSystem.in_process()``: one process, an
``Echo`` actor in one system and its caller in another, on each transport:

- ``nats``: an embedded nats-server (loopback, open: what the bus itself
  costs, not security), both systems connected to it;
- ``in-process``: both systems on one ``LocalBus``.

Each round measures the time to open a system, sequential asks (p50/p95/p99
over ``--seq``) and throughput (``--tput`` asks, ``--inflight`` in flight),
the transport order reversed every other round. Medians over rounds, and the
ratio in-process/nats (below 1: faster in-process).

    python bench/transports.py [--rounds 7] [--seq 2000] [--tput 10000]
                               [--inflight 100] [--out bench/results] [--quick]

Writes transports.json and transports.png. There is no target: the figures say
what a test on each costs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _ask_server import Answer, Echo, Question
from _harness import machine_info, percentile, positive_int, presets, pyplot, write_report
from rich.console import Console
from rich.table import Table

from actorbus import ActorSystem
from actorbus.bus.local import LocalBus
from actorbus.bus.server import EmbeddedServer

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
DEFAULTS = {"rounds": 7, "seq": 2000, "tput": 10000, "inflight": 100}
QUICK = {"rounds": 1, "seq": 200, "tput": 1000}
TRANSPORTS = ("nats", "in-process")


@dataclass(frozen=True)
class Config:
    rounds: int
    seq: int
    tput: int
    inflight: int
    out: Path
    quick: bool


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive_int, help="interleaved rounds (7)")
    parser.add_argument("--seq", type=positive_int, help="sequential asks per round (2000)")
    parser.add_argument("--tput", type=positive_int, help="throughput asks per round (10000)")
    parser.add_argument("--inflight", type=positive_int, help="asks in flight (100)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 short round")
    args = parser.parse_args(argv)
    return Config(**presets(args, DEFAULTS, QUICK), out=args.out, quick=args.quick)


@asynccontextmanager
async def pair(transport: str, url: str) -> AsyncIterator[tuple[ActorSystem, ActorSystem, float]]:
    """A host with ``echo/1`` and a caller, and the seconds the caller took to open."""
    bus = LocalBus()

    async def open_one() -> ActorSystem:
        if transport == "nats":
            return await ActorSystem.connect(url, tracing=False)
        return await ActorSystem.in_process(bus, tracing=False)

    host = await open_one()
    started = time.perf_counter()
    caller = await open_one()
    opened = time.perf_counter() - started
    try:
        await host.spawn(Echo, "1")
        yield host, caller, opened
    finally:
        await caller.close(2.0)
        await host.close(2.0)


async def one_round(cfg: Config, transport: str, url: str) -> dict[str, Any]:
    async with pair(transport, url) as (_, caller, opened):
        q = Question(text="x" * 200)
        for _ in range(200):  # warm-up
            await caller.ask("echo/1", q, returns=Answer)
        times = []
        gc.disable()
        try:
            for _ in range(cfg.seq):
                t = time.perf_counter_ns()
                await caller.ask("echo/1", q, returns=Answer)
                times.append((time.perf_counter_ns() - t) / 1000)
        finally:
            gc.enable()
        times.sort()
        left = cfg.tput

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await caller.ask("echo/1", q, returns=Answer)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(cfg.inflight)))
        rate = cfg.tput / (time.perf_counter() - started)
    return {
        "open_ms": opened * 1000,
        "p50_us": percentile(times, 0.5),
        "p95_us": percentile(times, 0.95),
        "p99_us": percentile(times, 0.99),
        "asks_per_s": rate,
    }


async def measure(cfg: Config, console: Console) -> list[dict[str, dict[str, Any]]]:
    rounds = []
    with EmbeddedServer() as server:
        for r in range(cfg.rounds):
            order = TRANSPORTS if r % 2 == 0 else tuple(reversed(TRANSPORTS))
            result = {t: await one_round(cfg, t, server.url) for t in order}
            rounds.append(result)
            console.print(
                f"round {r + 1}/{cfg.rounds}: "
                + ", ".join(
                    f"{t} p50 {result[t]['p50_us']:.0f} µs, {result[t]['asks_per_s']:,.0f}/s"
                    for t in TRANSPORTS
                )
            )
    return rounds


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = Console()
    rounds = asyncio.run(measure(cfg, console))
    metrics = ("open_ms", "p50_us", "p95_us", "p99_us", "asks_per_s")
    medians = {
        t: {m: statistics.median(r[t][m] for r in rounds) for m in metrics} for t in TRANSPORTS
    }
    ratios = {
        m: statistics.median(r["in-process"][m] / r["nats"][m] for r in rounds) for m in metrics
    }
    table = Table(title=f"an ask, caller and actor in one process; medians of {cfg.rounds} rounds")
    table.add_column("transport")
    for m in metrics:
        table.add_column(m, justify="right")
    for t in TRANSPORTS:
        table.add_row(t, *(f"{medians[t][m]:,.1f}" for m in metrics))
    table.add_row("in-process / nats", *(f"{ratios[m]:.2f}x" for m in metrics))
    console.print(table)
    data = {
        "benchmark": "transports",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {k: getattr(cfg, k) for k in ("rounds", "seq", "tput", "inflight")},
        "machine": machine_info(packages=("nats-py",), git=True),
        "rounds": rounds,
        "medians": medians,
        "ratios_in_process_to_nats": ratios,
    }

    def plot(path: Path) -> bool:
        plt = pyplot()
        if plt is None:
            return False
        fig, (lat, tput) = plt.subplots(1, 2, figsize=(9, 4))
        for i, t in enumerate(TRANSPORTS):
            values = [medians[t][m] for m in ("p50_us", "p95_us", "p99_us")]
            lat.bar([x + i * 0.4 for x in range(3)], values, width=0.4, label=t)
        lat.set_xticks([x + 0.2 for x in range(3)], ["p50", "p95", "p99"])
        lat.set_ylabel("µs per ask")
        lat.legend()
        tput.bar(list(TRANSPORTS), [medians[t]["asks_per_s"] for t in TRANSPORTS])
        tput.set_ylabel(f"asks/s, {cfg.inflight} in flight")
        fig.suptitle("an ask on NATS and on the in-process bus")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return True

    write_report(console, cfg.out, "transports", data, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
