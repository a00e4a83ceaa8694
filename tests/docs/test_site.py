"""The docs site: it builds strictly, every page is in it, every Python example
is a file the suite runs, and every command line shown exists."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
from pathlib import Path

import pytest
from _docs import BIN, DOCS, EXAMPLES, README, REPO, blocks, commands, includes, pages
from _util import run_to_end

from actorbus.cli.main import build_parser
from actorbus.cli.services import service_of

# Getting started's blocks are files the reader saves, written out and run as
# they stand by test_walkthroughs.py.
WRITTEN_OUT = {"getting-started.md"}


async def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    code, out, _ = await run_to_end(
        str(BIN / "mkdocs"),
        "build",
        "--strict",
        "--site-dir",
        str(site),
        cwd=REPO,
        env=dict(os.environ),
        timeout=120,
        merge=True,
    )
    assert code == 0, out
    assert (site / "getting-started" / "index.html").exists()
    assert "ActorSystem" in (site / "reference" / "actorbus" / "index.html").read_text()
    hosting = (site / "hosting" / "index.html").read_text()
    assert "session/alice: turn 2" in hosting  # the example file is in the page
    assert "--8&lt;--" not in hosting


@pytest.mark.parametrize("page", [p.relative_to(DOCS).as_posix() for p in pages()])
def test_every_page_is_in_the_site(page: str) -> None:
    assert page in (REPO / "mkdocs.yml").read_text()


@pytest.mark.parametrize("page", [p.relative_to(DOCS).as_posix() for p in pages()])
def test_every_python_example_is_a_file_the_suite_runs(page: str) -> None:
    path = DOCS / page
    if page in WRITTEN_OUT:
        return
    inline = [code for code in blocks(path, "python") if not code.startswith('--8<-- "')]
    assert not inline, f"{page}: put this example in docs/examples/ and include it:\n{inline}"
    for included in includes(path):
        assert (EXAMPLES / included.file).is_file(), included


def test_every_example_file_is_shown_somewhere() -> None:
    shown = {i.file for page in pages() for i in includes(page)}
    files = {p.name for p in EXAMPLES.glob("*.py")}
    assert files <= shown, f"examples no page includes: {sorted(files - shown)}"


def _parser_for(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser a command line goes to, and the arguments it gets."""
    if argv[0] == "actorbus":
        service = service_of(argv[1:])
        if service is None:
            return build_parser(), argv[1:]
        module, rest = service
        return importlib.import_module(module).parser(), rest
    assert argv[:2] == ["python", "-m"], argv
    return importlib.import_module(f"{argv[2]}.__main__").parser(), argv[3:]


def shown_command_lines() -> list[str]:
    texts = [p.read_text() for p in pages()] + [README.read_text()]
    lines = [c for text in texts for c in commands(text)]
    wanted = [c for c in lines if c.startswith(("actorbus ", "python -m actorbus"))]
    return sorted({c for c in wanted if "[" not in c and "..." not in c})


@pytest.mark.parametrize("line", shown_command_lines())
def test_every_command_line_shown_parses(line: str) -> None:
    parser, args = _parser_for(shlex.split(line))
    parser.exit_on_error = False
    try:
        parser.parse_args(args)
    except SystemExit as exc:  # argparse exits on errors whatever exit_on_error says
        if exc.code not in (0, None):  # (0: a --help line)
            pytest.fail(f"{line!r} does not parse (exit {exc.code})")


def test_the_benchmark_plots_in_the_docs_are_the_benches_own() -> None:
    """docs/images/bench holds copies of bench/results' plots (the site cannot
    reach outside docs/): a bench run that changed a plot must refresh its copy."""
    copies = sorted((DOCS / "images" / "bench").glob("*.png"))
    assert copies
    for copy in copies:
        original = REPO / "bench" / "results" / copy.name
        assert copy.read_bytes() == original.read_bytes(), f"cp {original} {copy}"
