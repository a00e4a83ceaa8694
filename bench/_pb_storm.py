"""ProtocolBench's Fail-Storm row: the Shard-QA ring of ``stacks/_storm.py`` on
every stack, the same cold restart for all (a killed shard is started again as a
new process after the delay), and actorbus once more as it is deployed, its
shards the workers of ``actorbus run --workers`` (``bench/fail_storm.py``), whose
supervisor forks a killed one again from a warm parent."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUPERVISED = "actorbus (run --workers)"
STORM = {"cycles": 3, "window": 8.0, "restart_delay": 2.0, "rate": 40.0}
QUICK_STORM = {"cycles": 1, "window": 3.0, "restart_delay": 2.0, "rate": 20.0}


def storm_args(settings: dict[str, float]) -> list[str]:
    return [
        *("--cycles", str(int(settings["cycles"])), "--window", str(settings["window"])),
        *("--restart-delay", str(settings["restart_delay"]), "--rate", str(settings["rate"])),
    ]


def supervised_run(settings: dict[str, float], timeout: float) -> dict[str, Any]:
    """``bench/fail_storm.py`` with the same ring, load and kills, in the shape of a
    stack's ``storm`` result."""
    with tempfile.TemporaryDirectory(prefix="protocolbench-storm-") as out:
        done = subprocess.run(
            [sys.executable, str(HERE / "fail_storm.py"), *storm_args(settings), "--out", out],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"fail_storm.py failed:\n{done.stderr[-3000:]}")
        data = json.loads((Path(out) / "fail_storm.json").read_text())
    return {
        "cycles": [
            {
                "index": c["index"],
                "victims": c["victims"],
                "recovery_s": c["recovery_s"],
                "restart_to_serving_s": c["recovery_t"] - c["restart_t"],
                **{w: {"rate": c[w]["rate"], "p50_ms": c[w]["p50_ms"]} for w in ("pre", "post")},
                "fault": {"rate": c["fault"]["rate"], "p50_ms": c["fault"]["p50_ms"]},
            }
            for c in data["cycles"]
        ]
    }


def summary(result: dict[str, Any]) -> dict[str, Any]:
    cycles = result["cycles"]

    def mean(pick: Callable[[dict[str, Any]], float | None]) -> float | None:
        values = [v for v in map(pick, cycles) if v is not None]
        return statistics.fmean(values) if values else None

    pre, post = mean(lambda c: c["pre"]["rate"]), mean(lambda c: c["post"]["rate"])
    return {
        "recovery_s": mean(lambda c: c["recovery_s"]),
        "recovery_max_s": max(c["recovery_s"] for c in cycles),
        "restart_to_serving_s": mean(lambda c: c["restart_to_serving_s"]),
        "pre_rate": pre,
        "fault_rate": mean(lambda c: c["fault"]["rate"]),
        "post_rate": post,
        "retention": post / pre if pre and post is not None else None,
        "p50_before_kill_ms": mean(lambda c: c["pre"]["p50_ms"]),
        "cycles": len(cycles),
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table_rows(storm: dict[str, Any]) -> list[list[str]]:
    """stack, recovery s (max), restart to serving s, pre / fault / post, retention, p50."""
    return [
        [
            name,
            f"{_num(s['recovery_s'])} ({_num(s['recovery_max_s'])})",
            _num(s["restart_to_serving_s"]),
            f"{_pct(s['pre_rate'])} / {_pct(s['fault_rate'])} / {_pct(s['post_rate'])}",
            _pct(s["retention"]),
            _num(s["p50_before_kill_ms"], 1),
        ]
        for name, s in storm.items()
        if "error" not in s
    ]


def markdown(storm: dict[str, Any], settings: dict[str, float]) -> list[str]:
    lines = [
        "",
        f"## Fail-Storm: 8 shards, 3 killed per cycle, {int(settings['cycles'])} cycle(s), "
        f"restarted after {settings['restart_delay']:g} s",
        "",
        "A Shard-QA ring of 8 processes (`stacks/_storm.py`): each holds an eighth of a "
        "seeded question set and asks the next live shard for the rest; clients query "
        f"at {settings['rate']:g}/s. Every cycle 3 shards get SIGKILL and are started again "
        f"{settings['restart_delay']:g} s later as new processes; recovery runs from the kill "
        "to the moment the last of them answers again. Rates are answered correctly / "
        f"queries in the {settings['window']:g} s before the kill, between kill and "
        "recovery, and after recovery. The last row is actorbus as it is deployed: its "
        "shards are the workers of `actorbus run --workers`, forked again from a warm "
        "parent (`bench/fail_storm.py`).",
        "",
        "| stack | recovery s, mean (max) | restart to serving s | answered pre / during / "
        "post | retention | p50 ms before the kill |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| `{r[0]}` | " + " | ".join(r[1:]) + " |" for r in table_rows(storm)]
    lines += [
        f"| `{name}` | error: {s['error'][:160]} | | | | |"
        for name, s in storm.items()
        if "error" in s
    ]
    return lines


def table(storm: dict[str, Any]) -> Any:
    """The console table (rich, imported here: the orchestrator's side only)."""
    from rich.table import Table

    out = Table(title="Fail-Storm: recovery after 3 of 8 shards are SIGKILLed")
    for col in ("stack", "recovery s (max)", "restart to serving s", "pre/during/post", "kept"):
        out.add_column(col)
    out.add_column("p50 ms before the kill")
    for row in table_rows(storm):
        out.add_row(*row)
    for name, s in storm.items():
        if "error" in s:
            out.add_row(name, f"[red]{s['error'][-80:]}", "", "", "", "")
    return out
