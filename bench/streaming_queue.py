"""Streaming Queue (the ProtocolBench paper's scenario): one coordinator, N
workers, 1,000 questions from a shared queue.

    python bench/streaming_queue.py [--questions 1000] [--workers 4,8,16,32,256]
                                    [--service-ms 10] [--rounds 2] [--quick]

The coordinator is an actor in this process; the workers are actors in a second
process (``_sq_workers.py``), activated on demand. Each worker pulls its next
question when it is free (work stealing: no worker is handed more than it can
take), spends a fixed, deterministic service time on it, and hands the answer
back with its next pull. Every variant runs the same work:

- ``native``: questions and answers as plain envelope content on the bus;
- ``a2a``, ``acp``, ``anp``, ``agora``: each question and answer crosses the
  edge as that protocol's JSON (the codec's encode at the sender, decode at the
  receiver), as a protocol adapter at each agent would.

Reported per variant and worker count, the paper's metrics: total duration,
mean/median/min/max/std latency, P95, P99, success rate and load-balance
variance (of questions per worker), plus the per-message overhead: the median
latency minus the service time (what the bus, the coordinator and the codec add
to each question, queueing included) and the CPU per question of both
processes (the work each question costs, whatever the queueing). Rounds
interleave the variants in rotating order; figures are medians over rounds.
Writes ``bench/results/streaming_queue.json`` and ``streaming_queue.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _edges import from_edge, to_edge
from _harness import (
    LoggedProgress,
    machine_info,
    percentile,
    positive_int,
    presets,
    pyplot,
    report_console,
    stop_processes,
    wait_ready,
    write_report,
)
from _sq_workers import CPU_SUBJECT, WORKER, Pull, Start
from rich.console import Console
from rich.table import Table

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer, ServerConfig

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
DEFAULTS = {"questions": 1000, "rounds": 2}
QUICK = {"questions": 200, "rounds": 1}
VARIANTS = ("native", "a2a", "acp", "anp", "agora")


@dataclass(frozen=True)
class Config:
    questions: int
    rounds: int
    workers: tuple[int, ...]
    service_ms: float
    out: Path
    quick: bool


@dataclass
class RunState:
    """One run's queue and what came back."""

    protocol: str
    questions: deque[int]
    total: int
    dispatched: dict[int, float] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    per_worker: Counter[str] = field(default_factory=Counter)
    started: float = 0.0
    finished: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class SqCoordinator(Actor):
    type_name = "sq-coordinator"

    def __init__(self, state: RunState) -> None:
        self.state = state

    @handler
    async def next(self, pull: Pull) -> dict[str, Any] | None:
        s = self.state
        now = time.perf_counter()
        if pull.question is not None:
            from_edge(s.protocol, pull.answer)  # the receiving edge's decode
            s.latencies_ms.append((now - s.dispatched.pop(pull.question)) * 1000)
            s.per_worker[pull.worker] += 1
            if len(s.latencies_ms) == s.total:
                s.finished = now
                s.done.set()
        if not s.questions:
            return None
        n = s.questions.popleft()
        s.dispatched[n] = now
        text = f"question {n}: which supervisor restarts the failed worker, and when?"
        return {"n": n, "q": to_edge(s.protocol, text, self.address, pull.worker, n)}


def parse_args(argv: Sequence[str] | None = None) -> Config:
    p = argparse.ArgumentParser(
        prog="bench/streaming_queue.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--questions", type=positive_int, help="questions per run (1000)")
    p.add_argument("--rounds", type=positive_int, help="rounds, variants interleaved (2)")
    p.add_argument("--workers", default="4,8,16,32,256", help="worker counts (4,8,16,32,256)")
    p.add_argument("--service-ms", type=float, default=10.0, help="service time per question (10)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 200 questions, 4 and 32 workers"
    )
    args = p.parse_args(argv)
    try:
        workers = tuple(int(w) for w in ("4,32" if args.quick else args.workers).split(","))
    except ValueError:
        p.error(f"--workers wants comma-separated integers, not {args.workers!r}")
    if not workers or min(workers) < 1:
        p.error("--workers must be positive")
    picked = presets(args, DEFAULTS, QUICK)
    return Config(
        picked["questions"], picked["rounds"], workers, args.service_ms, args.out, args.quick
    )


async def one_run(
    system: ActorSystem, protocol: str, workers: int, cfg: Config, run_id: int
) -> dict[str, Any]:
    state = RunState(protocol, deque(range(cfg.questions)), cfg.questions)
    ref = await system.spawn(SqCoordinator, f"run{run_id}", state=state)
    start = Start(coordinator=ref.address, protocol=protocol, service_ms=cfg.service_ms)
    cpu0 = time.process_time() + await worker_cpu(system)
    state.started = time.perf_counter()
    for i in range(workers):
        await system.tell(f"{WORKER}/r{run_id}w{i}", start)
    deadline = 60 + cfg.questions * cfg.service_ms / 1000
    with contextlib.suppress(TimeoutError):  # reported: success rate below 100%
        await asyncio.wait_for(state.done.wait(), timeout=deadline)
    end = state.finished or time.perf_counter()
    cpu = time.process_time() + await worker_cpu(system) - cpu0
    await system.stop_actor(ref.address)
    lat = sorted(state.latencies_ms)
    counts = [state.per_worker.get(f"{WORKER}/r{run_id}w{i}", 0) for i in range(workers)]
    nan = float("nan")
    return {
        "protocol": protocol,
        "workers": workers,
        "total_s": end - state.started,
        "mean_ms": statistics.fmean(lat) if lat else nan,
        "median_ms": percentile(lat, 0.5) if lat else nan,
        "min_ms": lat[0] if lat else nan,
        "max_ms": lat[-1] if lat else nan,
        "std_ms": statistics.pstdev(lat) if lat else nan,
        "p95_ms": percentile(lat, 0.95) if lat else nan,
        "p99_ms": percentile(lat, 0.99) if lat else nan,
        "success_rate": len(lat) / cfg.questions,
        "load_variance": statistics.pvariance(counts) if counts else 0.0,
        "overhead_ms": (percentile(lat, 0.5) - cfg.service_ms) if lat else nan,
        "cpu_per_question_us": cpu / max(1, len(lat)) * 1e6,  # both processes
    }


async def worker_cpu(system: ActorSystem) -> float:
    """The worker process's CPU seconds (its probe)."""
    return float((await system.nc.request(CPU_SUBJECT, b"", timeout=10)).data)


async def measure(url: str, cfg: Config, console: Console) -> list[dict[str, Any]]:
    system = await ActorSystem.connect(url, namespace="sq", name="sq-coordinator", registry=False)
    runs: list[dict[str, Any]] = []
    total = cfg.rounds * len(cfg.workers) * len(VARIANTS)
    try:
        with LoggedProgress(console=console, transient=True) as progress:
            task = progress.add_task("streaming queue", total=total)
            run_id = 0
            for r in range(cfg.rounds):
                for workers in cfg.workers:
                    shift = (r + cfg.workers.index(workers)) % len(VARIANTS)
                    for protocol in VARIANTS[shift:] + VARIANTS[:shift]:
                        progress.update(
                            task, description=f"round {r + 1}: {protocol}, {workers} workers"
                        )
                        run_id += 1
                        result = await one_run(system, protocol, workers, cfg, run_id)
                        runs.append({"round": r + 1, **result})
                        progress.advance(task)
    finally:
        await system.close(timeout=2.0)
    return runs


def summarize(runs: list[dict[str, Any]], cfg: Config) -> dict[str, dict[str, dict[str, float]]]:
    """protocol -> workers -> median of each metric over the rounds."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    metrics = [k for k in runs[0] if k not in ("round", "protocol", "workers")]
    for protocol in VARIANTS:
        for workers in cfg.workers:
            mine = [r for r in runs if r["protocol"] == protocol and r["workers"] == workers]
            out.setdefault(protocol, {})[str(workers)] = {
                m: statistics.median(r[m] for r in mine) for m in metrics
            }
    return out


def print_report(console: Console, summary: dict[str, Any], cfg: Config) -> None:
    t = Table(
        title=f"Streaming Queue: {cfg.questions} questions, {cfg.service_ms:g} ms service "
        "time (medians of rounds)"
    )
    columns = ("variant", "workers", "total s", "mean ms", "median ms", "p95 ms", "p99 ms",
               "min/max ms", "std ms", "success", "load var.", "overhead ms",
               "CPU µs/q")  # fmt: skip
    for col in columns:
        t.add_column(col, justify="right")
    for protocol, by_n in summary.items():
        for n, m in by_n.items():
            t.add_row(
                protocol, n, f"{m['total_s']:.2f}", f"{m['mean_ms']:.1f}", f"{m['median_ms']:.1f}",
                f"{m['p95_ms']:.1f}", f"{m['p99_ms']:.1f}", f"{m['min_ms']:.1f}/{m['max_ms']:.1f}",
                f"{m['std_ms']:.1f}", f"{m['success_rate']:.0%}", f"{m['load_variance']:.1f}",
                f"{m['overhead_ms']:.2f}", f"{m['cpu_per_question_us']:.0f}",
            )  # fmt: skip
    console.print(t)


def flatness(summary: dict[str, Any], cfg: Config, metric: str) -> dict[str, float]:
    """Per variant: ``metric`` at the most workers over the same at the fewest."""
    lo, hi = str(min(cfg.workers)), str(max(cfg.workers))
    return {p: by_n[hi][metric] / max(by_n[lo][metric], 1e-9) for p, by_n in summary.items()}


def plot(path: Path, summary: dict[str, Any], cfg: Config, title: str) -> bool:
    plt = pyplot()
    if plt is None:
        return False

    fig, (ax_over, ax_total) = plt.subplots(1, 2, figsize=(12, 4.8))
    for protocol, by_n in summary.items():
        ns = [int(n) for n in by_n]
        ax_over.plot(ns, [by_n[str(n)]["overhead_ms"] for n in ns], "o-", label=protocol)
        cpu = [by_n[str(n)]["cpu_per_question_us"] for n in ns]
        ax_total.plot(ns, cpu, "o-", label=protocol)
    for ax in (ax_over, ax_total):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers")
        ax.legend()
    ax_over.set_ylabel("per-message overhead, ms (median latency - service time)")
    ax_total.set_ylabel("CPU per question, µs (coordinator + workers)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(170)
    t0 = time.perf_counter()
    with EmbeddedServer(ServerConfig(host="127.0.0.1")) as server:
        info = machine_info(binary=server.binary, packages=("nats-py",))
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "_sq_workers.py"), server.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            wait_ready(proc, 60.0, "streaming queue workers")
            runs = asyncio.run(measure(server.url, cfg, console))
        except KeyboardInterrupt:
            console.print("interrupted; processes stopped")
            return 130
        finally:
            stop_processes([proc])
    summary = summarize(runs, cfg)
    print_report(console, summary, cfg)
    cpu_flat = flatness(summary, cfg, "cpu_per_question_us")
    latency_flat = flatness(summary, cfg, "overhead_ms")
    failed = [r for r in runs if r["success_rate"] < 1.0]
    data = {
        "benchmark": "Streaming Queue (ProtocolBench): coordinator, N workers, shared queue",
        "duration_s": round(time.perf_counter() - t0, 2),
        "config": {**asdict(cfg), "out": str(cfg.out), "variants": VARIANTS},
        "machine": info,
        "runs": runs,
        "summary": summary,
        "cpu_per_question_ratio_most_to_fewest_workers": cpu_flat,
        "latency_overhead_ratio_most_to_fewest_workers": latency_flat,
    }
    lo, hi = min(cfg.workers), max(cfg.workers)
    verdict = (
        f"{'PASS' if not failed else 'FAIL'}: {len(runs) - len(failed)}/{len(runs)} runs answered "
        f"every question; CPU per question at {hi} vs {lo} workers: "
        + ", ".join(f"{p} {v:.2f}x" for p, v in cpu_flat.items())
        + "; latency overhead: "
        + ", ".join(f"{p} {v:.2f}x" for p, v in latency_flat.items())
    )
    title = (
        f"Streaming Queue, {cfg.questions} questions, {cfg.service_ms:g} ms service; "
        f"Python {info['python']}, {info['cpu_count']} CPUs"
    )
    write_report(
        console,
        cfg.out,
        "streaming_queue",
        data,
        lambda png: plot(png, summary, cfg, title),
        verdict,
    )
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
