"""Declared state: what keeping it costs an ask, an activation, and a process.

One embedded nats-server (loopback, JetStream file storage), a host system and a
caller system on it, the same counter actor with and without declared state.
Every round measures, the variant order reversed every other round:

- ``ask``: sequential asks to one actor that changes its state every turn
  (p50/p95/p99 over ``--seq``), and throughput with ``--inflight`` asks in
  flight (each to its own actor: a state is changed one turn at a time);
  stateless vs stateful on the key-value default, and on PostgreSQL when a
  server is there (``--postgres-dsn``, or Debian's binaries to start one);
- ``activation``: a keyed actor passivated, then asked: the first ask's latency
  (activation, state load and claim, the turn, its save) vs the same stateless.

And once per run, ``memory``: ``--passivated`` keyed actors activated (each
saving a state) and passivated; the host process's heap growth over the same
run with stateless actors (goal: passivated state costs the process nothing).

The verdict (median over rounds of the per-round ratios stateful/stateless, on
the key-value default): p50 within 1.5x, throughput at least 0.6x.

    python bench/state.py [--rounds 5] [--seq 1000] [--tput 4000] [--inflight 50]
                          [--passivated 5000] [--postgres-dsn DSN] [--out bench/results]
                          [--quick] [--memory-only]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import (
    machine_info,
    percentile,
    positive_int,
    pyplot,
    report_console,
    write_report,
)
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, StateSettings, handler
from actorbus.bus.server import EmbeddedServer, ServerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _postgres import postgres_server, why_not


class Tally(BaseModel):
    count: int = 0


class Plain(Actor):
    type_name = "plain"

    def __init__(self) -> None:
        self.count = 0

    @handler(intent="bump")
    async def bump(self, _: str) -> int:
        self.count += 1
        return self.count


class Kept(Actor):
    type_name = "kept"
    state: Tally

    @handler(intent="bump")
    async def bump(self, _: str) -> int:
        self.state.count += 1
        return self.state.count


class PlainKeyed(Plain):
    type_name = "plain-keyed"
    keyed = True


class KeptKeyed(Kept):
    type_name = "kept-keyed"
    keyed = True


async def _latencies(caller: ActorSystem, address: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await caller.ask(address, "x", intent="bump")
        out.append((time.perf_counter() - t) * 1e6)
    return sorted(out)


async def _throughput(caller: ActorSystem, type_: str, n: int, inflight: int) -> float:
    todo = iter(range(n))

    async def worker(w: int) -> None:
        for _ in todo:
            await caller.ask(f"{type_}/w{w}", "x", intent="bump")

    t = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(inflight)))
    return n / (time.perf_counter() - t)


async def _activation(host: ActorSystem, caller: ActorSystem, type_: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        address = f"{type_}/a{i % 20}"
        await caller.ask(address, "x", intent="bump")  # active, with state saved
        await host.stop_actor(address)  # passivated: its memory gone
        t = time.perf_counter()
        await caller.ask(address, "x", intent="bump")
        out.append((time.perf_counter() - t) * 1e6)
        await host.stop_actor(address)
    return sorted(out)


def _summary(values: list[float]) -> dict[str, float]:
    return {q: percentile(values, float(q[1:]) / 100) for q in ("p50", "p95", "p99")}


async def _side(url: str, stateful: bool, settings: StateSettings | None, a: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"registry": False}
    if settings is not None:
        kwargs["state"] = settings
    async with (
        ActorSystem.connect(url, **kwargs) as host,
        ActorSystem.connect(url, registry=False) as caller,
    ):
        cls, keyed = (Kept, KeptKeyed) if stateful else (Plain, PlainKeyed)
        await host.register(cls)
        await host.register(keyed)
        await _latencies(caller, f"{cls.type_name}/warm", 50)
        seq = _summary(await _latencies(caller, f"{cls.type_name}/seq", a.seq))
        tput = await _throughput(caller, cls.type_name, a.tput, a.inflight)
        act = _summary(await _activation(host, caller, keyed.type_name, a.activations))
    return {"seq": seq, "tput": tput, "activation": act}


async def _memory(url: str, stateful: bool, n: int) -> float:
    """Heap (MiB) the host still holds after ``n`` keyed actors were activated
    (each saving a state) and passivated."""
    async with (
        ActorSystem.connect(url, registry=False) as host,
        ActorSystem.connect(url, registry=False) as caller,
    ):
        keyed = KeptKeyed if stateful else PlainKeyed
        await host.register(keyed)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for lo in range(0, n, 100):
            await asyncio.gather(
                *(
                    caller.ask(f"{keyed.type_name}/m{i}", "x", intent="bump")
                    for i in range(lo, min(n, lo + 100))
                )
            )
            for i in range(lo, min(n, lo + 100)):
                await host.stop_actor(f"{keyed.type_name}/m{i}")
            if (lo + 100) % 10_000 == 0:
                side = "with state" if stateful else "without"
                print(f"memory, {side}: {lo + 100:,} of {n:,} activated and passivated")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    return grown / 2**20


@contextlib.contextmanager
def _postgres(dsn: str | None) -> Iterator[str | None]:
    if dsn is not None or why_not() is not None:
        yield dsn
        return
    with postgres_server() as started:
        yield started


async def run(a: argparse.Namespace) -> dict[str, Any]:
    console = report_console()
    rounds: list[dict[str, Any]] = []
    postgres = contextlib.nullcontext(None) if a.memory_only else _postgres(a.postgres_dsn)
    with tempfile_store() as store, postgres as dsn:
        async with EmbeddedServer(ServerConfig(store_dir=store)) as server:
            for r in range(0 if a.memory_only else a.rounds):
                variants = ["stateless", "kv"] + (["postgres"] if dsn else [])
                if r % 2:
                    variants.reverse()
                got: dict[str, Any] = {}
                for v in variants:
                    settings = None
                    if v == "postgres":
                        from actorbus.state.postgres_store import PostgresStateStore

                        ns_store = PostgresStateStore(dsn or "", namespace="ab", table=f"b{r}")
                        settings = StateSettings(store=ns_store)
                    got[v] = await _side(server.url, v != "stateless", settings, a)
                    console.print(f"round {r + 1}/{a.rounds} {v}: {got[v]}", highlight=False)
                rounds.append(got)
            memory = {
                "stateless": await _memory(server.url, False, a.passivated),
                "kv": await _memory(server.url, True, a.passivated),
            }
    return {"rounds": rounds, "memory_mib": memory}


@contextlib.contextmanager
def tempfile_store() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="actorbus-bench-state-") as d:
        yield Path(d)


def _ratios(rounds: list[dict[str, Any]], side: str) -> dict[str, float]:
    p50 = [r[side]["seq"]["p50"] / r["stateless"]["seq"]["p50"] for r in rounds if side in r]
    tput = [r[side]["tput"] / r["stateless"]["tput"] for r in rounds if side in r]
    act = [
        r[side]["activation"]["p50"] / r["stateless"]["activation"]["p50"]
        for r in rounds
        if side in r
    ]
    if not p50:
        return {}
    return {
        "p50": statistics.median(p50),
        "throughput": statistics.median(tput),
        "activation_p50": statistics.median(act),
    }


def _memory_plot(data: dict[str, Any], n: int) -> Any:
    def plot(path: Path) -> bool:
        plt = pyplot()
        if plt is None:
            return False
        fig, ax = plt.subplots(figsize=(5, 4))
        sides = list(data["memory_mib"])
        ax.bar(sides, [data["memory_mib"][s] for s in sides], color=["#888", "#2a7"])
        ax.set_title(f"host heap growth (MiB) after {n:,} passivated actors")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True

    return plot


def _plot(data: dict[str, Any]) -> Any:
    def plot(path: Path) -> bool:
        plt = pyplot()
        if plt is None:
            return False
        sides = [s for s in ("stateless", "kv", "postgres") if s in data["rounds"][0]]
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, (title, pick) in zip(
            axes,
            (
                ("ask p50 (µs)", lambda r, s: r[s]["seq"]["p50"]),
                ("asks/s, in flight", lambda r, s: r[s]["tput"]),
                ("activation p50 (µs)", lambda r, s: r[s]["activation"]["p50"]),
            ),
            strict=True,
        ):
            meds = [statistics.median(pick(r, s) for r in data["rounds"]) for s in sides]
            ax.bar(sides, meds, color=["#888", "#2a7", "#27a"][: len(sides)])
            ax.set_title(title)
        fig.suptitle("declared state vs none (median of rounds)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True

    return plot


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--seq", type=positive_int, default=1000)
    p.add_argument("--tput", type=positive_int, default=4000)
    p.add_argument("--inflight", type=positive_int, default=50)
    p.add_argument("--activations", type=positive_int, default=200)
    p.add_argument("--passivated", type=positive_int, default=5000)
    p.add_argument("--postgres-dsn", default=None)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    p.add_argument("--quick", action="store_true", help="a smoke run: small numbers")
    p.add_argument(
        "--memory-only", action="store_true", help="only the heap after --passivated actors"
    )
    a = p.parse_args()
    if a.quick:
        a.rounds, a.seq, a.tput, a.activations, a.passivated = 2, 200, 400, 20, 200
    console = report_console()
    data = asyncio.run(run(a))
    if a.memory_only:
        data |= {
            "machine": machine_info(),
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "args": {"passivated": a.passivated},
        }
        verdict = f"heap after {a.passivated} activated and passivated: {data['memory_mib']} MiB"
        plot = _memory_plot(data, a.passivated)
        write_report(console, a.out, "state_memory", data, plot, verdict)
        return
    data["ratios"] = {s: _ratios(data["rounds"], s) for s in ("kv", "postgres")}
    data["machine"] = machine_info()
    data["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    data["args"] = {k: v for k, v in vars(a).items() if k != "out"}
    kv = data["ratios"]["kv"]
    verdict = (
        f"key-value state vs none: ask p50 {kv['p50']:.2f}x (target <= 1.5), throughput "
        f"{kv['throughput']:.2f}x (target >= 0.6), activation p50 {kv['activation_p50']:.2f}x; "
        f"postgres: {data['ratios']['postgres'] or 'not run'}; heap after "
        f"{a.passivated} passivated: {data['memory_mib']}"
    )
    write_report(console, a.out, "state", data, _plot(data), verdict)


if __name__ == "__main__":
    main()
