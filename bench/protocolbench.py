"""ProtocolBench side by side: actorbus and the stacks users choose between, on the
same scenarios, in one run.

    python bench/protocolbench.py [--rounds 3] [--quick] [--stacks a,b]
                                  [--scenarios echo,sq,docqa,storm,safety]
    make bench-all                       # makes .venv-peers first (the peers' packages)

Stacks (``bench/stacks/``, each in processes of its own, all on this machine):

- ``actorbus``: actorbus ``ask`` with pydantic models on an open bus (the baseline of
  every ratio);
- ``nats``: raw nats-py request/reply, the floor under every NATS stack;
- ``faststream``: FastStream on NATS (``broker.request``, pydantic models);
- ``autogen``: AutoGen Core's gRPC worker runtime (a host process between worker
  runtimes, ``send_message``, pydantic models);
- ``a2a``: a mesh of a2a-sdk servers over HTTP (JSON-RPC, the SDK's client).

The peers run from ``.venv-peers`` (``bench/peers-requirements.txt``); a stack
whose packages are missing is skipped, and the report says so.

Scenarios:

- ``echo``: a 200-byte echo; ``--sequential`` calls one at a time (p50/p95/p99),
  then ``--concurrent`` calls with ``--inflight`` in flight (calls/s);
- ``sq``: the Streaming Queue: a coordinator and N workers (``--workers``) in
  another process; each worker pulls its next question when free, spends
  ``--service-ms`` on it and answers with its next pull (the paper's metrics:
  total duration, latency mean/median/min/max/std, P95, P99, success rate and
  load-balance variance);
- ``docqa``: GAIA-like hierarchical document QA (``_pb_docqa.py``,
  ``stacks/_docqa.py``): a planner, 4 readers, an aggregator and a judge, each a
  process, over the fixed corpus of ``bench/data/docqa.json``; success, latency,
  tasks/s, messages and payload bytes per task;
- ``storm``: Fail-Storm (``_pb_storm.py``, ``stacks/_storm.py``): a ring of 8
  shard processes, 3 SIGKILLed per cycle and started again 2 s later, the same
  cold restart on every stack, and actorbus once more with its supervisor
  (``actorbus run --workers``); time to recovery and the answers kept;
- ``safety``: what each stack blocks out of the box (``_pb_safety.py``): an
  attacker on the path eavesdrops, tampers and replays one marked request;
  actorbus runs on its secured broker (its default), the peers as they come, and
  actorbus on an open bus is the control that shows the probes see through.

Rounds interleave the stacks in rotating order; figures are medians over rounds,
with a bootstrap 95% confidence interval for the median latency (rounds and
calls resampled) and ratios to actorbus. Writes ``bench/results/protocolbench.json``,
``protocolbench.png`` and the report ``protocolbench.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _pb_docqa
import _pb_safety
import _pb_storm
from _harness import (
    LoggedProgress,
    compile_sources,
    machine_info,
    percentile,
    positive_int,
    presets,
    pyplot,
    report_console,
    stop_processes,
    write_report,
)
from _pb_safety import ATTACKS, blocked_count
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.security.secure_broker import SecureBroker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STACKS_DIR = HERE / "stacks"
PEERS_PYTHON = REPO / ".venv-peers" / "bin" / "python"
PEERS_REQUIREMENTS = HERE / "peers-requirements.txt"
DEFAULT_OUT = HERE / "results"
BASELINE = "actorbus"
CODECS = ("a2a", "acp", "anp", "agora")  # actorbus with each protocol's codec at the edges
DEFAULTS = {"rounds": 3, "sequential": 2000, "concurrent": 10000, "questions": 1000}
QUICK = {"rounds": 1, "sequential": 300, "concurrent": 1000, "questions": 200}
START_TIMEOUT = 60.0
RUN_TIMEOUT = 600.0
NAMESPACE = "pb"  # actorbus_native's, which the secured broker admits
OPEN_CONTROL = "actorbus (open bus)"


@dataclass(frozen=True)
class Stack:
    name: str
    module: str  # bench/stacks/<module>.py
    peer: bool  # runs from .venv-peers
    label: str
    needs: str  # what a peer's interpreter must import
    inflight: int | None = None  # its own in-flight count for throughput, if any
    note: str = ""
    args: tuple[str, ...] = ()  # given to each of its processes


STACKS = (
    Stack("actorbus", "actorbus_native", False, "actorbus ask (pydantic, open bus)", "actorbus"),
    *(
        Stack(
            f"actorbus+{codec}",
            "actorbus_native",
            False,
            f"actorbus ask, each question and answer as {codec.upper()} JSON at the edges",
            "actorbus",
            note="the codec's encode at the sender and decode at the receiver, as an adapter's",
            args=("--codec", codec),
        )
        for codec in CODECS
    ),
    Stack("nats", "nats_raw", False, "raw nats-py request/reply", "nats"),
    Stack(
        "faststream",
        "faststream_nats",
        True,
        "FastStream on NATS",
        "faststream.nats",
        note="no per-message logging (logger=None; FastStream logs every message by default)",
    ),
    Stack(
        "autogen",
        "autogen_grpc",
        True,
        "AutoGen Core gRPC worker runtime",
        "autogen_ext.runtimes.grpc",
        note="a GrpcWorkerAgentRuntimeHost process between the worker runtimes",
    ),
    Stack(
        "a2a",
        "a2a_http",
        True,
        "a2a-sdk servers over HTTP",
        "a2a.server",
        inflight=10,
        note=(
            "uvicorn on uvloop with httptools, as uvicorn.run with uvicorn[standard]; "
            "throughput with 10 in flight (its best: with 100 it falls to a third)"
        ),
    ),
)


@dataclass(frozen=True)
class Config:
    rounds: int
    sequential: int
    concurrent: int
    inflight: int
    questions: int
    workers: tuple[int, ...]
    service_ms: float
    scenarios: tuple[str, ...]
    stacks: tuple[str, ...]
    peers_python: Path
    out: Path
    quick: bool


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rounds", type=positive_int, help="rounds (3)")
    parser.add_argument("--sequential", type=positive_int, help="echo calls one at a time (2000)")
    parser.add_argument("--concurrent", type=positive_int, help="echo calls for throughput")
    parser.add_argument("--inflight", type=positive_int, default=100, help="in flight (100)")
    parser.add_argument("--questions", type=positive_int, help="Streaming Queue questions (1000)")
    parser.add_argument("--workers", default="4,8,16,32,256", help="worker counts (4,8,16,32,256)")
    parser.add_argument("--service-ms", type=float, default=10.0, help="service time (10 ms)")
    parser.add_argument(
        "--scenarios",
        default="echo,sq,docqa,storm,safety",
        help="echo,sq,docqa,storm,safety",
    )
    parser.add_argument("--stacks", default=",".join(s.name for s in STACKS))
    parser.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 short round")
    args = parser.parse_args(argv)
    sizes = presets(args, DEFAULTS, QUICK)
    names = tuple(n for n in args.stacks.split(",") if n)
    unknown = set(names) - {s.name for s in STACKS}
    if unknown:
        parser.error(f"unknown stacks: {', '.join(sorted(unknown))}")
    workers = tuple(int(w) for w in args.workers.split(","))
    return Config(
        workers=workers if not args.quick else workers[:2],
        inflight=args.inflight,
        service_ms=args.service_ms,
        scenarios=tuple(s for s in args.scenarios.split(",") if s),
        stacks=names,
        peers_python=args.peers_python,
        out=args.out,
        quick=args.quick,
        **sizes,
    )


# -- running the stacks -------------------------------------------------------------
def interpreter(stack: Stack, cfg: Config) -> str:
    return str(cfg.peers_python) if stack.peer else sys.executable


def available(stack: Stack, cfg: Config) -> str | None:
    """None when the stack can run here, else why not."""
    python = interpreter(stack, cfg)
    if not Path(python).exists():
        return f"no {python} (make bench-all makes it from {PEERS_REQUIREMENTS.name})"
    done = subprocess.run([python, "-c", f"import {stack.needs}"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"{stack.needs} does not import in {python}: pip install -r {PEERS_REQUIREMENTS}"
    return None


def peer_versions(cfg: Config) -> dict[str, str | None]:
    """The versions of the peers' packages, read by their own interpreter."""
    names = ["faststream", "autogen-core", "autogen-ext", "grpcio", "a2a-sdk", "uvicorn"]
    names += ["nats-py", "pydantic"]
    probe = (
        "import json, importlib.metadata as m\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except m.PackageNotFoundError: return None\n"
        f"print(json.dumps({{n: v(n) for n in {names!r}}}))"
    )
    done = subprocess.run([str(cfg.peers_python), "-c", probe], capture_output=True, text=True)
    versions: dict[str, str | None] = json.loads(done.stdout) if done.returncode == 0 else {}
    return versions


def command(stack: Stack, cfg: Config, *args: str) -> list[str]:
    return [interpreter(stack, cfg), str(STACKS_DIR / f"{stack.module}.py"), *args, *stack.args]


def start_echo(stack: Stack, cfg: Config, nats_url: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        command(stack, cfg, "serve-echo", "--nats", nats_url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    for line in proc.stdout:
        if line.startswith("ready "):
            return proc, line.split()[1]
        if time.monotonic() > deadline:
            break
    stop_processes([proc])
    raise RuntimeError(f"{stack.name}: the echo server did not start")


def run_result(stack: Stack, cfg: Config, *args: str) -> dict[str, Any]:
    """Run one measuring process of ``stack`` and read its ``result`` line."""
    done = subprocess.run(
        command(stack, cfg, *args), capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    for line in done.stdout.splitlines():
        if line.startswith("result "):
            result: dict[str, Any] = json.loads(line[len("result ") :])
            return result
    raise RuntimeError(f"{stack.name} {args[0]} failed:\n{done.stderr[-3000:]}")


# -- statistics ------------------------------------------------------------------------
def bootstrap_ci(rounds: list[list[float]], resamples: int = 300) -> tuple[float, float]:
    """A 95% confidence interval of the median over rounds of each round's median:
    rounds resampled, then the calls within each (so the interval holds the
    round-to-round spread of a noisy machine, not only the calls' own)."""
    rng = random.Random(7)
    estimates = sorted(
        statistics.median(
            statistics.median(rng.choices(r, k=len(r))) for r in rng.choices(rounds, k=len(rounds))
        )
        for _ in range(resamples)
    )
    return estimates[int(0.025 * resamples)], estimates[int(0.975 * resamples) - 1]


def echo_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    per_round = [sorted(r["latencies_us"]) for r in rounds]
    low, high = bootstrap_ci(per_round)
    throughputs = [r["throughput"] for r in rounds]
    return {
        "p50_us": statistics.median(percentile(s, 0.50) for s in per_round),
        "p95_us": statistics.median(percentile(s, 0.95) for s in per_round),
        "p99_us": statistics.median(percentile(s, 0.99) for s in per_round),
        "p50_ci95_us": [low, high],
        "throughput": statistics.median(throughputs),
        "throughput_range": [min(throughputs), max(throughputs)],
        "errors": sum(r["errors"] for r in rounds),
        "rounds": len(rounds),
    }


def sq_summary(rounds: list[dict[str, Any]], questions: int) -> dict[str, Any]:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    stats = []
    for r in rounds:
        lat = sorted(r["latencies_ms"])
        stats.append(
            {
                "duration_s": r["duration_s"],
                "mean_ms": statistics.fmean(lat),
                "median_ms": statistics.median(lat),
                "min_ms": lat[0],
                "max_ms": lat[-1],
                "std_ms": statistics.pstdev(lat),
                "p95_ms": percentile(lat, 0.95),
                "p99_ms": percentile(lat, 0.99),
                "success": (r["answered"] - r["wrong"]) / questions,
                "balance_var": statistics.pvariance(r["per_worker"]),
                "cpu_ms_per_question": (r["coordinator_cpu_s"] + (r["workers_cpu_s"] or 0.0))
                * 1000
                / questions,
            }
        )
    summary: dict[str, Any] = {key: med([s[key] for s in stats]) for key in stats[0]}
    low, high = bootstrap_ci([r["latencies_ms"] for r in rounds])
    summary["median_ci95_ms"] = [low, high]
    summary["rounds"] = len(rounds)
    return summary


# -- the run ---------------------------------------------------------------------------
def measure(cfg: Config, stacks: list[Stack], nats_url: str, progress: Progress) -> dict[str, Any]:
    echo_raw: dict[str, list[dict[str, Any]]] = {s.name: [] for s in stacks}
    sq_raw: dict[str, dict[int, list[dict[str, Any]]]] = {
        s.name: {n: [] for n in cfg.workers} for s in stacks
    }
    docqa_raw: dict[str, list[dict[str, Any]]] = {s.name: [] for s in stacks if not s.args}
    servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
    steps = cfg.rounds * (
        len(stacks) * (("echo" in cfg.scenarios) + ("sq" in cfg.scenarios) * len(cfg.workers))
        + len(docqa_raw) * ("docqa" in cfg.scenarios)
    )
    task = progress.add_task("protocolbench", total=steps)
    try:
        if "echo" in cfg.scenarios:
            for stack in stacks:
                progress.update(task, description=f"starting {stack.name}'s echo server")
                servers[stack.name] = start_echo(stack, cfg, nats_url)
        for r in range(cfg.rounds):
            order = stacks[r % len(stacks) :] + stacks[: r % len(stacks)]
            if "echo" in cfg.scenarios:
                for stack in order:
                    progress.update(task, description=f"round {r + 1}: echo on {stack.name}")
                    inflight = stack.inflight or cfg.inflight
                    echo_raw[stack.name].append(
                        run_result(
                            stack,
                            cfg,
                            "echo",
                            *("--nats", nats_url, "--address", servers[stack.name][1]),
                            *("--sequential", str(cfg.sequential)),
                            *("--concurrent", str(cfg.concurrent), "--inflight", str(inflight)),
                        )
                    )
                    progress.advance(task)
            if "sq" in cfg.scenarios:
                for n in cfg.workers:
                    for stack in order:
                        progress.update(
                            task, description=f"round {r + 1}: {n} workers on {stack.name}"
                        )
                        sq_raw[stack.name][n].append(
                            run_result(
                                stack,
                                cfg,
                                "sq",
                                *("--nats", nats_url, "--workers", str(n)),
                                *("--questions", str(cfg.questions)),
                                *("--service-ms", str(cfg.service_ms)),
                            )
                        )
                        progress.advance(task)
            if "docqa" in cfg.scenarios:
                repeat = _pb_docqa.QUICK_REPEAT if cfg.quick else _pb_docqa.REPEAT
                for stack in order:
                    if stack.name not in docqa_raw:
                        continue  # a codec at the edges: the same agents, another encoding
                    progress.update(task, description=f"round {r + 1}: document QA on {stack.name}")
                    docqa_raw[stack.name].append(
                        run_result(stack, cfg, "docqa", "--nats", nats_url, *_pb_docqa.args(repeat))
                    )
                    progress.advance(task)
    finally:
        stop_processes([proc for proc, _ in servers.values()])
    return {"echo": echo_raw, "sq": sq_raw, "docqa": docqa_raw}


def measure_storm(
    cfg: Config, stacks: list[Stack], nats_url: str, progress: Progress
) -> dict[str, Any]:
    """One Fail-Storm run per stack (a codec at the edges changes nothing here), then
    actorbus with its supervisor."""
    settings = _pb_storm.QUICK_STORM if cfg.quick else _pb_storm.STORM
    runs = [s for s in stacks if s.name == BASELINE or s.peer or s.name == "nats"]
    task = progress.add_task("storm", total=len(runs) + 1)
    raw: dict[str, Any] = {}
    for stack in runs:
        progress.update(task, description=f"Fail-Storm on {stack.name}")
        try:
            raw[stack.name] = run_result(
                stack, cfg, "storm", "--nats", nats_url, *_pb_storm.storm_args(settings)
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raw[stack.name] = {"error": str(exc)[-500:]}
        progress.advance(task)
    if any(s.name == BASELINE for s in stacks):
        progress.update(task, description="Fail-Storm on actorbus run --workers")
        try:
            raw[_pb_storm.SUPERVISED] = _pb_storm.supervised_run(settings, RUN_TIMEOUT)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raw[_pb_storm.SUPERVISED] = {"error": str(exc)[-500:]}
        progress.advance(task)
    return {"settings": settings, "runs": raw}


def measure_safety(
    cfg: Config, stacks: list[Stack], open_url: str, secured: tuple[str, Path], progress: Progress
) -> dict[str, Any]:
    """The Safety row: each stack in its default configuration (actorbus on its
    secured broker, ``secured``; the others on the open one), and actorbus on the
    open broker as the control."""
    runs: list[_pb_safety.Run] = []
    for s in stacks:
        cmd = functools.partial(command, s, cfg)
        if s.name == BASELINE:
            runs.append(_pb_safety.Run(BASELINE, s.module, secured[0], secured[1], cmd))
            runs.append(_pb_safety.Run(OPEN_CONTROL, s.module, open_url, None, cmd))
        elif s.peer or s.name == "nats":
            runs.append(_pb_safety.Run(s.name, s.module, open_url, None, cmd))
    return _pb_safety.measure(runs, progress, START_TIMEOUT)


def summarize(cfg: Config, raw: dict[str, Any], stacks: list[Stack]) -> dict[str, Any]:
    echo = {s.name: echo_summary(raw["echo"][s.name]) for s in stacks if raw["echo"][s.name]}
    sq = {
        s.name: {n: sq_summary(rounds, cfg.questions) for n, rounds in by_n.items() if rounds}
        for s in stacks
        for by_n in [raw["sq"][s.name]]
    }
    base = echo.get(BASELINE)
    for e in echo.values():
        if base is not None:
            e["p50_vs_actorbus"] = e["p50_us"] / base["p50_us"]
            e["throughput_vs_actorbus"] = e["throughput"] / base["throughput"]
    for by_n in sq.values():
        for n, s in by_n.items():
            b = sq.get(BASELINE, {}).get(n)
            if b is not None:
                s["duration_vs_actorbus"] = s["duration_s"] / b["duration_s"]
                s["overhead_ms"] = s["median_ms"] - cfg.service_ms
    docqa = _pb_docqa.with_ratios(
        {name: _pb_docqa.summary(rounds) for name, rounds in raw["docqa"].items() if rounds},
        BASELINE,
    )
    storm_raw = raw.get("storm", {}).get("runs", {})
    storm = {name: r if "error" in r else _pb_storm.summary(r) for name, r in storm_raw.items()}
    safety = raw.get("safety", {})
    for row in safety.values():
        if "error" not in row:
            row["blocked"] = blocked_count(row)
    return {"echo": echo, "sq": sq, "docqa": docqa, "storm": storm, "safety": safety}


def leads(summary: dict[str, Any]) -> list[str]:
    """Where actorbus does not lead a peer (raw nats-py is the floor, not a peer)."""
    found = []
    peers = [s.name for s in STACKS if s.peer]
    base = summary["echo"].get(BASELINE)
    for name in peers:
        e = summary["echo"].get(name)
        if base and e:
            if e["p50_us"] < base["p50_us"]:
                found.append(
                    f"echo p50: {name} {e['p50_us']:.0f} µs < actorbus {base['p50_us']:.0f} µs"
                )
            if e["throughput"] > base["throughput"]:
                found.append(
                    f"echo throughput: {name} {e['throughput']:.0f}/s > "
                    f"actorbus {base['throughput']:.0f}/s"
                )
        for n, s in summary["sq"].get(name, {}).items():
            b = summary["sq"].get(BASELINE, {}).get(n)
            if b and s["duration_s"] < b["duration_s"]:
                found.append(
                    f"Streaming Queue, {n} workers: {name} {s['duration_s']:.3f} s < "
                    f"actorbus {b['duration_s']:.3f} s"
                )
        found += _pb_docqa.behind(summary.get("docqa", {}), BASELINE, [name])
        ours_storm = summary.get("storm", {}).get(BASELINE, {})
        theirs = summary.get("storm", {}).get(name, {})
        ours_s, theirs_s = ours_storm.get("recovery_s"), theirs.get("recovery_s")
        if ours_s and theirs_s and theirs_s < ours_s:
            found.append(
                f"Fail-Storm recovery with a cold restart: {name} {theirs_s:.2f} s < "
                f"actorbus {ours_s:.2f} s"
            )
        guarded = summary.get("safety", {}).get(name, {}).get("blocked")
        ours = summary.get("safety", {}).get(BASELINE, {}).get("blocked")
        if guarded is not None and ours is not None and guarded > ours:
            found.append(f"safety: {name} blocks {guarded} of 3 attacks, actorbus {ours}")
    return found


# -- output ------------------------------------------------------------------------------
def print_tables(console: Console, cfg: Config, summary: dict[str, Any]) -> None:
    if summary["echo"]:
        table = Table(title=f"echo, {cfg.rounds} round(s): medians; ratios to actorbus")
        for col in ("stack", "p50 µs", "95% CI", "p95 µs", "p99 µs", "calls/s", "p50 x", "tput x"):
            table.add_column(col, justify="right" if col != "stack" else "left")
        for name, e in summary["echo"].items():
            table.add_row(
                name,
                f"{e['p50_us']:.0f}",
                f"{e['p50_ci95_us'][0]:.0f}-{e['p50_ci95_us'][1]:.0f}",
                f"{e['p95_us']:.0f}",
                f"{e['p99_us']:.0f}",
                f"{e['throughput']:,.0f}",
                f"{e.get('p50_vs_actorbus', 1):.2f}",
                f"{e.get('throughput_vs_actorbus', 1):.2f}",
            )
        console.print(table)
    if any(summary["sq"].values()):
        table = Table(title=f"Streaming Queue, {cfg.questions} questions, {cfg.service_ms:g} ms")
        for col in ("stack", "workers", "duration s", "x", "median ms", "p99 ms", "CPU ms/q", "ok"):
            table.add_column(col, justify="right" if col != "stack" else "left")
        for name, by_n in summary["sq"].items():
            for n, s in by_n.items():
                table.add_row(
                    name,
                    str(n),
                    f"{s['duration_s']:.3f}",
                    f"{s.get('duration_vs_actorbus', 1):.2f}",
                    f"{s['median_ms']:.2f}",
                    f"{s['p99_ms']:.2f}",
                    f"{s['cpu_ms_per_question']:.3f}",
                    f"{s['success']:.1%}",
                )
        console.print(table)


def plot(path: Path, summary: dict[str, Any]) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, 5, figsize=(23, 4.5))
    names = list(summary["echo"])
    if names:
        p50 = [summary["echo"][n]["p50_us"] for n in names]
        cis = [summary["echo"][n]["p50_ci95_us"] for n in names]
        errs = [
            [max(0.0, p - lo) for p, (lo, _) in zip(p50, cis, strict=True)],
            [max(0.0, hi - p) for p, (_, hi) in zip(p50, cis, strict=True)],
        ]
        axes[0].bar(names, p50, yerr=errs, color="#4c72b0")
        axes[0].set_yscale("log")
        axes[0].set_title("echo p50 latency (µs, log; 95% CI)", fontsize=9)
        axes[1].bar(names, [summary["echo"][n]["throughput"] for n in names], color="#55a868")
        axes[1].set_yscale("log")
        axes[1].set_title("echo calls/s (log)", fontsize=9)
    for name, by_n in summary["sq"].items():
        if by_n:
            ns = sorted(by_n, key=int)  # ints in the run, strings when read back from JSON
            xs = [int(n) for n in ns]
            axes[2].plot(xs, [by_n[n]["duration_s"] for n in ns], marker="o", label=name)
    axes[2].set_xscale("log", base=2)
    axes[2].set_title("Streaming Queue total duration (s) by workers", fontsize=9)
    if any(summary["sq"].values()):
        axes[2].legend(fontsize=8)
    safety = {n: r["blocked"] for n, r in summary.get("safety", {}).items() if "blocked" in r}
    if safety:
        colors = ["#55a868" if b == len(ATTACKS) else "#c44e52" for b in safety.values()]
        axes[3].barh(list(safety), list(safety.values()), color=colors)
        axes[3].set_xlim(0, len(ATTACKS))
        axes[3].set_xticks(range(len(ATTACKS) + 1))
        axes[3].invert_yaxis()
    axes[3].set_title("safety: attacks blocked out of the box (of 3)", fontsize=9)
    storm = {n: r["recovery_s"] for n, r in summary.get("storm", {}).items() if "recovery_s" in r}
    if storm:
        axes[4].barh(list(storm), list(storm.values()), color="#8172b2")
        axes[4].axvline(2.0, color="#999", ls="--", lw=1)  # the restart delay
        axes[4].invert_yaxis()
        axes[4].tick_params(axis="y", labelsize=8)
    axes[4].set_title("Fail-Storm time to recovery (s; 2 s is the restart delay)", fontsize=9)
    for ax in axes[:2]:
        ax.tick_params(axis="x", labelsize=8, labelrotation=60)
    axes[3].tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown(
    cfg: Config,
    raw_settings: dict[str, float],
    summary: dict[str, Any],
    stacks: list[Stack],
    skipped: dict[str, str],
    machine: dict[str, Any],
    argv: list[str],
) -> str:
    lines = [
        "# ProtocolBench side by side",
        "",
        f"Made by `{' '.join(['python bench/protocolbench.py', *argv])}` on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; {machine.get('cpu_count')} CPUs, "
        f"Python {machine.get('python')}, nats-server {machine.get('nats_server')}. "
        f"{cfg.rounds} round(s), stacks interleaved in rotating order; medians over rounds.",
        "",
        "| stack | what runs | notes |",
        "|---|---|---|",
    ]
    for s in stacks:
        lines.append(f"| `{s.name}` | {s.label} | {s.note} |")
    for name, why in skipped.items():
        lines.append(f"| `{name}` | skipped | {why} |")
    if summary["echo"]:
        lines += [
            "",
            f"## Echo: 200 bytes, {cfg.sequential} one at a time, {cfg.concurrent} with "
            f"{cfg.inflight} in flight",
            "",
            "| stack | p50 µs (95% CI) | p95 µs | p99 µs | calls/s | p50 vs actorbus | "
            "calls/s vs actorbus |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, e in summary["echo"].items():
            lo, hi = e["p50_ci95_us"]
            lines.append(
                f"| `{name}` | {e['p50_us']:.0f} ({lo:.0f}-{hi:.0f}) | {e['p95_us']:.0f} | "
                f"{e['p99_us']:.0f} | {e['throughput']:,.0f} | "
                f"{e.get('p50_vs_actorbus', 1):.2f}x | {e.get('throughput_vs_actorbus', 1):.2f}x |"
            )
    if any(summary["sq"].values()):
        lines += [
            "",
            f"## Streaming Queue: {cfg.questions} questions, {cfg.service_ms:g} ms each",
            "",
            "| stack | workers | duration s | vs actorbus | mean / median ms | min / max ms | "
            "std ms | P95 / P99 ms | success | balance var | CPU ms per question |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, by_n in summary["sq"].items():
            for n, s in by_n.items():
                lines.append(
                    f"| `{name}` | {n} | {s['duration_s']:.3f} | "
                    f"{s.get('duration_vs_actorbus', 1):.2f}x | {s['mean_ms']:.2f} / "
                    f"{s['median_ms']:.2f} | {s['min_ms']:.2f} / {s['max_ms']:.2f} | "
                    f"{s['std_ms']:.2f} | {s['p95_ms']:.2f} / {s['p99_ms']:.2f} | "
                    f"{s['success']:.1%} | {s['balance_var']:.2f} | "
                    f"{s['cpu_ms_per_question']:.2f} |"
                )
    if summary.get("docqa"):
        repeat = _pb_docqa.QUICK_REPEAT if cfg.quick else _pb_docqa.REPEAT
        lines += _pb_docqa.markdown(summary["docqa"], repeat)
    if summary.get("storm"):
        lines += _pb_storm.markdown(summary["storm"], raw_settings)
    if summary.get("safety"):
        lines += _pb_safety.markdown(summary["safety"])
    behind = leads(summary)
    lines += ["", "## Where actorbus does not lead", ""]
    lines += [f"- {b}" for b in behind] or ["- nowhere in this run: it leads every peer."]
    lines += [
        "",
        "Raw nats-py is the floor the NATS stacks stand on, not a peer: actorbus adds "
        "its envelope, typed models and per-actor mailboxes to it.",
        "",
        "![ProtocolBench side by side](protocolbench.png)",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg = parse_args(argv)
    console = report_console(160)
    compile_sources()
    stacks, skipped = [], {}
    for stack in STACKS:
        if stack.name not in cfg.stacks:
            continue
        why = available(stack, cfg)
        if why is None:
            stacks.append(stack)
        else:
            skipped[stack.name] = why
            console.print(f"[yellow]skipping {stack.name}: {why}")
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with (
        EmbeddedServer(ServerConfig(host="127.0.0.1")) as server,
        tempfile.TemporaryDirectory(prefix="protocolbench-") as home,
    ):
        machine = machine_info(binary=server.binary, packages=["nats-py", "pydantic"], git=True)
        if any(s.peer for s in stacks):
            machine["peers"] = peer_versions(cfg)
        with LoggedProgress(console=console, transient=True) as progress:
            raw = measure(cfg, stacks, server.url, progress)
            if "storm" in cfg.scenarios:
                raw["storm"] = measure_storm(cfg, stacks, server.url, progress)
            if "safety" in cfg.scenarios:
                # actorbus's default: a broker with its keys in a home of this run's own
                broker = SecureBroker(Path(home))
                secured = ServerConfig(host="127.0.0.1", extra=broker.server_config([NAMESPACE]))
                with EmbeddedServer(secured) as guarded:
                    raw["safety"] = measure_safety(
                        cfg, stacks, server.url, (guarded.url, Path(home)), progress
                    )
    summary = summarize(cfg, raw, stacks)
    print_tables(console, cfg, summary)
    if summary.get("docqa"):
        console.print(_pb_docqa.table(summary["docqa"]))
    if summary.get("storm"):
        console.print(_pb_storm.table(summary["storm"]))
    if summary.get("safety"):
        console.print(_pb_safety.table(summary["safety"]))
    data = {
        "benchmark": "ProtocolBench side by side",
        "started": started,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(cfg).items()},
        "machine": machine,
        "stacks": {s.name: {"label": s.label, "note": s.note} for s in stacks},
        "skipped": skipped,
        "summary": summary,
        "raw": raw,
    }
    behind = leads(summary)
    verdict = "actorbus leads every peer" if not behind else "; ".join(behind)
    write_report(console, cfg.out, "protocolbench", data, lambda p: plot(p, summary), verdict)
    report = cfg.out / "protocolbench.md"
    settings = raw.get("storm", {}).get("settings", _pb_storm.STORM)
    report.write_text(markdown(cfg, settings, summary, stacks, skipped, machine, argv))
    console.print(f"wrote {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
