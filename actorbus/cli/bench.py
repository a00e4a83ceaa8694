"""``actorbus bench``: the benchmarks of a source checkout, from the shell.

- ``bench all``: ProtocolBench side by side with the peers (``bench/protocolbench.py``;
  the peers come from ``.venv-peers``, which ``make bench-all`` makes);
- ``bench NAME``: one benchmark (``bench/NAME.py``: ``ask``, ``fail_storm``,
  ``streaming_queue`` ...); ``bench list`` names them.

Options after the name go to the script (``actorbus bench all --quick``). The
benchmarks live in the repository's ``bench/`` directory, which an installed
wheel does not carry: run from a checkout (``pip install -e .``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from actorbus.cli.common import EXIT_OK, CliError, stdout

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
ALL = "protocolbench"


def _scripts() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.name.startswith("_"))


def cmd_bench(args: argparse.Namespace) -> int:
    if not BENCH_DIR.is_dir():
        raise CliError(
            "the benchmarks live in actorbus's source repository (bench/), which an installed "
            "package does not carry: clone it, `pip install -e .`, then `make bench-all`"
        )
    if args.name == "list":
        for name in _scripts():
            stdout().print(name, highlight=False)
        return EXIT_OK
    name = ALL if args.name == "all" else args.name
    script = BENCH_DIR / f"{name}.py"
    if name.startswith("_") or not script.is_file():
        raise CliError(f"no benchmark {args.name!r}; there are: all, {', '.join(_scripts())}")
    return subprocess.run([sys.executable, str(script), *args.options], check=False).returncode


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    benchcmd = sub.add_parser(
        "bench",
        parents=[common],
        help="run the benchmarks of a source checkout (all: side by side with the peers)",
        description="Runs bench/NAME.py of a source checkout with this interpreter; `all` is "
        "ProtocolBench side by side with FastStream, AutoGen Core and a2a-sdk "
        "(bench/protocolbench.py, its report in bench/results/protocolbench.md). Options "
        "after NAME go to the script.",
    )
    benchcmd.add_argument("name", help="all, list, or a benchmark (ask, fail_storm, ...)")
    benchcmd.add_argument("options", nargs=argparse.REMAINDER, help="the script's options")
    benchcmd.set_defaults(func=cmd_bench)
