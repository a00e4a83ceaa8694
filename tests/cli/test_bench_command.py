"""``actorbus bench``: the checkout's benchmarks from the shell, and a smoke run of
ProtocolBench side by side (the NATS stacks of this interpreter; the peers'
.venv-peers is not needed, and a stack without its packages is skipped, saying so)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from actorbus.cli.main import main


def test_list_names_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "list"]) == 0
    names = capsys.readouterr().out.split()
    assert {"protocolbench", "ask", "fail_storm", "streaming_queue"} <= set(names)
    assert not [n for n in names if n.startswith("_")]


def test_an_unknown_benchmark_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nope"]) != 0
    assert "no benchmark 'nope'; there are: all, " in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_bench_all_runs_the_stacks_side_by_side_and_writes_the_report(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    peers = tmp_path / "no-peers" / "python"  # a missing interpreter: the peers are skipped
    code = main(
        [
            *("bench", "all", "--quick", "--rounds", "2", "--stacks", "actorbus,nats,faststream"),
            *("--sequential", "50", "--concurrent", "200", "--inflight", "10"),
            *("--questions", "40", "--workers", "2,4", "--peers-python", str(peers)),
            *("--out", str(tmp_path)),
        ]
    )
    assert code == 0
    # Into a pipe, not a terminal: no progress bar, but a line per step all the same.
    out = capfd.readouterr().out
    assert re.search(r"^\d\d:\d\d:\d\d round 2: echo on nats$", out, re.MULTILINE), out
    assert re.search(r"^\d\d:\d\d:\d\d Fail-Storm on actorbus run --workers$", out, re.M)
    data = json.loads((tmp_path / "protocolbench.json").read_text())
    assert set(data["summary"]["echo"]) == {"actorbus", "nats"}
    assert "faststream" in data["skipped"]
    for stack in ("actorbus", "nats"):
        echo = data["summary"]["echo"][stack]
        assert echo["errors"] == 0
        assert echo["rounds"] == 2
        assert 0 < echo["p50_ci95_us"][0] <= echo["p50_ci95_us"][1]
        for workers in ("2", "4"):
            sq = data["summary"]["sq"][stack][workers]
            assert sq["success"] == 1.0  # every question answered, and right
            assert sq["min_ms"] >= 9.5  # the service time (10 ms) is in every answer
    rounds = data["raw"]["sq"]["nats"]["4"]
    assert all(sum(r["per_worker"]) == 40 for r in rounds)
    docqa = data["summary"]["docqa"]
    assert set(docqa) == {"actorbus", "nats"}
    for name, row in docqa.items():
        # the deterministic tools find 23 of the 24 answers, on every stack alike
        assert row["success"] == 23 / 24, (name, row)
        assert row["messages_per_task"] == 14, (name, row)  # 1 + 4 readers + 2, each way
    storm = data["summary"]["storm"]
    assert set(storm) == {"actorbus", "nats", "actorbus (run --workers)"}
    for name, row in storm.items():
        assert row["cycles"] == 1, (name, row)
        assert row["recovery_s"] >= 2.0, (name, row)  # nothing answers before its restart
        assert row["post_rate"] == 1.0, (name, row)  # every shard back, every answer right
    safety = data["summary"]["safety"]
    assert set(safety) == {"actorbus", "actorbus (open bus)", "nats"}
    # on its secured broker actorbus blocks all three; the open control shows the
    # probes see through a bus without security
    assert safety["actorbus"]["blocked"] == 3, safety["actorbus"]
    assert safety["actorbus (open bus)"]["blocked"] == 0, safety["actorbus (open bus)"]
    assert safety["nats"]["blocked"] == 0, safety["nats"]
    report = (tmp_path / "protocolbench.md").read_text()
    assert "## Safety: what each stack blocks out of the box" in report
    assert "## Fail-Storm: 8 shards, 3 killed per cycle, 1 cycle(s)" in report
    assert "## GAIA-like document QA" in report
    assert "| `faststream` | skipped |" in report
    assert "## Where actorbus does not lead" in report


@pytest.mark.timeout(120)
def test_fail_storm_kills_shards_and_their_supervisor_starts_them_again(tmp_path: Path) -> None:
    args = ("--cycles", "1", "--window", "2", "--restart-delay", "0.5", "--rate", "20")
    assert main(["bench", "fail_storm", *args, "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "fail_storm.json").read_text())
    assert data["config"]["restart"] == "supervisor"
    [cycle] = data["cycles"]
    assert len(cycle["victims"]) == 3
    assert sorted(cycle["shard_recovery_s"]) == sorted(str(v) for v in cycle["victims"])
    assert cycle["recovery_s"] >= 0.5  # none answered before its restart
    assert cycle["post"]["rate"] == 1.0  # every shard back, every answer right
