"""Edge codec cost: encode + decode per message, per protocol, as destinations grow.

The ProtocolBench paper's scale-up (its Table 5) measures the time spent inside
each protocol adapter per message as a coordinator fans work out to 4..32
workers: 0.13 ms (ACP) to 33.6 ms (Agora at 32). Here each protocol's codec does
the adapter's work for a stream of messages to ``--dests`` destinations
(4, 32 and 256 by default): envelope -> protocol object -> JSON bytes at the
sender, JSON bytes -> protocol object -> envelope at the receiver, for each
request and each reply. The baseline is actorbus's own wire step (the envelope
as msgpack, encoded and decoded). Figures are per message (one encode and one
decode), medians of ``--rounds`` rounds, with the per-message p50/p99 of the
last round.

    python bench/codecs.py [--messages 5000] [--rounds 5] [--dests 4,32,256]
                           [--out bench/results] [--quick]

The target: under 50 µs per message for every codec, flat from 4 to 256
destinations (no per-destination cost). Writes codecs.json and codecs.png.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from _harness import percentile, positive_int, presets, pyplot, write_json
from rich.console import Console
from rich.table import Table

from actorbus.codecs.edge import load_all
from actorbus.codecs.envelope import Envelope, EnvelopeContext
from actorbus.codecs.wire import pack, unpack

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
DEFAULTS = {"messages": 5000, "rounds": 5}
QUICK = {"messages": 500, "rounds": 1}
TARGET_US = 50.0

_json = msgspec.json.Encoder()
_unjson = msgspec.json.Decoder()


@dataclass(frozen=True)
class Config:
    messages: int
    rounds: int
    dests: tuple[int, ...]
    out: Path
    quick: bool


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=positive_int, help="messages per round (5000)")
    parser.add_argument("--rounds", type=positive_int, help="rounds (5)")
    parser.add_argument(
        "--dests", default="4,32,256", help="destination counts, comma-separated (4,32,256)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--quick", action="store_true", help="smoke test: 500 messages, 1 round")
    args = parser.parse_args(argv)
    try:
        dests = tuple(int(d) for d in args.dests.split(","))
    except ValueError:
        parser.error(f"--dests wants comma-separated integers, not {args.dests!r}")
    if not dests or min(dests) < 1:
        parser.error("--dests must be positive")
    return Config(**presets(args, DEFAULTS, QUICK), dests=dests, out=args.out, quick=args.quick)


def messages(n: int, dests: int) -> list[tuple[Envelope, Envelope]]:
    """(request, reply) pairs to ``dests`` workers in turn: a question out, an answer back,
    a session per worker, the kind of traffic the paper's streaming queue carries."""
    out = []
    for i in range(n):
        worker = f"worker/{i % dests}"
        ctx = EnvelopeContext(session_id=f"s-{i % dests}", trace_id=f"{i:032x}")
        request = Envelope(
            id=f"q{i}",
            ts=1_795_000_000_000 + i,
            src="coordinator/0",
            dst=worker,
            intent="text",
            content=f"passage {i}: what does the text say about actors and supervisors?",
            context=ctx,
        )
        reply = Envelope(
            id=f"a{i}",
            ts=1_795_000_000_001 + i,
            src=worker,
            dst="coordinator/0",
            intent="dict",
            content={"answer": f"answer {i}", "score": 0.5, "passage": i},
            context=EnvelopeContext(session_id=ctx.session_id, parent_id=f"q{i}"),
        )
        out.append((request, reply))
    return out


Step = Callable[[Envelope], Envelope]


def protocol_step(name: str) -> Step:
    """Sender and receiver work for one message in protocol ``name``."""
    if name == "actorbus":
        return lambda env: Envelope.model_validate(unpack(pack(env.to_dict())))
    codec = load_all()[name]
    encode, decode = codec.encode, codec.decode
    return lambda env: decode(_unjson.decode(_json.encode(encode(env))))


def run_one(step: Step, pairs: list[tuple[Envelope, Envelope]]) -> tuple[float, list[float]]:
    """Mean µs per message (requests and replies alike) and the per-message times."""
    times = []
    gc.disable()
    try:
        start = time.perf_counter()
        for request, reply in pairs:
            for env in (request, reply):
                t = time.perf_counter_ns()
                step(env)
                times.append((time.perf_counter_ns() - t) / 1000)
        total = time.perf_counter() - start
    finally:
        gc.enable()
    return total / (2 * len(pairs)) * 1e6, times


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = Console()
    names = ["actorbus", *sorted(load_all())]
    steps = {name: protocol_step(name) for name in names}
    workloads = {d: messages(cfg.messages, d) for d in cfg.dests}
    for name in names:  # every step once: imports, caches, first-call costs
        steps[name](workloads[cfg.dests[0]][0][0])
    rounds: list[dict[str, dict[int, float]]] = []
    last_times: dict[str, dict[int, list[float]]] = {n: {} for n in names}
    for r in range(cfg.rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        result: dict[str, dict[int, float]] = {n: {} for n in names}
        for name in order:
            for d in cfg.dests:
                mean_us, times = run_one(steps[name], workloads[d])
                result[name][d] = mean_us
                last_times[name][d] = times
        rounds.append(result)
        console.print(
            f"round {r + 1}/{cfg.rounds}: "
            + ", ".join(f"{n} {result[n][cfg.dests[-1]]:.1f}" for n in names)
            + f" µs/msg at {cfg.dests[-1]} destinations"
        )
    medians = {
        n: {d: statistics.median(rd[n][d] for rd in rounds) for d in cfg.dests} for n in names
    }
    table = Table(title=f"encode + decode per message, µs; {cfg.rounds} rounds")
    table.add_column("protocol")
    for d in cfg.dests:
        table.add_column(f"{d} dests", justify="right")
    table.add_column("p50 / p99", justify="right")
    table.add_column("flat", justify="right")
    verdict = []
    for n in names:
        row = medians[n]
        big = sorted(last_times[n][cfg.dests[-1]])
        spread = max(row.values()) / min(row.values())
        ok = max(row.values()) < TARGET_US and spread < 1.5
        if n != "actorbus":
            verdict.append(f"{n} {'ok' if ok else 'MISSED'}")
        table.add_row(
            n,
            *(f"{row[d]:.1f}" for d in cfg.dests),
            f"{percentile(big, 0.5):.1f} / {percentile(big, 0.99):.1f}",
            f"{spread:.2f}x",
        )
    console.print(table)
    console.print(
        "paper (Table 5, ms per message at 4 -> 32 agents): ACP 0.13 -> 0.18, "
        "A2A 1.2 -> 10.5, ANP 1.6 -> 14.1, Agora 4.0 -> 33.6"
    )
    console.print(f"target < {TARGET_US:g} µs and flat (max/min < 1.5): " + "; ".join(verdict))
    cfg.out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "benchmark": "codecs",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {"messages": cfg.messages, "rounds": cfg.rounds, "dests": list(cfg.dests)},
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "rounds": [{n: {str(d): v for d, v in rd[n].items()} for n in names} for rd in rounds],
        "median_us": {n: {str(d): v for d, v in medians[n].items()} for n in names},
        "target_us": TARGET_US,
    }
    write_json(cfg.out / "codecs.json", data)
    plot(cfg, names, medians)
    return 0


def plot(cfg: Config, names: list[str], medians: dict[str, dict[int, float]]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n in names:
        ax.plot(list(cfg.dests), [medians[n][d] for d in cfg.dests], marker="o", label=n)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("destinations")
    ax.set_ylabel("µs per message (encode + decode)")
    ax.axhline(TARGET_US, color="grey", linestyle="--", linewidth=1)
    ax.set_title("edge codec cost per message")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(cfg.out / "codecs.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
