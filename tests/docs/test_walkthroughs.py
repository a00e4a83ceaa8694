"""Pages a reader follows step by step, run as written: their files, their
commands in terminals of their own, and the output they promise."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from _docs import (
    DOCS,
    EXAMPLES,
    README,
    commands,
    finished,
    promised_outputs,
    reader_env,
    terminal,
    written_out,
)

# `actorbus up` on the default port: one such test at a time across workers.
pytestmark = pytest.mark.usefixtures("default_port")

GETTING_STARTED = DOCS / "getting-started.md"
WALKTHROUGH = DOCS / "walkthrough.md"


async def first_agent_runs(page: Path, directory: Path, also: set[str]) -> dict[str, str]:
    """Write out the page's files (first_agent.py and ``also``) and run its first
    agent as the reader would; the reader's environment, for what follows."""
    assert set(written_out(page, directory)) == {"first_agent.py", *also}
    env = reader_env(directory / "home")
    out = await finished("python first_agent.py", directory, env)
    assert out.strip().splitlines()[-1] == "text='HI'"
    return env


async def test_getting_started_runs_as_written(tmp_path: Path) -> None:
    env = await first_agent_runs(GETTING_STARTED, tmp_path, {"test_first_agent.py"})

    cmds = commands(GETTING_STARTED.read_text())
    assert "pytest --asyncio-mode=auto" in cmds
    out = await finished(
        f"{sys.executable} -m pytest --asyncio-mode=auto -q -p no:cacheprovider "
        "test_first_agent.py",
        tmp_path,
        env,
    )
    assert "2 passed" in out

    up, run = "actorbus up", "actorbus run first_agent:Echo --key 1"
    ask = """actorbus ask echo/1 '{"text": "hi"}' --intent Question"""
    assert {up, run, ask} <= set(cmds)
    async with (
        terminal(up, tmp_path, env, ready="nats-server ready"),
        terminal(run, tmp_path, env, ready="ready"),
    ):
        out = await finished(ask, tmp_path, env)
    assert out.strip() == '{"text": "HI"}'


async def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """Four terminals: the broker, the researcher and chief, the editor started
    after the article was queued, and the reader's commands and program."""
    for name in ("team.py", "client.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    env = reader_env(tmp_path / "home")
    cmds = commands(WALKTHROUGH.read_text())
    outputs = promised_outputs(WALKTHROUGH)
    up, chief_and_researcher, editor = cmds[0], cmds[1], cmds[5]
    assert up == "actorbus up"
    assert chief_and_researcher.startswith("actorbus run team:Researcher")
    assert editor.startswith("actorbus run team:Editor")
    async with (
        terminal(up, tmp_path, env, ready="nats-server ready"),
        terminal(chief_and_researcher, tmp_path, env, ready="ready"),
    ):
        for command in cmds[2:5]:  # stream, ask, queue: before the editor runs
            assert await finished(command, tmp_path, env) == outputs[command], command
        async with terminal(editor, tmp_path, env, ready="ready") as editing:
            await editing.shows("editing 'NATS': 3 findings")
            client = cmds[6]
            assert client == "python client.py"
            assert await finished(client, tmp_path, env) == outputs[client]
    assert len(outputs) == 4, "every promised output was checked"


async def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    """Its first agent, imported by `actorbus run` without running, and its
    two-process example."""
    env = await first_agent_runs(README, tmp_path, {"client.py"})

    cmds = commands(README.read_text())
    up, run = "actorbus up", "actorbus run first_agent:Echo --key 1"
    assert {up, run, "python client.py"} <= set(cmds)
    async with (
        terminal(up, tmp_path, env, ready="nats-server ready"),
        terminal(run, tmp_path, env, ready="ready") as host,
    ):
        out = await finished("python client.py", tmp_path, env)
        assert out.strip() == "text='HELLO FROM ANOTHER PROCESS'"
    assert not any("text='HI'" in line for line in host.lines)  # imported, not run
