"""The HTTP gateway vs a native a2a-sdk server, both driven by the official a2a-sdk client.

One run, on loopback only:

- one embedded nats-server;
- an actorbus ``Echo`` actor (type ``echo``) in its own process
  (``bench/_gateway_actor.py``);
- the gateway in its own process (``python -m actorbus.services.gateway``, SQLite
  database in a temporary directory), which serves the actor as ``/a2a/echo``;
- a native a2a-sdk server in its own process (``bench/_gateway_native.py``:
  Starlette + uvicorn, ``DefaultRequestHandler``, ``InMemoryTaskStore``) whose
  echo ``AgentExecutor`` answers with the same shape as the gateway: a completed
  Task, artifact ``reply`` with the text sent, history [user, agent];
- this process: the a2a-sdk client (``create_client``), one per target and A2A
  version (1.0, and 0.3 through the SDK's compat transport), each on its own
  ``httpx.AsyncClient`` with the same connection limits.

Each round measures, per variant, sequential ``SendMessage`` latency (p50/p95/p99
over ``--seq`` sends after a warm-up) and throughput (``--tput`` sends,
``--inflight`` in flight), with the variant order reversed every other round.
CPU per request is charged to every process from ``/proc/<pid>/stat`` (the
client from ``time.process_time``). The verdict uses the median over rounds of
the per-round gateway/native ratios: the gateway's A2A 1.0 throughput must be at
least the native server's (ratio >= 1). The exit code is 0 whether or not the
target is met; non-zero means an error.

    python bench/gateway.py [--rounds 5] [--seq 1000] [--tput 3000] [--inflight 32]
                            [--versions 1.0,0.3] [--native-loop auto|asyncio|uvloop]
                            [--out bench/results] [--quick]

``BENCH_GATEWAY_PROFILE=path.prof`` runs the gateway under ``cProfile`` and writes
its profile there when the gateway stops (the figures are then not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import queue
import random
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from _harness import (
    READY,
    loadavg,
    machine_info,
    percentile,
    positive_int,
    presets,
    pyplot,
    report_console,
    step,
    stop_processes,
    write_report,
)
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from actorbus.bus.server import EmbeddedServer, ServerConfig

HERE = Path(__file__).resolve().parent
ACTOR_SCRIPT = HERE / "_gateway_actor.py"
NATIVE_SCRIPT = HERE / "_gateway_native.py"
DEFAULT_OUT = HERE / "results"

NAMESPACE = "gwbench"
AGENT = "echo"
PAYLOAD_CHARS = 200
WARMUP = 100  # sequential sends before each latency phase
TIMEOUT = 30.0  # per request, seconds
READY_TIMEOUT = 60.0
AGENT_TIMEOUT = 30.0  # until the gateway lists the actor
SEED = 20240601
PROFILE_ENV = "BENCH_GATEWAY_PROFILE"

TPUT_TARGET = 1.0  # gateway req/s / native req/s (A2A 1.0) must be >= this

GW = "gateway"
NATIVE = "native"
TARGETS = (GW, NATIVE)
VERSIONS = ("1.0", "0.3")

DEFAULTS = {"rounds": 5, "seq": 1000, "tput": 3000, "inflight": 32}
QUICK = {"rounds": 1, "seq": 100, "tput": 300}


# -- configuration -------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    rounds: int
    seq: int
    tput: int
    inflight: int
    versions: tuple[str, ...]
    native_loop: str
    out: Path
    quick: bool


def versions_arg(text: str) -> tuple[str, ...]:
    picked = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in picked if v not in VERSIONS]
    if bad or not picked or "1.0" not in picked:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(VERSIONS)} including 1.0, got {text!r}"
        )
    return tuple(v for v in VERSIONS if v in picked)


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="bench/gateway.py",
        description="a2a-sdk client against the actorbus gateway vs a native a2a-sdk server.",
    )
    parser.add_argument("--rounds", type=positive_int, help="interleaved rounds (default 5)")
    parser.add_argument("--seq", type=positive_int, help="sequential sends (default 1000)")
    parser.add_argument("--tput", type=positive_int, help="throughput sends (default 3000)")
    parser.add_argument("--inflight", type=positive_int, help="sends in flight (default 32)")
    parser.add_argument(
        "--versions",
        type=versions_arg,
        default=VERSIONS,
        help="A2A versions to measure (default 1.0,0.3)",
    )
    parser.add_argument(
        "--native-loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="the native server's event loop (auto, as uvicorn.run: uvloop if installed)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default bench/results)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: rounds 1, seq 100, tput 300"
    )
    args = parser.parse_args(argv)
    picked = presets(args, DEFAULTS, QUICK)
    return Config(
        rounds=picked["rounds"],
        seq=picked["seq"],
        tput=picked["tput"],
        inflight=picked["inflight"],
        versions=args.versions,
        native_loop=args.native_loop,
        out=args.out,
        quick=args.quick,
    )


def variant(target: str, version: str) -> str:
    return f"{target} {version}"


# -- processes -------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def read_until_ready(proc: subprocess.Popen[str], timeout: float, what: str) -> list[str]:
    """The lines the child printed before "ready"; RuntimeError if it never does."""
    stdout = proc.stdout
    assert stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stdout:
            lines.put(line)
            if line.strip() == READY:
                return
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    said: list[str] = []
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            raise RuntimeError(f"{what} not ready after {timeout:g}s (said {said!r})") from None
        if line.strip() == READY:
            return said
        if not line:
            proc.poll()
            raise RuntimeError(
                f"{what} failed to start (exit code {proc.returncode}, said {said!r})"
            )
        said.append(line.strip())


@dataclass
class Processes:
    """The children, so that every one of them is stopped whatever happens."""

    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    gateway_url: str = ""
    native_url: str = ""
    native_runtime: str = ""

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE
        )
        self.procs.append(proc)
        self.pids[name] = proc.pid
        return proc

    def stop(self) -> None:
        stop_processes(self.procs)


def start_children(procs: Processes, nats_url: str, db: Path, native_loop: str) -> None:
    actor = procs.start("actor", [sys.executable, str(ACTOR_SCRIPT), nats_url, NAMESPACE])
    gw_cmd = [sys.executable]
    profile = os.environ.get(PROFILE_ENV)
    if profile:
        gw_cmd += ["-m", "cProfile", "-o", profile]
    gw_cmd += [
        "-m",
        "actorbus.services.gateway",
        "--nats",
        nats_url,
        "--namespace",
        NAMESPACE,
        "--http",
        "127.0.0.1:0",
        "--db",
        str(db),
        "--log-level",
        "warning",
    ]
    gateway = procs.start("gateway", gw_cmd)
    native = procs.start("native", [sys.executable, str(NATIVE_SCRIPT), "--loop", native_loop])
    read_until_ready(actor, READY_TIMEOUT, "echo actor")
    said = read_until_ready(gateway, READY_TIMEOUT, "gateway")
    procs.gateway_url = next(s.split()[1] for s in said if s.startswith("gateway "))
    said = read_until_ready(native, READY_TIMEOUT, "native a2a-sdk server")
    words = next(s for s in said if s.startswith("url ")).split()
    procs.native_url = words[1]
    procs.native_runtime = " ".join(words[2:])


# -- results ---------------------------------------------------------------------
@dataclass
class Latency:
    n: int
    p50_us: float
    p95_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float
    cpu_us_per_req: dict[str, float]


@dataclass
class Throughput:
    n: int
    inflight: int
    seconds: float
    rps: float
    cpu_us_per_req: dict[str, float]


@dataclass
class Round:
    index: int
    order: list[str]
    latency: dict[str, Latency]
    throughput: dict[str, Throughput]

    def ratios(self, versions: Sequence[str]) -> dict[str, float]:
        out: dict[str, float] = {}
        for v in versions:
            gw, nat = variant(GW, v), variant(NATIVE, v)
            for p in ("p50", "p95", "p99"):
                key = f"{p}_us"
                out[f"{v}_{p}"] = getattr(self.latency[gw], key) / getattr(self.latency[nat], key)
            out[f"{v}_tput"] = self.throughput[gw].rps / self.throughput[nat].rps
            out[f"{v}_cpu"] = server_cpu(GW, self.throughput[gw].cpu_us_per_req) / server_cpu(
                NATIVE, self.throughput[nat].cpu_us_per_req
            )
        return out


SERVER_SIDE = {GW: ("gateway", "actor", "nats"), NATIVE: ("native",)}


def server_cpu(target: str, cpu: dict[str, float]) -> float:
    """CPU per request of the processes that serve ``target`` (not the client)."""
    return sum(cpu[p] for p in SERVER_SIDE[target])


# -- the measurements --------------------------------------------------------------
Call = Callable[[], Awaitable[None]]


def make_text() -> str:
    rng = random.Random(SEED)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=PAYLOAD_CHARS))


async def sdk_client(base: str, card_url: str, version: str, http: httpx.AsyncClient) -> Any:
    """The a2a-sdk client of an agent, as the tests make it: 1.0 from the card as
    served; 0.3 from the same card without its 1.0 interfaces."""
    config = ClientConfig(streaming=False, httpx_client=http)
    if version == "1.0":
        return await create_client(base, client_config=config)
    card = (await http.get(card_url)).json()
    card.pop("supportedInterfaces")
    return await create_client(parse_agent_card(card), client_config=config)


def fields_of(message: Any) -> list[str]:
    """The names of the fields set in a protobuf message."""
    return sorted(f.name for f, _ in message.ListFields())


class Bench:
    def __init__(self, procs: Processes, versions: Sequence[str]) -> None:
        self.procs = procs
        self.versions = list(versions)
        self.text = make_text()
        self.https: list[httpx.AsyncClient] = []
        self.clients: list[Any] = []
        self.calls: dict[str, Call] = {}
        self.variants = [variant(t, v) for v in self.versions for t in TARGETS]
        self.shapes: dict[str, Any] = {}
        self.response_bytes: dict[str, int] = {}

    async def open(self) -> None:
        gw_base = f"{self.procs.gateway_url}/a2a/{AGENT}"
        bases = {
            GW: (gw_base, f"{gw_base}/.well-known/agent-card.json"),
            NATIVE: (self.procs.native_url, f"{self.procs.native_url}/.well-known/agent-card.json"),
        }
        await self.wait_agent(bases[GW][1])
        # idle connections are dropped by the client (30 s) before either server (75 s)
        limits = httpx.Limits(
            max_connections=256, max_keepalive_connections=256, keepalive_expiry=30.0
        )
        for v in self.versions:
            for t in TARGETS:
                http = httpx.AsyncClient(limits=limits, timeout=TIMEOUT)
                self.https.append(http)
                client = await sdk_client(*bases[t], v, http)
                self.clients.append(client)
                self.calls[variant(t, v)] = self.make_call(client)
                self.response_bytes[variant(t, v)] = await self.raw_size(t, v, bases[t][0])

    async def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                await client.close()
        for http in self.https:
            with contextlib.suppress(Exception):
                await http.aclose()

    async def wait_agent(self, card_url: str) -> None:
        """Until the gateway serves the actor's card (it found it in the registry)."""
        deadline = time.monotonic() + AGENT_TIMEOUT
        async with httpx.AsyncClient(timeout=5.0) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(card_url)).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway never listed agent {AGENT!r}")
                await asyncio.sleep(0.1)

    async def raw_size(self, target: str, version: str, url: str) -> int:
        """Bytes of one SendMessage answer as the server sends it (plain JSON-RPC, on a
        client of its own: the SDK's client may add headers to the one it is given)."""
        if version == "1.0":
            headers = {"A2A-Version": "1.0"}
            msg: dict[str, Any] = {
                "messageId": "m1",
                "role": "ROLE_USER",
                "parts": [{"text": self.text}],
            }
            method = "SendMessage"
        else:
            headers = {}
            msg = {
                "kind": "message",
                "messageId": "m1",
                "role": "user",
                "parts": [{"kind": "text", "text": self.text}],
            }
            method = "message/send"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": msg}}
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            resp = await http.post(url, json=body, headers=headers)
        resp.raise_for_status()
        if "result" not in resp.json():
            raise RuntimeError(f"{target} {version} answered {resp.text[:300]}")
        return len(resp.content)

    def make_call(self, client: Any) -> Call:
        text = self.text

        async def call() -> None:
            request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
            async for _ in client.send_message(request):
                pass

        return call

    async def verify(self) -> None:
        """One send per variant: a completed Task echoing the text, the same shape."""
        for v in self.variants:
            client = self.clients[self.variants.index(v)]
            request = SendMessageRequest(message=new_text_message(self.text, role=Role.ROLE_USER))
            events = [e async for e in client.send_message(request)]
            if len(events) != 1 or not events[0].HasField("task"):
                raise RuntimeError(f"{v}: expected one Task, got {events!r}")
            task = events[0].task
            texts = [p.text for a in task.artifacts for p in a.parts]
            history = [(m.role, [p.text for p in m.parts]) for m in task.history]
            ok = (
                task.status.state == TaskState.TASK_STATE_COMPLETED
                and texts == [self.text]
                and history == [(Role.ROLE_USER, [self.text]), (Role.ROLE_AGENT, [self.text])]
                and not task.status.HasField("message")
            )
            if not ok:
                raise RuntimeError(f"{v}: unexpected answer {task}")
            self.shapes[v] = {
                "fields": fields_of(task),
                "status": fields_of(task.status),
                "artifacts": [fields_of(a) for a in task.artifacts],
                "history": [(Role.Name(m.role), fields_of(m)) for m in task.history],
            }

    def cpu_now(self) -> dict[str, float]:
        out = {name: proc_cpu(pid) for name, pid in self.procs.pids.items()}
        out["client"] = time.process_time()
        return out

    @staticmethod
    def cpu_per_req(c0: dict[str, float], c1: dict[str, float], n: int) -> dict[str, float]:
        return {k: (c1[k] - c0[k]) / n * 1e6 for k in c0}

    async def latency(self, name: str, n: int) -> Latency:
        call = self.calls[name]
        for _ in range(WARMUP):
            await call()
        samples = [0] * n
        clock = time.perf_counter_ns
        gc.collect()
        c0 = self.cpu_now()
        for i in range(n):
            t0 = clock()
            await call()
            samples[i] = clock() - t0
        c1 = self.cpu_now()
        us = sorted(s / 1000 for s in samples)
        return Latency(
            n=n,
            p50_us=percentile(us, 0.50),
            p95_us=percentile(us, 0.95),
            p99_us=percentile(us, 0.99),
            mean_us=statistics.fmean(us),
            min_us=us[0],
            max_us=us[-1],
            cpu_us_per_req=self.cpu_per_req(c0, c1, n),
        )

    @staticmethod
    async def _pool(call: Call, n: int, inflight: int) -> None:
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await call()

        await asyncio.gather(*(worker() for _ in range(min(inflight, n))))

    async def throughput(self, name: str, n: int, inflight: int) -> Throughput:
        call = self.calls[name]
        await self._pool(call, max(inflight * 2, min(n // 10, 500)), inflight)  # warm-up
        gc.collect()
        c0 = self.cpu_now()
        t0 = time.perf_counter()
        await self._pool(call, n, inflight)
        elapsed = time.perf_counter() - t0
        c1 = self.cpu_now()
        return Throughput(
            n=n,
            inflight=inflight,
            seconds=elapsed,
            rps=n / elapsed,
            cpu_us_per_req=self.cpu_per_req(c0, c1, n),
        )


@dataclass
class Measured:
    rounds: list[Round]
    shapes: dict[str, Any]
    response_bytes: dict[str, int]
    started: str
    seconds: float


def fmt_cpu(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in cpu.items() if v >= 0.5)


async def measure(cfg: Config, procs: Processes, console: Console) -> Measured:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    bench = Bench(procs, cfg.versions)
    try:
        await bench.open()
        await bench.verify()
        variants = bench.variants
        rounds: list[Round] = []
        phases = cfg.rounds * len(variants) * 2
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            auto_refresh=False,  # no refresh thread competing with the measurement
        ) as progress:
            task = progress.add_task("starting", total=phases)
            for r in range(cfg.rounds):
                order = list(variants) if r % 2 == 0 else list(reversed(variants))
                lat: dict[str, Latency] = {}
                tput: dict[str, Throughput] = {}
                tag = f"round {r + 1}/{cfg.rounds}"
                for name in order:
                    step(progress, task, f"{tag} latency {name}")
                    lat[name] = res = await bench.latency(name, cfg.seq)
                    progress.console.print(
                        f"{tag}  latency     {name:<12} p50 {res.p50_us:8.1f} µs  "
                        f"p95 {res.p95_us:8.1f} µs  p99 {res.p99_us:8.1f} µs"
                    )
                    progress.advance(task)
                for name in order:
                    step(progress, task, f"{tag} throughput {name}")
                    tput[name] = t = await bench.throughput(name, cfg.tput, cfg.inflight)
                    progress.console.print(
                        f"{tag}  throughput  {name:<12} {t.rps:9,.0f} req/s  "
                        f"(CPU µs/req: {fmt_cpu(t.cpu_us_per_req)})"
                    )
                    progress.advance(task)
                rounds.append(Round(index=r + 1, order=order, latency=lat, throughput=tput))
                ratios = rounds[-1].ratios(cfg.versions)
                progress.console.print(
                    f"{tag}  ratios      gateway/native: "
                    + "; ".join(
                        f"{v}: p50 {ratios[v + '_p50']:.2f}, throughput {ratios[v + '_tput']:.2f}"
                        for v in cfg.versions
                    )
                )
            step(progress, task, "done")
        return Measured(
            rounds, bench.shapes, bench.response_bytes, started, time.perf_counter() - t_start
        )
    finally:
        await bench.close()


# -- summary and report ------------------------------------------------------------
def summarize(rounds: list[Round], versions: Sequence[str]) -> dict[str, Any]:
    names = [variant(t, v) for v in versions for t in TARGETS]
    medians: dict[str, dict[str, Any]] = {}
    for name in names:
        lat = [r.latency[name] for r in rounds]
        tp = [r.throughput[name] for r in rounds]
        procs = list(tp[0].cpu_us_per_req)
        target = name.split()[0]
        medians[name] = {
            "p50_us": statistics.median(x.p50_us for x in lat),
            "p95_us": statistics.median(x.p95_us for x in lat),
            "p99_us": statistics.median(x.p99_us for x in lat),
            "rps": statistics.median(x.rps for x in tp),
            "tput_cpu_us_per_req": {
                p: statistics.median(x.cpu_us_per_req[p] for x in tp) for p in procs
            },
            "tput_server_cpu_us_per_req": statistics.median(
                server_cpu(target, x.cpu_us_per_req) for x in tp
            ),
            "latency_server_cpu_us_per_req": statistics.median(
                server_cpu(target, x.cpu_us_per_req) for x in lat
            ),
        }
    per_round = [r.ratios(versions) for r in rounds]
    median_ratios = {k: statistics.median(rr[k] for rr in per_round) for k in per_round[0]}
    tput_ratio = median_ratios["1.0_tput"]
    return {
        "medians": medians,
        "per_round_ratios": per_round,
        "median_ratios": median_ratios,
        "verdict": {
            "judged_on": "median over rounds of the per-round gateway/native A2A 1.0 "
            "throughput ratios",
            "tput_ratio": tput_ratio,
            "tput_target_min": TPUT_TARGET,
            "pass": tput_ratio >= TPUT_TARGET,
            "p50_ratio": median_ratios["1.0_p50"],
        },
    }


CPU_COLUMNS = ("client", "gateway", "actor", "nats", "native")


def print_tables(
    console: Console, cfg: Config, rounds: list[Round], summary: dict[str, Any]
) -> None:
    medians: dict[str, dict[str, Any]] = summary["medians"]
    ratios: dict[str, float] = summary["median_ratios"]
    table = Table(
        title=(
            f"a2a-sdk client: actorbus gateway -> actor vs native a2a-sdk server; "
            f"medians of {len(rounds)} round(s)\n"
            f"latency: {cfg.seq} sequential SendMessage; "
            f"throughput: {cfg.tput} sends, {cfg.inflight} in flight; CPU µs/req at throughput"
        )
    )
    table.add_column("variant")
    for col in ("p50 µs", "p95 µs", "p99 µs", "req/s"):
        table.add_column(col, justify="right")
    for p in CPU_COLUMNS:
        table.add_column(f"{p} CPU", justify="right")
    table.add_column("server CPU", justify="right")
    table.add_column("p50 gw/nat", justify="right")
    table.add_column("req/s gw/nat", justify="right")
    for name in medians:
        m = medians[name]
        target, version = name.split()
        cpu: dict[str, float] = m["tput_cpu_us_per_req"]
        shown = [
            f"{cpu[p]:.0f}" if p == "client" or p in SERVER_SIDE[target] else "-"
            for p in CPU_COLUMNS
        ]
        table.add_row(
            name,
            f"{m['p50_us']:.0f}",
            f"{m['p95_us']:.0f}",
            f"{m['p99_us']:.0f}",
            f"{m['rps']:,.0f}",
            *shown,
            f"{m['tput_server_cpu_us_per_req']:.0f}",
            f"{ratios[version + '_p50']:.2f}" if target == GW else "1.00",
            f"{ratios[version + '_tput']:.2f}" if target == GW else "1.00",
        )
    console.print(table)

    per_round = Table(title="per-round ratios gateway/native (same round)")
    per_round.add_column("round", justify="right")
    per_round.add_column("first")
    for v in cfg.versions:
        for col in ("p50", "p99", "req/s", "server CPU"):
            per_round.add_column(f"{v} {col}", justify="right")
    for r, rr in zip(rounds, summary["per_round_ratios"], strict=True):
        cells = []
        for v in cfg.versions:
            cells += [
                f"{rr[v + '_p50']:.2f}",
                f"{rr[v + '_p99']:.2f}",
                f"{rr[v + '_tput']:.2f}",
                f"{rr[v + '_cpu']:.2f}",
            ]
        per_round.add_row(str(r.index), r.order[0], *cells)
    console.print(per_round)
    console.print(
        "median of per-round ratios gateway/native: "
        + "; ".join(
            f"A2A {v}: p50 {ratios[v + '_p50']:.2f}, p99 {ratios[v + '_p99']:.2f}, "
            f"throughput {ratios[v + '_tput']:.2f}, server CPU/req {ratios[v + '_cpu']:.2f}"
            for v in cfg.versions
        )
    )


def verdict_line(summary: dict[str, Any]) -> str:
    v = summary["verdict"]
    ok = "ok" if v["pass"] else "MISSED"
    return (
        f"{'PASS' if v['pass'] else 'FAIL'}: gateway vs native a2a-sdk server, A2A 1.0 "
        f"throughput ratio {v['tput_ratio']:.2f} (target >= {TPUT_TARGET}) {ok}; "
        f"p50 ratio {v['p50_ratio']:.2f}"
    )


def plot(
    path: Path, rounds: list[Round], summary: dict[str, Any], names: list[str], title: str
) -> bool:
    """Latency percentiles and throughput per variant; False if matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False

    medians: dict[str, dict[str, Any]] = summary["medians"]
    palette = {
        variant(GW, "1.0"): "#dd8452",
        variant(NATIVE, "1.0"): "#4c72b0",
        variant(GW, "0.3"): "#f0b27a",
        variant(NATIVE, "0.3"): "#8fa8d6",
    }
    fig, (ax_lat, ax_tput) = plt.subplots(1, 2, figsize=(12, 4.8))
    pcts = ("p50_us", "p95_us", "p99_us")
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(pcts))]
        heights = [medians[name][p] for p in pcts]
        spread = [[float(getattr(r.latency[name], p)) for r in rounds] for p in pcts]
        lows = [h - min(s) for h, s in zip(heights, spread, strict=True)]
        highs = [max(s) - h for h, s in zip(heights, spread, strict=True)]
        bars = ax_lat.bar(
            xs, heights, width, label=name, color=palette[name], yerr=[lows, highs], capsize=3
        )
        ax_lat.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax_lat.set_xticks(range(len(pcts)), ["p50", "p95", "p99"])
    ax_lat.set_ylabel("SendMessage latency (µs), lower is better")
    ax_lat.set_title("sequential latency (median of rounds, bars: min-max)")
    ax_lat.legend()

    rps = [medians[n]["rps"] for n in names]
    bars = ax_tput.bar(range(len(names)), rps, 0.6, color=[palette[n] for n in names])
    ax_tput.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    for i, name in enumerate(names):
        points = [r.throughput[name].rps for r in rounds]
        ax_tput.scatter([i] * len(points), points, color="black", s=10, zorder=3)
    ax_tput.set_xticks(range(len(names)), names)
    ax_tput.set_ylabel("SendMessage/s, higher is better")
    ax_tput.set_title("throughput (median of rounds, dots: rounds)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- entry point ---------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(160)
    server_config = ServerConfig(host="127.0.0.1")  # loopback only
    procs = Processes()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="actorbus-gwbench-") as tmp,
            EmbeddedServer(server_config) as nats_server,
        ):
            info = machine_info(
                binary=nats_server.binary,
                packages=(
                    "a2a-sdk",
                    "aiohttp",
                    "httpx",
                    "uvicorn",
                    "starlette",
                    "uvloop",
                    "httptools",
                    "protobuf",
                ),
            )
            assert nats_server.pid is not None
            procs.pids["nats"] = nats_server.pid
            try:
                start_children(procs, nats_server.url, Path(tmp) / "gw.sqlite3", cfg.native_loop)
                info["native_server_runtime"] = procs.native_runtime
                info["gateway_profiled"] = bool(os.environ.get(PROFILE_ENV))
                console.print(
                    f"nats-server {info['nats_server']} at {nats_server.url}; gateway "
                    f"{procs.gateway_url}; native a2a-sdk {info['a2a_sdk']} at "
                    f"{procs.native_url} ({procs.native_runtime}); Python {info['python']}; "
                    f"{info['cpu_count']} CPUs; load {info['loadavg_start']}"
                )
                console.print(
                    f"rounds {cfg.rounds}, seq {cfg.seq} (+{WARMUP} warm-up), tput {cfg.tput}, "
                    f"inflight {cfg.inflight}, A2A {', '.join(cfg.versions)}"
                )
                if info["gateway_profiled"]:
                    console.print(f"note: the gateway runs under cProfile ({PROFILE_ENV})")
                measured = asyncio.run(measure(cfg, procs, console))
            finally:
                procs.stop()
    except KeyboardInterrupt:
        procs.stop()
        console.print("interrupted; servers stopped")
        return 130

    info["loadavg_end"] = loadavg()
    summary = summarize(measured.rounds, cfg.versions)
    print_tables(console, cfg, measured.rounds, summary)
    console.print(
        "SendMessage answer bytes (JSON-RPC body): "
        + ", ".join(f"{k} {v}" for k, v in measured.response_bytes.items())
    )

    names = [variant(t, v) for v in cfg.versions for t in TARGETS]
    data: dict[str, Any] = {
        "benchmark": "a2a-sdk client: actorbus gateway -> actor vs native a2a-sdk server",
        "started": measured.started,
        "duration_s": round(measured.seconds, 2),
        "config": {
            "rounds": cfg.rounds,
            "seq": cfg.seq,
            "tput": cfg.tput,
            "inflight": cfg.inflight,
            "warmup": WARMUP,
            "versions": list(cfg.versions),
            "quick": cfg.quick,
            "native_loop": cfg.native_loop,
            "timeout_s": TIMEOUT,
            "payload_chars": PAYLOAD_CHARS,
            "targets": {
                GW: "python -m actorbus.services.gateway (aiohttp, SQLite task store) -> "
                "NATS -> Echo actor process (handler returns the text)",
                NATIVE: "a2a-sdk DefaultRequestHandler + InMemoryTaskStore on Starlette/uvicorn; "
                "EchoExecutor: task, working (agent message), artifact 'reply', completed",
            },
            "client": "a2a-sdk create_client, ClientConfig(streaming=False), one httpx."
            "AsyncClient per variant (max 256 connections, idle 30 s); SendMessage with one "
            "text part; both servers keep idle connections 75 s",
            "cpu": "per process from /proc/<pid>/stat (client: time.process_time); "
            "server CPU = gateway + actor + nats-server, or the native server",
            "target": {"tput_ratio_min": TPUT_TARGET},
        },
        "machine": info,
        "answer_shapes": measured.shapes,
        "answer_bytes": measured.response_bytes,
        "rounds": [
            {
                "round": r.index,
                "order": r.order,
                "latency": {v: asdict(x) for v, x in r.latency.items()},
                "throughput": {v: asdict(x) for v, x in r.throughput.items()},
                "ratios": r.ratios(cfg.versions),
            }
            for r in measured.rounds
        ],
        **summary,
    }
    title = (
        f"a2a-sdk {info['a2a_sdk']} client: actorbus gateway -> actor vs native a2a-sdk server "
        f"({procs.native_runtime}), {len(measured.rounds)} round(s); "
        f"Python {info['python']}, {info['cpu_count']} CPUs"
    )
    write_report(
        console,
        cfg.out,
        "gateway",
        data,
        lambda png: plot(png, measured.rounds, summary, names, title),
        verdict_line(summary),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
