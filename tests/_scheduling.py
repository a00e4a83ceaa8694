"""How `make test` shares the files between its two workers (``-n 2 --dist loadfile``).

The files that run a stack on the Docker engine take minutes and hold the engine's
lock (``_util.exclusive("docker-engine")``), so two of them on two workers would
make one worker wait on the other. They run as one unit, first: one worker takes
them while the other starts on the rest. xdist's own order (the largest files
first) would leave them, few tests each, for the end, with the other worker idle.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

ENGINE_FILES = frozenset(
    {
        "tests/test_compose_engine.py",
        "tests/test_compose_single.py",
        "tests/test_compose_assistant.py",
    }
)
ENGINE_UNIT = "tests/<docker engine>"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class EngineFilesFirst(LoadFileScheduling):  # type: ignore[misc]  # xdist is untyped
    """Load by file, with the engine files as one unit."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the collection's order is kept

    def _split_scope(self, nodeid: str) -> str:
        path = file_of(nodeid)
        return ENGINE_UNIT if path in ENGINE_FILES else path


def engine_files_first(items: list[pytest.Item]) -> None:
    """Order ``items`` as the scheduler is to hand them out: the engine files, then
    the other files from the largest, each file's tests together, in their order."""
    sizes = Counter(file_of(item.nodeid) for item in items)
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(file_of(item.nodeid), index)

    def key(index_item: tuple[int, pytest.Item]) -> tuple[bool, int, int, int]:
        index, item = index_item
        path = file_of(item.nodeid)
        return (path not in ENGINE_FILES, -sizes[path], first[path], index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
