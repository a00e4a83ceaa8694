"""Reading the docs as a test reads them: pages, their code blocks, the example
files they include, the output they promise; and terminals to run a page's
commands in, as its reader would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from _util import run_to_end, terminate

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
README = REPO / "README.md"
BIN = Path(sys.executable).parent
WAIT = 30.0

# ```python
# --8<-- "file.py"
# ```
# optionally followed by "Output:" and a text block: what running it prints.
_INCLUDE = re.compile(
    r'```python\n--8<-- "([^"]+)"\n```(?:\n\nOutput:\n\n```text\n(.*?)```)?', re.S
)
_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
# A shell command line followed by the output it prints.
_COMMAND_OUTPUT = re.compile(r"```sh\n([^\n]+)\n```\n\nOutput:\n\n```text\n(.*?)```", re.S)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path, language: str) -> list[str]:
    return [code for lang, code in _BLOCK.findall(page.read_text()) if lang == language]


@dataclass(frozen=True)
class Included:
    page: Path
    file: str
    output: str | None  # what the page says running it prints


def includes(page: Path) -> list[Included]:
    return [Included(page, f, out or None) for f, out in _INCLUDE.findall(page.read_text())]


def promised_outputs(page: Path) -> dict[str, str]:
    """Each shell command the page shows the output of, with that output."""
    return {cmd: out for cmd, out in _COMMAND_OUTPUT.findall(page.read_text())}


def commands(text: str) -> list[str]:
    """The command lines of a text's sh blocks (continuation lines joined)."""
    found = []
    for lang, code in _BLOCK.findall(text):
        if lang == "sh":
            joined = code.replace("\\\n", " ")
            found += [line.split(" #")[0].strip() for line in joined.splitlines()]
    return [c for c in found if c]


def written_out(page: Path, directory: Path) -> dict[str, Path]:
    """The page's Python blocks that name their file in a first-line comment."""
    written = {}
    for code in blocks(page, "python"):
        first = code.splitlines()[0]
        if first.startswith("# ") and first.endswith(".py"):
            path = directory / first[2:]
            path.write_text(code)
            written[path.name] = path
    return written


def reader_env(home: Path) -> dict[str, str]:
    """A reader's shell: the venv's commands on PATH, a home of their own, and no
    server named, so the commands find the one `actorbus up` runs."""
    env = {**os.environ, "ACTORBUS_HOME": str(home), "ACTORBUS_URL": "", "NATS_URL": ""}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def argv_of(command: str) -> list[str]:
    argv = shlex.split(command)
    return [sys.executable, *argv[1:]] if argv[0] == "python" else argv


async def finished(command: str, cwd: Path, env: dict[str, str]) -> str:
    """Run a command to its end; its output (it must succeed)."""
    code, out, err = await run_to_end(*argv_of(command), cwd=cwd, env=env, timeout=120)
    assert code == 0, f"{command} exited {code}:\n{out}\n{err}"
    return out


class Terminal:
    """A long-running command (a broker, an actor host) in a terminal of its own."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode().rstrip("\n"))
            self._changed.set()
        self._changed.set()

    async def shows(self, text: str, timeout: float = WAIT) -> None:
        """Wait until the terminal has printed ``text`` (failing if it ends first)."""
        async with asyncio.timeout(timeout):
            while not any(text in line for line in self.lines):
                assert not self._reader.done(), f"ended before {text!r}:\n" + "\n".join(self.lines)
                self._changed.clear()
                await self._changed.wait()


@contextlib.asynccontextmanager
async def terminal(
    command: str, cwd: Path, env: dict[str, str], ready: str
) -> AsyncIterator[Terminal]:
    """Start ``command``, wait for ``ready`` in its output; SIGTERM it on the way out."""
    proc = await asyncio.create_subprocess_exec(
        *argv_of(command),
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    term = Terminal(proc)
    try:
        await term.shows(ready)
        yield term
    finally:
        await terminate(proc, 15)
        term._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await term._reader
