"""Every example file the docs include runs, and prints what its page says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _docs import EXAMPLES, Included, includes, pages, reader_env
from _util import run_to_end

# Run by the walkthrough test, in the processes its page describes.
WALKTHROUGH = {"team.py", "client.py"}


def shown() -> dict[str, Included]:
    """Each example file, with the output a page promises for it (if one does)."""
    found: dict[str, Included] = {}
    for page in pages():
        for included in includes(page):
            if included.file not in found or included.output is not None:
                found[included.file] = included
    return {name: inc for name, inc in found.items() if name not in WALKTHROUGH}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(shown()))
async def test_example_runs_and_prints_what_its_page_says(name: str, tmp_path: Path) -> None:
    example = shown()[name]
    env = reader_env(tmp_path / "home")
    if name.startswith("test_"):  # a user's test file: pytest runs it
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
    else:
        argv = [sys.executable, name]
    code, out, err = await run_to_end(*argv, cwd=EXAMPLES, env=env, timeout=90)
    assert code == 0, f"{name} ({example.page.name}) exited {code}:\n{out}\n{err}"
    if name.startswith("test_"):
        assert " passed" in out, out
        assert "failed" not in out, out
    if example.output is not None:
        assert out == example.output, f"{example.page.name} says {name} prints another output"
