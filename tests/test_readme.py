"""The README's first example is real code: it must run and print what it says."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


async def test_writing_an_agent_example_runs(tmp_path: Path) -> None:
    text = README.read_text()
    match = re.search(r"## Writing an agent\n\n```python\n(.*?)```", text, re.S)
    assert match, "README lost its 'Writing an agent' example"
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), stdout=asyncio.subprocess.PIPE
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    assert out.decode().strip() == "text='HI'"


async def test_the_first_example_imports_without_running(tmp_path: Path) -> None:
    """`actorbus run first_agent:Echo` imports the file: the example must not start
    a second broker and its own flow when imported (its __main__ guard)."""
    text = README.read_text()
    match = re.search(r"## Writing an agent\n\n```python\n(.*?)```", text, re.S)
    assert match
    (tmp_path / "first_agent.py").write_text(match.group(1))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from actorbus.cli.run import load_actor_class as load; print(load('first_agent:Echo'))",
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    assert "text='HI'" not in out.decode()  # nothing ran
    assert "Echo" in out.decode()
