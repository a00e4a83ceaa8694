"""ProtocolBench's GAIA-like document QA row (``stacks/_docqa.py``): the summary of
each stack's rounds, its console table and its section of the report."""

from __future__ import annotations

import statistics
from typing import Any

from _harness import percentile

READERS = 4
REPEAT = 5  # each of the 24 questions, one at a time, then as many with INFLIGHT at once
QUICK_REPEAT = 1
INFLIGHT = 8


def args(repeat: int) -> list[str]:
    return [
        *("--readers", str(READERS), "--repeat", str(repeat)),
        *("--inflight", str(INFLIGHT)),
    ]


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    per_round = [sorted(r["latencies_ms"]) for r in rounds]
    return {
        "success": sum(r["correct"] for r in rounds) / sum(r["tasks"] for r in rounds),
        "p50_ms": statistics.median(percentile(s, 0.50) for s in per_round),
        "p95_ms": statistics.median(percentile(s, 0.95) for s in per_round),
        "throughput": statistics.median(r["throughput"] for r in rounds),
        "messages_per_task": statistics.median(r["messages_per_task"] for r in rounds),
        "bytes_per_task": statistics.median(r["bytes_per_task"] for r in rounds),
        "rounds": len(rounds),
    }


def with_ratios(docqa: dict[str, Any], baseline: str) -> dict[str, Any]:
    base = docqa.get(baseline)
    for row in docqa.values():
        if base is not None:
            row["p50_vs_actorbus"] = row["p50_ms"] / base["p50_ms"]
            row["throughput_vs_actorbus"] = row["throughput"] / base["throughput"]
    return docqa


def behind(docqa: dict[str, Any], baseline: str, peers: list[str]) -> list[str]:
    """Where a peer does better than actorbus."""
    base = docqa.get(baseline)
    found: list[str] = []
    for name in peers:
        row = docqa.get(name)
        if base is None or row is None:
            continue
        if row["p50_ms"] < base["p50_ms"]:
            found.append(
                f"document QA p50: {name} {row['p50_ms']:.1f} ms < actorbus {base['p50_ms']:.1f} ms"
            )
        if row["throughput"] > base["throughput"]:
            found.append(
                f"document QA tasks/s: {name} {row['throughput']:.0f} > "
                f"actorbus {base['throughput']:.0f}"
            )
    return found


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        f"{row['success']:.1%}",
        f"{row['p50_ms']:.1f}",
        f"{row['p95_ms']:.1f}",
        f"{row['throughput']:,.0f}",
        f"{row.get('p50_vs_actorbus', 1):.2f}x",
        f"{row.get('throughput_vs_actorbus', 1):.2f}x",
        f"{row['messages_per_task']:.0f}",
        f"{row['bytes_per_task']:,.0f}",
    ]


COLUMNS = (
    "success",
    "p50 ms",
    "p95 ms",
    "tasks/s",
    "p50 vs actorbus",
    "tasks/s vs actorbus",
    "messages per task",
    "payload bytes per task",
)


def table(docqa: dict[str, Any]) -> Any:
    """The console table (rich, imported here: the orchestrator's side only)."""
    from rich.table import Table

    out = Table(
        title=f"GAIA-like document QA: a planner, {READERS} readers, an aggregator, a judge"
    )
    out.add_column("stack")
    for col in COLUMNS:
        out.add_column(col, justify="right")
    for name, row in docqa.items():
        out.add_row(name, *_cells(row))
    return out


def markdown(docqa: dict[str, Any], repeat: int) -> list[str]:
    lines = [
        "",
        f"## GAIA-like document QA: a planner, {READERS} readers, an aggregator and a judge",
        "",
        "Each agent a process of its own (`stacks/_docqa.py`) over the fixed corpus of "
        "`bench/data/docqa.json` (12 documents, 24 questions, made by the project). A "
        "task is one question: the caller asks the planner, which asks every reader at "
        "once, then the aggregator, then the judge. The tools are deterministic (a "
        "reader ranks its documents, then their sentences, by the question's keywords), "
        "so success is the same on every stack and says what the tools find; latency "
        f"is one task at a time ({24 * repeat} tasks), tasks/s with {INFLIGHT} in flight. "
        "Messages and payload bytes are what the agents send each other for a task, the "
        "same JSON on every stack (what each stack adds around it is the echo's figure).",
        "",
        "| stack | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    lines += [f"| `{name}` | " + " | ".join(_cells(row)) + " |" for name, row in docqa.items()]
    return lines
