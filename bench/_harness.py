"""The skeleton every benchmark shares, so each script holds only its own measurement.

- arguments: ``presets`` (``--quick`` and per-setting overrides), ``positive_int``;
- processes: children that say "ready" and are stopped for sure
  (``wait_ready``, ``stop_processes``; the child's side is ``_child``);
  ``compile_sources`` first, so they start as an installed package does;
- facts for the report: ``machine_info`` (platform, CPUs, load, versions of the
  packages measured, the commit), ``package_version``, ``nats_server_version``;
- progress and output: ``report_console`` (wide tables in a log file too),
  ``step``, ``percentile``, and ``write_report``, which writes the JSON and the
  PNG and prints the verdict line every benchmark ends with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from _child import READY
from rich.console import Console
from rich.progress import Progress, TaskID


def compile_sources() -> None:
    """Byte-compile actorbus and the benchmark scripts, as installing a package
    does: a child process started with PYTHONDONTWRITEBYTECODE set (CI sets it)
    would otherwise compile every module from source on each start, which a
    restart-time measurement must not count."""
    import compileall

    for directory in (Path(__file__).resolve().parents[1] / "actorbus", Path(__file__).parent):
        compileall.compile_dir(directory, quiet=1)


def wait_ready(proc: subprocess.Popen[str], timeout: float, what: str) -> None:
    """Until the child printed "ready"; RuntimeError naming ``what`` otherwise."""
    stdout = proc.stdout
    assert stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"{what} not ready after {timeout:g}s") from None
    if line.strip() != READY:
        proc.poll()
        raise RuntimeError(f"{what} failed to start (exit code {proc.returncode}, said {line!r})")


def close_streams(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def stop_processes(procs: list[subprocess.Popen[str]], grace: float = 5.0) -> None:
    """SIGTERM all, wait up to ``grace`` seconds, SIGKILL what is left; reaps all."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.terminate()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        close_streams(proc)


def nats_server_version(binary: str) -> str:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return (out.stdout or out.stderr).strip().removeprefix("nats-server: ")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def presets(
    args: argparse.Namespace, defaults: Mapping[str, int], quick: Mapping[str, int]
) -> dict[str, int]:
    """Each of ``defaults``' settings: from the command line when given there, else
    from the preset (``quick`` over ``defaults`` when ``args.quick``)."""
    preset = {**defaults, **(quick if args.quick else {})}
    out: dict[str, int] = {}
    for name, value in preset.items():
        given: int | None = getattr(args, name)
        out[name] = value if given is None else given
    return out


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


# -- facts for the report --------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def loadavg() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def git_state() -> dict[str, Any] | None:
    """The commit measured, and whether actorbus/ differed from it (uncommitted edits)."""

    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "--short", "HEAD"),
            "actorbus_dirty": bool(git("status", "--porcelain", "--", "actorbus")),
        }
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(
    *, binary: str | None = None, packages: Iterable[str] = (), git: bool = False, **extra: Any
) -> dict[str, Any]:
    """Where and with what a run was measured: the platform, the CPUs this process
    may use, the load when it started, the nats-server ``binary``'s version, the
    version of each of ``packages`` (as ``nats_py`` for ``nats-py``), the commit
    with ``git``, and ``extra`` facts of the benchmark's own."""
    import actorbus  # here, so the benchmarks' child processes need not import it

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "loadavg_start": loadavg(),
        "actorbus": actorbus.__version__,
    }
    if binary is not None:
        info["nats_server"] = nats_server_version(binary)
    for name in packages:
        info[name.replace("-", "_")] = package_version(name)
    if git:
        info["git"] = git_state()
    info.update(extra)
    return info


# -- progress and output ---------------------------------------------------------
def report_console(width: int = 160) -> Console:
    """The terminal's console, or one ``width`` columns wide when the output goes to
    a file (a log must not squeeze the tables into 80 columns)."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=width)
    return console


class LoggedProgress(Progress):
    """rich's progress display, which draws nothing when the output is not a terminal
    (a log file, CI): there each new step is printed as a line instead, so a run of
    many minutes still says where it is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logged: dict[TaskID, str] = {}

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        task = super().add_task(description, *args, **kwargs)
        self._log(task, description)
        return task

    def update(self, task_id: TaskID, *, description: str | None = None, **kwargs: Any) -> None:
        super().update(task_id, description=description, **kwargs)
        if description is not None:
            self._log(task_id, description)

    def _log(self, task: TaskID, description: str) -> None:
        if self.console.is_terminal or self._logged.get(task) == description:
            return
        self._logged[task] = description
        stamp = time.strftime("%H:%M:%S")
        self.console.print(f"{stamp} {description}", highlight=False, markup=False)


def step(progress: Progress, task: TaskID, description: str) -> None:
    progress.update(task, description=description)
    progress.refresh()


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_report(
    console: Console,
    out: Path,
    name: str,
    data: dict[str, Any],
    plot: Callable[[Path], bool],
    verdict: str | None = None,
) -> None:
    """Write ``out/name.json`` and (``plot`` returns False without matplotlib)
    ``out/name.png``, then print the verdict line if there is one."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{name}.json"
    write_json(json_path, data)
    console.print(f"wrote {json_path}")
    png_path = out / f"{name}.png"
    if plot(png_path):
        console.print(f"wrote {png_path}")
    else:
        console.print("note: matplotlib is not installed; skipped the plot")
    if verdict is not None:
        console.print(verdict, style="bold", highlight=False)
