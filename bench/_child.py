"""The child's side of a benchmark's processes: say "ready", and stop when the
parent goes away. Kept apart from ``_harness`` (rich, plots, reports) so that a
child's start, which some benchmarks measure, imports nothing it does not use."""

from __future__ import annotations

import asyncio
import os
import sys

READY = "ready"


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
