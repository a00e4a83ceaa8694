"""Failed fetches are said when they last: a blink (a consumer's leader being
elected on a cluster) stays at debug level; a run of failures past the grace is
a warning, repeated while it lasts, and its end is said."""

from __future__ import annotations

import logging
from typing import Any

from actorbus.bus.fetch_failures import FetchFailures

log = logging.getLogger("actorbus.test.fetch")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def said(caplog: Any) -> list[tuple[int, str]]:
    out = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == log.name]
    caplog.clear()
    return out


def test_a_blink_is_not_a_warning(caplog: Any) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    clock = Clock()
    failures = FetchFailures("t/*: the durable fetch", log, grace=10.0, clock=clock)
    for _ in range(5):
        failures.failed(ConnectionError("503"))
        clock.now += 1.5
    assert failures.failing_for == 7.5
    failures.worked()
    assert failures.failing_for == 0.0
    lines = said(caplog)
    assert [level for level, _ in lines] == [logging.DEBUG] * 6
    assert "t/*: the durable fetch failed after 0.0s" in lines[0][1]
    assert "works again after 7.5s" in lines[-1][1]


def test_failures_that_last_warn_again_while_they_last_and_say_when_they_end(
    caplog: Any,
) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    clock = Clock()
    failures = FetchFailures("t/*: the durable fetch", log, grace=10.0, repeat=60.0, clock=clock)
    warnings = []
    for _ in range(150):  # 150 s of failures, one a second
        failures.failed(ConnectionError("503"))
        warnings += [text for level, text in said(caplog) if level == logging.WARNING]
        clock.now += 1.0
    assert warnings == [
        "t/*: the durable fetch has failed for 10s: ConnectionError('503')",
        "t/*: the durable fetch has failed for 70s: ConnectionError('503')",
        "t/*: the durable fetch has failed for 130s: ConnectionError('503')",
    ]
    failures.worked()
    assert said(caplog) == [
        (logging.WARNING, "t/*: the durable fetch works again after 150s of failures")
    ]
    # a fresh run starts its grace again
    failures.failed(ConnectionError("503"))
    clock.now += 11.0
    failures.worked()
    assert [level for level, _ in said(caplog)] == [logging.DEBUG, logging.DEBUG]


def test_working_fetches_say_nothing(caplog: Any) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    failures = FetchFailures("t/*: the durable fetch", log)
    for _ in range(3):
        failures.worked()
    assert said(caplog) == []
