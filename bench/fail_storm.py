"""Fail-Storm Recovery (ProtocolBench, Appendix D.4) on actorbus.

A Shard-QA ring of 8 agents, each in its own OS process
(``bench/_fail_storm_agent.py``), on one embedded nats-server (loopback). The
question set is deterministic (seeded; ``q{i}`` is answered by shard ``i % 8``).
A query starts at a random shard; a shard that does not hold the answer asks
the next one in the ring (at most 8 hops, skipping dead shards as in the paper)
and returns its reply. Client workers issue queries continuously and record,
per query, start time, success (correct answer) and latency.

Every cycle, 3 of the 8 agent processes (seeded RNG) are SIGKILLed and started
again ``--restart-delay`` seconds later. Who starts them again (``--restart``):

- ``supervisor`` (the default, as a deployment runs): the eight shards are the
  workers of one ``actorbus run _fail_storm_agent:Shard --workers 8 --key
  {worker} --restart-delay 2``, which forks each from a parent that has imported
  everything, and forks a killed one again after the delay;
- ``process``: each shard is a process of its own that the benchmark starts
  again from nothing (a cold start: the interpreter and every import anew), as
  a process manager that starts a fresh interpreter does.

Metrics, after the paper:

- time to recovery: from the kill to the moment the last killed shard answers
  again (each restarted shard is probed with a direct ask until it answers);
- answer discovery rate: share of queries answered correctly, in the window
  of ``--window`` seconds before the kill (pre) and after recovery (post);
- retention: post / pre;
- steady-state latency p50/p95 (queries answered in the pre and post windows).

    python bench/fail_storm.py [--cycles 3] [--window 20] [--restart-delay 2]
                               [--restart supervisor|process]
                               [--workers 4] [--rate 40] [--timeout 1.0]
                               [--seed 7] [--no-skip] [--out bench/results]

Writes ``fail_storm.json`` and ``fail_storm.png`` (success rate over time, 1 s
buckets, with kill/restart/recovery markers) to ``--out``. Every process
started is stopped at the end, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _fail_storm_agent import SEED, SETTINGS_ENV, TYPE, Query, Reply, dataset, holder
from _harness import (
    close_streams,
    compile_sources,
    machine_info,
    percentile,
    positive_int,
    pyplot,
    report_console,
    stop_processes,
    wait_ready,
    write_report,
)
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.errors import ActorBusError

HERE = Path(__file__).resolve().parent
AGENT_SCRIPT = HERE / "_fail_storm_agent.py"
DEFAULT_OUT = HERE / "results"
NAMESPACE = "failstorm"
READY_TIMEOUT = 30.0
PROBE_TIMEOUT = 0.5


# -- configuration -------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    cycles: int
    window: float
    restart_delay: float
    shards: int
    kill: int
    questions: int
    workers: int
    rate: float
    timeout: float
    seed: int
    skip: bool
    restart: str  # "supervisor" or "process"
    out: Path


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="bench/fail_storm.py",
        description="Fail-Storm Recovery on a Shard-QA ring of actorbus agents.",
    )
    parser.add_argument("--cycles", type=positive_int, default=3, help="fault cycles (3)")
    parser.add_argument(
        "--window", type=positive_float, default=20.0, help="pre/post window, s (20; paper 60)"
    )
    parser.add_argument("--restart-delay", type=float, default=2.0, help="kill to restart, s (2)")
    parser.add_argument("--shards", type=positive_int, default=8, help="ring size (8)")
    parser.add_argument("--kill", type=positive_int, default=3, help="shards killed per cycle (3)")
    parser.add_argument("--questions", type=positive_int, default=800, help="questions (800)")
    parser.add_argument("--workers", type=positive_int, default=4, help="client workers (4)")
    parser.add_argument(
        "--rate", type=positive_float, default=40.0, help="target queries/s, all workers (40)"
    )
    parser.add_argument(
        "--timeout", type=positive_float, default=1.0, help="deadline per query chain, s (1)"
    )
    parser.add_argument("--seed", type=int, default=7, help="RNG seed for kills and queries")
    parser.add_argument("--no-skip", action="store_true", help="shards do not skip dead neighbours")
    parser.add_argument(
        "--restart",
        choices=("supervisor", "process"),
        default="supervisor",
        help="who starts a killed shard again: the workers' supervisor of `actorbus run "
        "--workers` (default) or the benchmark, as a new process",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (bench/results)"
    )
    args = parser.parse_args(argv)
    if args.kill >= args.shards:
        parser.error("--kill must be less than --shards")
    if args.restart_delay < 0:
        parser.error("--restart-delay must be >= 0")
    return Config(
        cycles=args.cycles,
        window=args.window,
        restart_delay=args.restart_delay,
        shards=args.shards,
        kill=args.kill,
        questions=args.questions,
        workers=args.workers,
        rate=args.rate,
        timeout=args.timeout,
        seed=args.seed,
        skip=not args.no_skip,
        restart=args.restart,
        out=args.out,
    )


# -- records -------------------------------------------------------------------
@dataclass
class Sample:
    t: float  # start, seconds since the run began
    ok: bool
    latency_s: float
    error: str  # "" if a reply came; else the error code
    hops: int
    detail: str = ""  # the error message, if any


@dataclass
class Cycle:
    index: int
    victims: list[int]
    kill_t: float = 0.0
    restart_t: float = 0.0
    ready_t: float = 0.0  # the last restarted process said "ready"
    recovery_t: float = 0.0  # the last restarted shard answered a direct ask
    shard_recovery_s: dict[int, float] = field(default_factory=dict)


@dataclass
class WindowStats:
    start: float
    end: float
    queries: int
    answered: int
    rate: float  # answer discovery rate, 0..1
    p50_ms: float | None
    p95_ms: float | None


def window_stats(samples: Sequence[Sample], start: float, end: float) -> WindowStats:
    inside = [s for s in samples if start <= s.t < end]
    ok = sorted(s.latency_s * 1000 for s in inside if s.ok)
    return WindowStats(
        start=round(start, 3),
        end=round(end, 3),
        queries=len(inside),
        answered=len(ok),
        rate=len(ok) / len(inside) if inside else 0.0,
        p50_ms=percentile(ok, 0.5) if ok else None,
        p95_ms=percentile(ok, 0.95) if ok else None,
    )


# -- agent processes -----------------------------------------------------------
class ProcessAgents:
    """The shard processes, by index, each started by the benchmark; ``stop_all``
    never leaves one behind."""

    def __init__(self, cfg: Config, url: str) -> None:
        self.cfg = cfg
        self.url = url
        self.procs: dict[int, subprocess.Popen[str]] = {}

    def start(self, index: int) -> subprocess.Popen[str]:
        cmd = [
            sys.executable,
            str(AGENT_SCRIPT),
            str(index),
            self.url,
            NAMESPACE,
            "--shards",
            str(self.cfg.shards),
            "--questions",
            str(self.cfg.questions),
            "--seed",
            str(SEED),
        ] + ([] if self.cfg.skip else ["--no-skip"])
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs[index] = proc
        return proc

    def start_all(self) -> None:
        for i in range(self.cfg.shards):
            self.start(i)
        for i in range(self.cfg.shards):
            wait_ready(self.procs[i], READY_TIMEOUT, f"shard {i}")

    def back(self, index: int) -> None:
        """Start shard ``index`` again, until it says ready."""
        wait_ready(self.start(index), READY_TIMEOUT, f"shard {index}")

    def kill(self, index: int) -> None:
        """SIGKILL, as a crash; reaps the process."""
        proc = self.procs.pop(index)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        close_streams(proc)

    def stop_all(self) -> None:
        """SIGTERM every process, wait a little, then SIGKILL what is left."""
        procs, self.procs = list(self.procs.values()), {}
        stop_processes(procs)


class SupervisedAgents:
    """The shards as the workers of one ``actorbus run --workers``; the benchmark
    kills a worker, and the supervisor starts it again after the restart delay.
    The supervisor's output names each worker's pid and says when it is ready."""

    STARTED = re.compile(r"worker (\d+): pid (\d+)")
    READY = re.compile(r"worker (\d+) ready: .*\(pid (\d+)\)")

    def __init__(self, cfg: Config, url: str) -> None:
        self.cfg = cfg
        self.url = url
        self.proc: subprocess.Popen[str] | None = None
        self.pids: dict[int, int] = {}
        self.ready: dict[int, int] = {}  # index -> the pid that said ready
        self.changed = threading.Condition()
        self.said: list[str] = []

    def start_all(self) -> None:
        settings = {
            "shards": self.cfg.shards,
            "questions": self.cfg.questions,
            "seed": SEED,
            "skip": self.cfg.skip,
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actorbus",
                "run",
                f"{AGENT_SCRIPT.stem}:Shard",
                "--workers",
                str(self.cfg.shards),
                "--key",
                "{worker}",
                "--restart-delay",
                str(self.cfg.restart_delay),
                "--url",
                self.url,
                "--namespace",
                NAMESPACE,
            ],
            cwd=HERE,
            env={**os.environ, SETTINGS_ENV: json.dumps(settings)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        for i in range(self.cfg.shards):
            self._until_ready(i)

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.changed:
                self.said = [*self.said[-40:], line.rstrip()]
                if m := self.STARTED.search(line):
                    self.pids[int(m[1])] = int(m[2])
                elif m := self.READY.search(line):
                    self.ready[int(m[1])] = int(m[2])
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def _until_ready(self, index: int) -> None:
        with self.changed:
            ok = self.changed.wait_for(
                lambda: (
                    index in self.ready or (self.proc is not None and self.proc.poll() is not None)
                ),
                READY_TIMEOUT,
            )
            if not ok or index not in self.ready:
                said = "\n".join(self.said[-10:])
                raise RuntimeError(
                    f"worker {index} not ready after {READY_TIMEOUT:g}s; said:\n{said}"
                )

    def kill(self, index: int) -> None:
        """SIGKILL the worker, as a crash; its supervisor reaps it."""
        with self.changed:
            pid = self.ready.pop(index)
        os.kill(pid, signal.SIGKILL)

    def back(self, index: int) -> None:
        """Until the supervisor has started worker ``index`` again and it says ready."""
        self._until_ready(index)

    def stop_all(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc], grace=20.0)


Agents = ProcessAgents | SupervisedAgents


# -- the run -------------------------------------------------------------------
@dataclass
class Run:
    samples: list[Sample]
    cycles: list[Cycle]
    end_t: float
    started: str


class Storm:
    def __init__(self, cfg: Config, agents: Agents, system: ActorSystem) -> None:
        self.cfg = cfg
        self.agents = agents
        self.system = system
        self.data = dataset(SEED, cfg.questions)
        self.questions = list(self.data)
        self.samples: list[Sample] = []
        self.t0 = 0.0
        self.stop = asyncio.Event()
        self.phase = "starting"

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def query(self, rng: random.Random) -> Sample:
        question = rng.choice(self.questions)
        start = rng.randrange(self.cfg.shards)
        t = self.now()
        t0 = time.perf_counter()
        error = ""
        detail = ""
        hops = 0
        ok = False
        try:
            reply = await self.system.ask(
                f"{TYPE}/{start}",
                Query(question=question, hops=0, deadline=time.time() + self.cfg.timeout),
                timeout=self.cfg.timeout + 0.25,
                returns=Reply,
            )
            ok = reply.answer == self.data[question]
            hops = reply.hops
            if not ok:
                error = "not_found" if reply.answer is None else "wrong"
        except ActorBusError as exc:
            error = exc.code
            detail = str(exc)[:300]
        return Sample(
            t=t,
            ok=ok,
            latency_s=time.perf_counter() - t0,
            error=error,
            hops=hops,
            detail=detail,
        )

    async def worker(self, n: int) -> None:
        rng = random.Random(self.cfg.seed * 1000 + n)
        period = self.cfg.workers / self.cfg.rate
        await asyncio.sleep(period * n / self.cfg.workers)  # spread the workers out
        while not self.stop.is_set():
            begin = time.monotonic()
            self.samples.append(await self.query(rng))
            await asyncio.sleep(max(0.0, period - (time.monotonic() - begin)))

    async def probe(self, index: int, timeout: float = READY_TIMEOUT) -> None:
        """Ask shard ``index`` directly (a question it holds) until it answers."""
        question = next(q for q in self.questions if holder(q, self.cfg.shards) == index)
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = await self.system.ask(
                    f"{TYPE}/{index}",
                    Query(question=question, hops=0, deadline=time.time() + PROBE_TIMEOUT),
                    timeout=PROBE_TIMEOUT,
                    returns=Reply,
                )
                if reply.answer == self.data[question] and reply.shard == index:
                    return
            except ActorBusError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"shard {index} did not answer within {timeout:g}s")
            await asyncio.sleep(0.01)

    async def restart(self, index: int, cycle: Cycle) -> None:
        await asyncio.to_thread(self.agents.back, index)
        cycle.ready_t = max(cycle.ready_t, self.now())
        await self.probe(index)
        cycle.shard_recovery_s[index] = round(self.now() - cycle.kill_t, 3)

    async def cycle(self, index: int, rng: random.Random, log: Console) -> Cycle:
        cycle = Cycle(
            index=index, victims=sorted(rng.sample(range(self.cfg.shards), self.cfg.kill))
        )
        self.phase = f"cycle {index}: kill {cycle.victims}"
        cycle.kill_t = self.now()
        for victim in cycle.victims:
            self.agents.kill(victim)
        log.print(f"[{cycle.kill_t:7.2f}s] cycle {index}: SIGKILL shards {cycle.victims}")
        self.phase = f"cycle {index}: down, restart in {self.cfg.restart_delay:g}s"
        await asyncio.sleep(self.cfg.restart_delay)
        cycle.restart_t = self.now()
        self.phase = f"cycle {index}: restarting {cycle.victims}"
        await asyncio.gather(*(self.restart(v, cycle) for v in cycle.victims))
        cycle.recovery_t = self.now()
        log.print(
            f"[{cycle.recovery_t:7.2f}s] cycle {index}: recovered in "
            f"{cycle.recovery_t - cycle.kill_t:.2f}s (per shard: {cycle.shard_recovery_s})"
        )
        return cycle

    async def run(self, progress: Progress) -> Run:
        log = progress.console
        started = datetime.now(UTC).isoformat(timespec="seconds")
        for i in range(self.cfg.shards):  # every shard answers before the clock starts
            await self.probe(i)
        rng = random.Random(self.cfg.seed)
        self.t0 = time.monotonic()
        workers = [asyncio.create_task(self.worker(n)) for n in range(self.cfg.workers)]
        task = progress.add_task("steady", total=None)
        ticker = asyncio.create_task(self.tick(progress, task))
        cycles: list[Cycle] = []
        try:
            self.phase = "steady (pre-fault)"
            await asyncio.sleep(self.cfg.window)
            for c in range(1, self.cfg.cycles + 1):
                cycles.append(await self.cycle(c, rng, log))
                self.phase = f"cycle {c}: steady (post-fault)"
                await asyncio.sleep(self.cfg.window)
            self.stop.set()
            await asyncio.gather(*workers)
        finally:
            self.stop.set()
            for w in workers:
                w.cancel()
            ticker.cancel()
            await asyncio.gather(*workers, ticker, return_exceptions=True)
        return Run(samples=self.samples, cycles=cycles, end_t=self.now(), started=started)

    async def tick(self, progress: Progress, task: Any) -> None:
        while True:
            now = self.now()
            recent = [s for s in self.samples[-400:] if s.t >= now - 2.0]
            rate = sum(s.ok for s in recent) / len(recent) if recent else 0.0
            progress.update(
                task,
                description=(
                    f"{self.phase:<40} queries {len(self.samples):6d}  "
                    f"success (last 2 s) {rate:6.1%}"
                ),
            )
            await asyncio.sleep(0.25)


async def measure(cfg: Config, agents: Agents, url: str, console: Console) -> Run:
    system = await ActorSystem.connect(url, name="fail-storm-client", namespace=NAMESPACE)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            return await Storm(cfg, agents, system).run(progress)
    finally:
        await system.close(timeout=2.0)


# -- summary and report --------------------------------------------------------
def summarize(cfg: Config, run: Run) -> dict[str, Any]:
    samples = run.samples
    per_cycle: list[dict[str, Any]] = []
    steady: list[Sample] = []
    for i, c in enumerate(run.cycles):
        pre = window_stats(samples, c.kill_t - cfg.window, c.kill_t)
        post_end = run.cycles[i + 1].kill_t if i + 1 < len(run.cycles) else run.end_t
        post_end = min(post_end, c.recovery_t + cfg.window)
        post = window_stats(samples, c.recovery_t, post_end)
        fault = window_stats(samples, c.kill_t, c.recovery_t)
        per_cycle.append(
            {
                **asdict(c),
                "recovery_s": round(c.recovery_t - c.kill_t, 3),
                "pre": asdict(pre),
                "fault": asdict(fault),
                "post": asdict(post),
                "retention": post.rate / pre.rate if pre.rate else None,
            }
        )
    steady_ranges: list[tuple[float, float]] = []
    for cyc in per_cycle:
        steady_ranges.append((cyc["pre"]["start"], cyc["pre"]["end"]))
        steady_ranges.append((cyc["post"]["start"], cyc["post"]["end"]))
    steady = [s for s in samples if any(a <= s.t < b for a, b in steady_ranges)]
    steady_ok = sorted(s.latency_s * 1000 for s in steady if s.ok)
    fault_samples = [s for s in samples if any(c.kill_t <= s.t < c.recovery_t for c in run.cycles)]
    errors: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for s in samples:
        if s.error:
            errors[s.error] = errors.get(s.error, 0) + 1
            if s.detail and len(examples.setdefault(s.error, [])) < 3:
                examples[s.error].append(f"t={s.t:.2f}s: {s.detail}")

    def mean(key: str, sub: str | None = None) -> float | None:
        vals = [
            (c[key][sub] if sub else c[key])
            for c in per_cycle
            if (c[key][sub] if sub else c[key]) is not None
        ]
        return statistics.fmean(vals) if vals else None

    pre_rate = mean("pre", "rate")
    post_rate = mean("post", "rate")
    overall = {
        "cycles": len(per_cycle),
        "queries": len(samples),
        "answered": sum(s.ok for s in samples),
        "recovery_s_mean": mean("recovery_s"),
        "recovery_s_max": max((c["recovery_s"] for c in per_cycle), default=None),
        "pre_rate_mean": pre_rate,
        "fault_rate_mean": mean("fault", "rate"),
        "post_rate_mean": post_rate,
        "retention": post_rate / pre_rate if pre_rate and post_rate is not None else None,
        "steady_queries": len(steady),
        "steady_rate": sum(s.ok for s in steady) / len(steady) if steady else None,
        "steady_p50_ms": percentile(steady_ok, 0.5) if steady_ok else None,
        "steady_p95_ms": percentile(steady_ok, 0.95) if steady_ok else None,
        "fault_queries": len(fault_samples),
        "errors": errors,
        "error_examples": examples,
    }
    return {"cycles": per_cycle, "overall": overall}


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_table(console: Console, cfg: Config, summary: dict[str, Any]) -> None:
    table = Table(
        title=(
            f"Fail-Storm Recovery on actorbus: {cfg.shards} shards, kill {cfg.kill} per cycle, "
            f"window {cfg.window:g} s, restart delay {cfg.restart_delay:g} s, "
            f"{'skip' if cfg.skip else 'no skip'}"
        )
    )
    table.add_column("cycle", justify="right")
    table.add_column("killed")
    for col in (
        "recovery s",
        "pre rate",
        "fault rate",
        "post rate",
        "retention",
        "pre p50 ms",
        "pre p95 ms",
        "post p50 ms",
        "post p95 ms",
        "queries pre/fault/post",
    ):
        table.add_column(col, justify="right")
    for c in summary["cycles"]:
        table.add_row(
            str(c["index"]),
            ",".join(map(str, c["victims"])),
            fmt_s(c["recovery_s"]),
            fmt_pct(c["pre"]["rate"]),
            fmt_pct(c["fault"]["rate"]),
            fmt_pct(c["post"]["rate"]),
            fmt_pct(c["retention"]),
            fmt_ms(c["pre"]["p50_ms"]),
            fmt_ms(c["pre"]["p95_ms"]),
            fmt_ms(c["post"]["p50_ms"]),
            fmt_ms(c["post"]["p95_ms"]),
            f"{c['pre']['queries']}/{c['fault']['queries']}/{c['post']['queries']}",
        )
    o = summary["overall"]
    table.add_section()
    table.add_row(
        "all",
        "",
        fmt_s(o["recovery_s_mean"]),
        fmt_pct(o["pre_rate_mean"]),
        fmt_pct(o["fault_rate_mean"]),
        fmt_pct(o["post_rate_mean"]),
        fmt_pct(o["retention"]),
        fmt_ms(o["steady_p50_ms"]),
        fmt_ms(o["steady_p95_ms"]),
        "",
        "",
        f"{o['queries']} total",
    )
    console.print(table)
    console.print(
        f"recovery time mean {fmt_s(o['recovery_s_mean'])} s (max {fmt_s(o['recovery_s_max'])} s, "
        f"includes the {cfg.restart_delay:g} s restart delay); "
        f"answer discovery pre {fmt_pct(o['pre_rate_mean'])}, "
        f"post {fmt_pct(o['post_rate_mean'])}, retention {fmt_pct(o['retention'])}; "
        f"during faults {fmt_pct(o['fault_rate_mean'])}; "
        f"steady-state latency p50 {fmt_ms(o['steady_p50_ms'])} ms, "
        f"p95 {fmt_ms(o['steady_p95_ms'])} ms; errors {o['errors'] or 'none'}",
        highlight=False,
    )


def buckets(samples: Sequence[Sample], end_t: float) -> list[dict[str, Any]]:
    n = max(1, math.ceil(end_t))
    out: list[dict[str, Any]] = [{"t": i, "queries": 0, "answered": 0} for i in range(n)]
    lat: list[list[float]] = [[] for _ in range(n)]
    for s in samples:
        i = min(n - 1, int(s.t))
        out[i]["queries"] += 1
        if s.ok:
            out[i]["answered"] += 1
            lat[i].append(s.latency_s * 1000)
    for b, ls in zip(out, lat, strict=True):
        b["rate"] = b["answered"] / b["queries"] if b["queries"] else None
        b["p50_ms"] = statistics.median(ls) if ls else None
    return out


def plot(path: Path, cfg: Config, run: Run, timeline: list[dict[str, Any]], title: str) -> bool:
    plt = pyplot()
    if plt is None:
        return False

    fig, (ax, ax_lat) = plt.subplots(
        2, 1, figsize=(12, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    xs = [b["t"] + 0.5 for b in timeline if b["rate"] is not None]
    ax.step(
        xs,
        [b["rate"] * 100 for b in timeline if b["rate"] is not None],
        where="mid",
        color="#4c72b0",
        label="answer discovery (1 s buckets)",
    )
    xl = [b["t"] + 0.5 for b in timeline if b["p50_ms"] is not None]
    ax_lat.step(
        xl, [b["p50_ms"] for b in timeline if b["p50_ms"] is not None], where="mid", color="#555"
    )
    for i, c in enumerate(run.cycles):
        first = i == 0
        for a in (ax, ax_lat):
            a.axvline(c.kill_t, color="red", lw=1.2, label="kill" if first and a is ax else None)
            a.axvline(
                c.restart_t,
                color="orange",
                ls="--",
                lw=1,
                label="restart" if first and a is ax else None,
            )
            a.axvline(
                c.recovery_t,
                color="green",
                lw=1.2,
                label="recovered" if first and a is ax else None,
            )
        ax.axvspan(c.kill_t - cfg.window, c.kill_t, color="#4c72b0", alpha=0.06)
        ax.axvspan(c.kill_t, c.recovery_t, color="red", alpha=0.10)
        ax.text(c.kill_t, 103, f"kill {c.victims}", fontsize=7, color="red")
    ax.set_ylim(0, 110)
    ax.set_ylabel("answered correctly (%)")
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax_lat.set_ylabel("p50 latency (ms)")
    ax_lat.set_xlabel("time since start (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- entry point -----------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(160)
    compile_sources()  # restarted shards start as an installed actorbus does
    # loopback; JetStream on, as a deployment has it: each shard registers its type
    server_config = ServerConfig(host="127.0.0.1")
    agents: Agents | None = None
    try:
        with EmbeddedServer(server_config) as nats_server:
            machine = machine_info(binary=nats_server.binary)
            console.print(
                f"nats-server {machine['nats_server']} at {nats_server.url}; "
                f"Python {machine['python']}; {machine['cpu_count']} CPUs; "
                f"{cfg.shards} shards, {cfg.cycles} cycle(s), kill {cfg.kill}, "
                f"window {cfg.window:g} s, restart delay {cfg.restart_delay:g} s "
                f"(by the {cfg.restart}), {cfg.workers} workers at {cfg.rate:g} q/s, "
                f"timeout {cfg.timeout:g} s"
            )
            agents = (SupervisedAgents if cfg.restart == "supervisor" else ProcessAgents)(
                cfg, nats_server.url
            )
            try:
                agents.start_all()
                run = asyncio.run(measure(cfg, agents, nats_server.url, console))
            finally:
                agents.stop_all()
    except KeyboardInterrupt:
        console.print("interrupted; agents and nats-server stopped")
        return 130

    summary = summarize(cfg, run)
    print_table(console, cfg, summary)
    timeline = buckets(run.samples, run.end_t)
    data: dict[str, Any] = {
        "benchmark": "Fail-Storm Recovery (ProtocolBench D.4) on actorbus",
        "started": run.started,
        "duration_s": round(run.end_t, 2),
        "config": {
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
            "dataset_seed": SEED,
            "namespace": NAMESPACE,
            "agent_process": "bench/_fail_storm_agent.py",
            "restarted_by": (
                "actorbus run --workers: a fork of a warm parent"
                if cfg.restart == "supervisor"
                else "the benchmark: a new Python process"
            ),
            "definitions": {
                "recovery_s": "kill to the moment the last killed shard answers a direct ask",
                "pre": "queries started in the window before the kill",
                "fault": "queries started between the kill and recovery",
                "post": "queries started in the window after recovery (until the next kill)",
                "rate": "answer discovery rate: correct answers / queries",
                "retention": "post rate / pre rate",
                "steady latency": "p50/p95 of correct answers in pre and post windows",
            },
        },
        "machine": machine,
        **summary,
        "timeline": timeline,
    }
    o = summary["overall"]
    title = (
        f"Fail-Storm on actorbus: {cfg.shards} shards, kill {cfg.kill}/cycle, "
        f"{cfg.cycles} cycle(s), restarted by the {cfg.restart}; "
        f"recovery {fmt_s(o['recovery_s_mean'])} s, "
        f"retention {fmt_pct(o['retention'])}, steady p50 {fmt_ms(o['steady_p50_ms'])} ms"
    )
    write_report(
        console, cfg.out, "fail_storm", data, lambda png: plot(png, cfg, run, timeline, title)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
