"""What end-to-end security costs: sealing and opening, and ``ask`` with it on.

    python bench/security.py [--rounds 7] [--seq 2000] [--tput 10000] [--quick]

Two parts, in one run:

1. **Seal and open** (in process): the pipeline's cost per message for a 1 KB
   and a 64 KB payload, plain (encode the envelope; decode it) against
   secured (encode, seal the content with AES-256-GCM bound to every other
   field; open it), medians of the rounds; and a 1 KB topic message sealed
   with a sender key and signed (Ed25519), its signature checked and opened.
2. **ask, security on vs off**: the ``Echo`` actor of ``bench/ask.py``
   (pydantic Question/Answer, ~200 B) in a separate process, asked by a
   system without security and by one with it (signed sessions, every message
   sealed and tagged), interleaved in rounds whose order alternates;
   sequential asks for p50/p95/p99 and a pool of workers for throughput; CPU
   per ask from both processes. The verdict is the median of the per-round
   throughput ratios secure/plain, target at least 0.6.

Writes ``bench/results/security.json`` and ``security.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from _ask_server import Answer, Question
from _harness import (
    loadavg,
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
from _security_server import CPU_SUBJECT, PLAIN, SECURE
from rich.console import Console
from rich.table import Table

from actorbus import ActorSystem, SecuritySettings
from actorbus.actors.pipeline import decode_stored, encode_request
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.wire import Encoding, SizeLimits
from actorbus.security.credentials import Authority, read_credential
from actorbus.security.identity import Identity
from actorbus.security.sealing import attach_session, open_content
from actorbus.security.sessions import SESSION_HEADER, OutboundSession, accept_session
from actorbus.security.topic_keys import (
    SIGNATURE_HEADER,
    TopicSender,
    check_signature,
    open_record,
)

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
DEFAULTS = {"rounds": 7, "seq": 2000, "tput": 10_000}
QUICK = {"rounds": 2, "seq": 200, "tput": 1000}
INFLIGHT = 100
WARMUP = 200
TIMEOUT = 10.0
TARGET = 0.6
SIZES = {"1KB": 1024, "64KB": 64 * 1024}
MICRO_N = {"1KB": 5000, "64KB": 500}
Call = Callable[[], Awaitable[Any]]
MSGPACK = Encoding.MSGPACK


def header_value(block: bytes, name: str) -> str:
    """One header's value out of an encoded header block."""
    prefix = name + ": "
    for line in block.decode().split("\r\n"):
        if line.startswith(prefix):
            return line[len(prefix) :]
    raise KeyError(name)


@dataclass(frozen=True)
class Config:
    rounds: int
    seq: int
    tput: int
    out: Path
    quick: bool


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(prog="bench/security.py", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=positive_int, help="interleaved rounds (7)")
    p.add_argument("--seq", type=positive_int, help="sequential asks per round (2000)")
    p.add_argument("--tput", type=positive_int, help="asks per throughput phase (10000)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument("--quick", action="store_true", help="smoke test: 2 small rounds")
    args = p.parse_args(argv)
    picked = presets(args, DEFAULTS, QUICK)
    return Config(picked["rounds"], picked["seq"], picked["tput"], args.out, args.quick)


# -- seal and open ----------------------------------------------------------------
def micro(rounds: int) -> dict[str, dict[str, float]]:
    """µs per message to encode+decode, plain and secured, by payload size."""
    ns = "bench"
    authority = Authority(Identity.generate(), ns)
    sender, recipient = Identity.generate(), Identity.generate()
    creds = {
        sender.kid: authority.issue(sender.public),
        recipient.kid: authority.issue(recipient.public, ["echo"]),
    }
    trusted = {authority.public.did: authority.public}
    now = int(time.time() * 1000)
    out = OutboundSession(sender, recipient.public, now)
    session = accept_session(
        out.header, recipient, lambda kid: read_credential(creds[kid], trusted, ns), now
    )
    limits = SizeLimits(max_payload=1 << 20, max_message=2 << 20)
    result: dict[str, dict[str, float]] = {}
    for name, size in SIZES.items():
        content = {"text": "x" * size}
        n = MICRO_N[name]

        def plain(content: Any = content) -> None:
            o = encode_request(
                "echo/1", content, client_address="client/1", encoding=MSGPACK, limits=limits
            )
            decode_stored(o.body, None, limits)

        def secured(content: Any = content) -> None:
            o = encode_request(
                "echo/1",
                content,
                client_address="client/1",
                encoding=MSGPACK,
                limits=limits,
                session=out,
                seal=True,
            )
            header_value(o.headers, SESSION_HEADER)  # what the receiver reads first
            env = decode_stored(o.body, None, limits)
            attach_session(env, session)  # opening proves the whole envelope

        times: dict[str, list[float]] = {"plain": [], "secured": []}
        for r in range(rounds):
            for label, fn in (("plain", plain), ("secured", secured))[:: 1 if r % 2 == 0 else -1]:
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[label].append((time.perf_counter() - t0) / n * 1e6)
        p, s = statistics.median(times["plain"]), statistics.median(times["secured"])
        result[name] = {"plain_us": p, "secured_us": s, "added_us": s - p}
    result["topic 1KB"] = micro_topic(rounds, limits, creds, trusted, sender, recipient)
    return result


def micro_topic(
    rounds: int,
    limits: SizeLimits,
    creds: dict[str, str],
    trusted: dict[str, Any],
    sender: Identity,
    recipient: Identity,
) -> dict[str, float]:
    """The same for a topic message: sealed with the sender key and signed
    (Ed25519) by the publisher; the listener checks the signature and opens it
    (its sender key already opened, as it is after a key's first message)."""
    now = int(time.time() * 1000)
    topic = TopicSender(sender, "news.eu", {"echo": recipient.public}, now)
    key = open_record(
        topic.record,
        topic.skid,
        "echo",
        lambda _kid: recipient,
        lambda kid: read_credential(creds[kid], trusted, "bench"),
        now,
    )
    content = {"text": "x" * 1024}

    def plain() -> None:
        o = encode_request(
            "topic:news.eu", content, client_address="client/1", encoding=MSGPACK, limits=limits
        )
        decode_stored(o.body, None, limits)

    def secured() -> None:
        o = encode_request(
            "topic:news.eu",
            content,
            client_address="client/1",
            encoding=MSGPACK,
            limits=limits,
            seal=True,
            topic_key=topic,
        )
        env = decode_stored(o.body, None, limits)
        check_signature(key, o.body, header_value(o.headers, SIGNATURE_HEADER))
        open_content(env, key.aead)

    times: dict[str, list[float]] = {"plain": [], "secured": []}
    n = MICRO_N["1KB"]
    for r in range(rounds):
        for label, fn in (("plain", plain), ("secured", secured))[:: 1 if r % 2 == 0 else -1]:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times[label].append((time.perf_counter() - t0) / n * 1e6)
    p, s = statistics.median(times["plain"]), statistics.median(times["secured"])
    return {"plain_us": p, "secured_us": s, "added_us": s - p}


# -- ask, security on vs off --------------------------------------------------------
@dataclass
class Phase:
    p50_us: float
    p95_us: float
    p99_us: float
    rps: float
    client_cpu_us: float  # per ask, throughput phase
    server_cpu_us: float


class Asks:
    def __init__(self, nc: nats.NATS, plain: ActorSystem, secure: ActorSystem) -> None:
        self.nc = nc
        question = Question(text="q" * 190)

        def caller(system: ActorSystem) -> Call:
            async def call() -> Any:
                return await system.ask("echo/1", question, timeout=TIMEOUT, returns=Answer)

            return call

        self.calls = {PLAIN: caller(plain), SECURE: caller(secure)}

    async def server_cpu(self) -> float:
        return float((await self.nc.request(CPU_SUBJECT, b"", timeout=TIMEOUT)).data)

    async def pool(self, call: Call, n: int) -> None:
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await call()

        await asyncio.gather(*(worker() for _ in range(INFLIGHT)))

    async def phase(self, variant: str, seq: int, tput: int) -> Phase:
        call = self.calls[variant]
        for _ in range(WARMUP):
            await call()
        samples = []
        for _ in range(seq):
            t0 = time.perf_counter_ns()
            await call()
            samples.append((time.perf_counter_ns() - t0) / 1000)
        samples.sort()
        await self.pool(call, min(tput // 10, 1000))
        gc.collect()
        s0, c0, t0 = await self.server_cpu(), time.process_time(), time.perf_counter()
        await self.pool(call, tput)
        elapsed = time.perf_counter() - t0
        c1, s1 = time.process_time(), await self.server_cpu()
        return Phase(
            p50_us=percentile(samples, 0.5),
            p95_us=percentile(samples, 0.95),
            p99_us=percentile(samples, 0.99),
            rps=tput / elapsed,
            client_cpu_us=(c1 - c0) / tput * 1e6,
            server_cpu_us=(s1 - s0) / tput * 1e6,
        )


async def measure_asks(cfg: Config, url: str, home: Path, console: Console) -> list[dict[str, Any]]:
    nc = await nats.connect(url)
    plain = await ActorSystem.connect(url, namespace=PLAIN, name="bench-plain-client")
    secure = await ActorSystem.connect(
        url, namespace=SECURE, name="bench-secure-client", security=SecuritySettings(home=home)
    )
    try:
        asks = Asks(nc, plain, secure)
        for variant, call in asks.calls.items():  # both answer before anything is timed
            answer = await call()
            if not isinstance(answer, Answer):
                raise RuntimeError(f"{variant} echo answered {answer!r}")
        rounds = []
        for r in range(cfg.rounds):
            order = [PLAIN, SECURE] if r % 2 == 0 else [SECURE, PLAIN]
            phases = {v: await asks.phase(v, cfg.seq, cfg.tput) for v in order}
            ratio = {
                "p50": phases[SECURE].p50_us / phases[PLAIN].p50_us,
                "rps": phases[SECURE].rps / phases[PLAIN].rps,
            }
            console.print(
                f"round {r + 1}/{cfg.rounds}: plain {phases[PLAIN].rps:,.0f} req/s p50 "
                f"{phases[PLAIN].p50_us:.0f} µs; secure {phases[SECURE].rps:,.0f} req/s p50 "
                f"{phases[SECURE].p50_us:.0f} µs; ratio req/s {ratio['rps']:.2f}",
                highlight=False,
            )
            rounds.append(
                {
                    "round": r + 1,
                    "order": order,
                    **{v: asdict(p) for v, p in phases.items()},
                    "ratios": ratio,
                }
            )
        return rounds
    finally:
        await secure.close(timeout=2.0)
        await plain.close(timeout=2.0)
        await nc.close()


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    med = {
        v: {k: statistics.median(r[v][k] for r in rounds) for k in asdict(Phase(0, 0, 0, 0, 0, 0))}
        for v in (PLAIN, SECURE)
    }
    ratios = {k: statistics.median(r["ratios"][k] for r in rounds) for k in ("p50", "rps")}
    return {"medians": med, "median_ratios": ratios, "target_rps_ratio_min": TARGET}


def print_report(console: Console, micro_res: dict[str, Any], summary: dict[str, Any]) -> None:
    t = Table(title="seal + open, µs per message (encode and seal; open and decode)")
    for col in ("payload", "plain", "secured", "added"):
        t.add_column(col, justify="right")
    for name, r in micro_res.items():
        t.add_row(name, f"{r['plain_us']:.1f}", f"{r['secured_us']:.1f}", f"{r['added_us']:.1f}")
    console.print(t)
    t = Table(title="ask, security off vs on (medians of rounds)")
    for col in ("variant", "p50 µs", "p99 µs", "req/s", "client CPU µs", "server CPU µs"):
        t.add_column(col, justify="right")
    for v, m in summary["medians"].items():
        t.add_row(
            v,
            f"{m['p50_us']:.0f}",
            f"{m['p99_us']:.0f}",
            f"{m['rps']:,.0f}",
            f"{m['client_cpu_us']:.1f}",
            f"{m['server_cpu_us']:.1f}",
        )
    console.print(t)


def verdict_line(summary: dict[str, Any]) -> str:
    r = summary["median_ratios"]
    ok = r["rps"] >= TARGET
    return (
        f"{'PASS' if ok else 'FAIL'}: ask with security on / off, throughput ratio "
        f"{r['rps']:.2f} (target >= {TARGET}) {'ok' if ok else 'MISSED'}; p50 ratio {r['p50']:.2f}"
    )


def plot(path: Path, micro_res: dict[str, Any], rounds: list[dict[str, Any]], title: str) -> bool:
    plt = pyplot()
    if plt is None:
        return False

    fig, (ax_micro, ax_rps) = plt.subplots(1, 2, figsize=(12, 4.8))
    names = list(micro_res)
    xs = range(len(names))
    ax_micro.bar(
        [x - 0.2 for x in xs], [micro_res[n]["plain_us"] for n in names], 0.4, label="plain"
    )
    ax_micro.bar(
        [x + 0.2 for x in xs],
        [micro_res[n]["secured_us"] for n in names],
        0.4,
        label="sealed + tagged",
    )
    ax_micro.set_xticks(list(xs), names)
    ax_micro.set_yscale("log")
    ax_micro.set_ylabel("µs per message (encode + decode)")
    ax_micro.legend()
    for v, color in ((PLAIN, "#4c72b0"), (SECURE, "#dd8452")):
        ax_rps.plot(
            [r["round"] for r in rounds],
            [r[v]["rps"] for r in rounds],
            "o-",
            color=color,
            label=f"ask, security {'off' if v == PLAIN else 'on'}",
        )
    ax_rps.set_xlabel("round")
    ax_rps.set_ylabel("asks per second (100 in flight)")
    ax_rps.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(140)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    console.print("seal and open, in process ...")
    micro_res = micro(5 if cfg.quick else 15)
    with tempfile.TemporaryDirectory(prefix="actorbus-secbench-") as tmp:
        home = Path(tmp) / "home"
        try:
            with EmbeddedServer(ServerConfig(host="127.0.0.1")) as server:
                info = machine_info(binary=server.binary, packages=("nats-py", "cryptography"))
                proc = subprocess.Popen(
                    [sys.executable, str(HERE / "_security_server.py"), server.url, str(home)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                try:
                    wait_ready(proc, 60.0, "security bench server")
                    rounds = asyncio.run(measure_asks(cfg, server.url, home, console))
                finally:
                    stop_processes([proc])
        except KeyboardInterrupt:
            console.print("interrupted; processes stopped")
            return 130
    info["loadavg_end"] = loadavg()
    summary = summarize(rounds)
    print_report(console, micro_res, summary)
    data = {
        "benchmark": "end-to-end security: seal+open cost, ask with security on vs off",
        "started": started,
        "duration_s": round(time.perf_counter() - t_start, 2),
        "config": {
            **asdict(cfg),
            "out": str(cfg.out),
            "inflight": INFLIGHT,
            "warmup": WARMUP,
            "sizes": SIZES,
            "micro_n": MICRO_N,
        },
        "machine": info,
        "seal_open": micro_res,
        "rounds": rounds,
        **summary,
    }
    title = (
        f"actorbus security, {len(rounds)} round(s); nats-server {info['nats_server']}, "
        f"Python {info['python']}, {info['cpu_count']} CPUs"
    )
    write_report(
        console,
        cfg.out,
        "security",
        data,
        lambda png: plot(png, micro_res, rounds, title),
        verdict_line(summary),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
