"""The ``actorbus`` command as a child process: plain output, readiness read as a
line on stdout (never a sleep), and the process always stopped by its test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
WAIT = 8.0  # seconds for anything that should happen "now"


def cli_env() -> dict[str, str]:
    """Plain, unwrapped, unbuffered output, whatever the developer's terminal says."""
    env = dict(os.environ)
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class CliProcess:
    """One ``python -m actorbus.cli ...`` child; stderr goes to a file so an unread
    pipe can never block it."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr: IO[bytes]) -> None:
        self.proc = proc
        self.stderr_file = stderr
        self.lines: list[str] = []
        self.stderr_text = ""

    @property
    def stderr(self) -> str:
        if self.stderr_file.closed:
            return self.stderr_text
        self.stderr_file.seek(0)
        self.stderr_text = self.stderr_file.read().decode(errors="replace")
        return self.stderr_text

    async def readline(self, timeout: float = WAIT) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            raw = await self.proc.stdout.readline()
        if not raw:
            raise AssertionError(f"process ended; stdout={self.lines} stderr={self.stderr}")
        line = raw.decode().rstrip("\n")
        self.lines.append(line)
        return line

    async def wait_for_line(self, prefix: str, timeout: float = WAIT) -> str:
        while True:
            line = await self.readline(timeout)
            if line.strip().startswith(prefix):
                return line

    async def terminate(self) -> int:
        """SIGTERM and wait for the exit code; the rest of stdout is kept in lines."""
        assert self.proc.stdout is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            rest = await self.proc.stdout.read()
            code = await self.proc.wait()
        self.lines.extend(rest.decode().splitlines())
        return code


@contextlib.asynccontextmanager
async def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> AsyncIterator[CliProcess]:
    with tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "actorbus.cli",
            *args,
            cwd=cwd,
            env={**cli_env(), **(env or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        child = CliProcess(proc, stderr)
        try:
            yield child
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            _ = child.stderr  # keep it readable after the file is gone


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
