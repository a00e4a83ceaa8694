"""Running the clients of other ecosystems that tests/js holds (importable as ``_js``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from _util import run_to_end

JS = Path(__file__).parent / "js"
NODE = shutil.which("node")


def needs_js(package: str) -> list[pytest.MarkDecorator]:
    """Skip marks for a test of an npm ``package`` from tests/js (with the reason)."""
    return [
        pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
        pytest.mark.skipif(
            not (JS / "node_modules" / package).is_dir(),
            reason=f"{package} is not installed (npm ci --prefix tests/js; make test does it)",
        ),
    ]


async def run_node(*args: str, **env: str) -> tuple[int, str, str]:
    """Run Node (or a tool of tests/js) to its end, bounded, with ``env`` added to
    the environment: exit code, stdout, stderr."""
    assert NODE is not None
    return await run_to_end(*args, cwd=JS, env={**os.environ, **env}, timeout=40)


async def run_js(script: str, *args: str, **env: str) -> Any:
    """Run a Node client script of tests/js; its last line of output, as JSON."""
    assert NODE is not None
    code, out, err = await run_node(NODE, str(JS / script), *args, **env)
    assert code == 0, f"{script} {args} failed:\n{err}"
    return json.loads(out.strip().splitlines()[-1])
