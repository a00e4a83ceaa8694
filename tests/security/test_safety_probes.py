"""The safety probe suite (bench/safety.py) run end to end: every probe against
the bus and the gateway's edges is blocked, what must keep working does, and the
watermark is found on an open bus and nowhere on the secured one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_probe_is_blocked(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "safety.py"),
            "--messages",
            "5",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "safety.json").read_text())
    assert report["blocked"] == report["total"] >= 70
    assert all(c["blocked"] for c in report["controls"])
    assert report["watermark"]["secured"]["hits"] == 0
    assert report["watermark"]["open_control"]["hits"] > 0
    dimensions = {(p["target"], p["dimension"]) for p in report["probes"]}
    for edge in ("a2a", "acp", "agora", "mcp", "anp"):
        assert (edge, "hijack") in dimensions
    for dimension in ("tls", "certificates", "watermark", "replay", "clock", "bus", "insider"):
        assert ("bus", dimension) in dimensions
    insiders = {p["name"] for p in report["probes"] if p["dimension"] == "insider"}
    assert insiders == {
        "the durable stream reconfigured",
        "another type's durable consumer deleted",
        "another type's messages fetched",
        "another type's messages, through a consumer of its own",
        "another type's idempotency key written ahead",
        "another type's attempts written ahead",
        "another member's client address as src",
    }
    assert ("gateway", "tls") in dimensions
    assert ("a2a", "clock") in dimensions
