"""The docs site builds strictly, and what Getting started shows runs: its files
as written, its tests with pytest, and its shell commands in three processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _util import run_to_end, terminate

REPO = Path(__file__).resolve().parents[1]
GETTING_STARTED = REPO / "docs" / "getting-started.md"
BIN = Path(sys.executable).parent
WAIT = 30.0


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GETTING_STARTED.read_text(), re.S)


def files(tmp_path: Path) -> dict[str, Path]:
    """The page's Python blocks that name their file in a first-line comment, written out."""
    written = {}
    for code in blocks("python"):
        first = code.splitlines()[0]
        if first.startswith("# ") and first.endswith(".py"):
            path = tmp_path / first[2:]
            path.write_text(code)
            written[path.name] = path
    return written


def commands() -> list[list[str]]:
    """The page's shell commands, one per line of its sh blocks."""
    return [shlex.split(line) for code in blocks("sh") for line in code.splitlines() if line]


async def finished(*argv: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    code, out, _ = await run_to_end(*argv, cwd=cwd, env=env, timeout=120, merge=True)
    return code, out


@contextlib.asynccontextmanager
async def running(*argv: str, cwd: Path, env: dict[str, str], ready: str) -> AsyncIterator[None]:
    """A long-running command, until the test is done with it (SIGTERM, then kill)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        seen = ""
        async with asyncio.timeout(WAIT):
            while ready not in (line := (await proc.stdout.readline()).decode()):
                seen += line
                assert line, f"{argv} ended:\n{seen}"
        yield
    finally:
        await terminate(proc, 15)


async def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    code, out = await finished(
        str(BIN / "mkdocs"),
        "build",
        "--strict",
        "--site-dir",
        str(tmp_path / "site"),
        cwd=REPO,
        env=dict(os.environ),
    )
    assert code == 0, out
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "actorbus" / "index.html").read_text()
    assert "ActorSystem" in api


async def test_getting_started_runs_as_written(tmp_path: Path) -> None:
    written = files(tmp_path)
    assert set(written) == {"first_agent.py", "test_first_agent.py"}
    env = {**os.environ, "ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": ""}
    env["NATS_URL"] = ""
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"

    code, out = await finished(sys.executable, "first_agent.py", cwd=tmp_path, env=env)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == "text='HI'"  # (after a first run's notice)

    cmds = commands()
    assert ["pytest", "--asyncio-mode=auto"] in cmds
    code, out = await finished(
        sys.executable,
        "-m",
        "pytest",
        "--asyncio-mode=auto",
        "-q",
        "-p",
        "no:cacheprovider",
        "test_first_agent.py",
        cwd=tmp_path,
        env=env,
    )
    assert code == 0, out
    assert "2 passed" in out

    up = ["actorbus", "up"]
    run = ["actorbus", "run", "first_agent:Echo", "--key", "1"]
    ask = ["actorbus", "ask", "echo/1", '{"text": "hi"}', "--intent", "Question"]
    assert up in cmds
    assert run in cmds
    assert ask in cmds
    async with (
        running(*up, cwd=tmp_path, env=env, ready="nats-server ready"),
        running(*run, cwd=tmp_path, env=env, ready="ready"),
    ):
        code, out = await finished(*ask, cwd=tmp_path, env=env)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == '{"text": "HI"}'


@pytest.mark.parametrize("page", sorted(p.name for p in (REPO / "docs").glob("*.md")))
def test_every_page_is_in_the_site(page: str) -> None:
    assert page in (REPO / "mkdocs.yml").read_text()
