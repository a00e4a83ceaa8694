"""What the benchmarks share: child processes that say "ready" and are stopped for
sure (and, in the child, stop when the parent goes away), argument checks,
percentiles, JSON output and version facts for the report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

READY = "ready"


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


def stop_when_stdin_closes(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """(In a child) set ``stop`` when the parent closes our stdin, or dies.

    A reader callback on the pipe, not a thread blocked in ``read``: such a thread
    would still hold stdin's buffer lock at interpreter shutdown.
    """
    fd = sys.stdin.fileno()

    def on_readable() -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            stop.set()

    try:
        os.set_blocking(fd, False)
        loop.add_reader(fd, on_readable)
    except (OSError, NotImplementedError, ValueError):  # not a pipe, or no add_reader
        pass


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
