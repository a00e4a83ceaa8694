"""The README's first example is real code: it must run and print what it says."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from _util import run_to_end

README = Path(__file__).resolve().parents[1] / "README.md"


def first_example() -> str:
    """The code of the README's 'Writing an agent' example."""
    match = re.search(r"## Writing an agent\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert match, "README lost its 'Writing an agent' example"
    return match.group(1)


async def test_writing_an_agent_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(first_example())
    code, out, err = await run_to_end(sys.executable, str(script), timeout=30)
    assert code == 0, err
    assert out.strip() == "text='HI'"


async def test_the_first_example_imports_without_running(tmp_path: Path) -> None:
    """`actorbus run first_agent:Echo` imports the file: the example must not start
    a second broker and its own flow when imported (its __main__ guard)."""
    (tmp_path / "first_agent.py").write_text(first_example())
    load = "from actorbus.cli.run import load_actor_class as load; print(load('first_agent:Echo'))"
    code, out, err = await run_to_end(sys.executable, "-c", load, cwd=tmp_path, timeout=30)
    assert code == 0, err
    assert "text='HI'" not in out  # nothing ran
    assert "Echo" in out
