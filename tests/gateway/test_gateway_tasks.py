"""The gateway's task state machine and its SQLite store, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorbus.codecs.tasks import (
    Artifact,
    Message,
    Part,
    Task,
    TaskState,
    TaskStatus,
    appended,
)
from actorbus.services.gateway.store import Run, TaskQuery, TaskStore
from actorbus.services.gateway.tasks import (
    TRANSITIONS,
    IllegalTransitionError,
    can_transition,
    check_transition,
)

S = TaskState
TERMINAL = (S.COMPLETED, S.FAILED, S.CANCELED, S.REJECTED)


def test_every_state_has_its_transitions() -> None:
    assert set(TRANSITIONS) == set(TaskState)
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
        for wanted in TaskState:
            with pytest.raises(IllegalTransitionError, match=f"from {state.value}"):
                check_transition("t1", state, wanted)


@pytest.mark.parametrize(
    ("current", "wanted", "legal"),
    [
        (S.SUBMITTED, S.WORKING, True),
        (S.SUBMITTED, S.REJECTED, True),
        (S.SUBMITTED, S.COMPLETED, True),
        (S.WORKING, S.WORKING, True),
        (S.WORKING, S.INPUT_REQUIRED, True),
        (S.WORKING, S.CANCELED, True),
        (S.WORKING, S.SUBMITTED, False),
        (S.WORKING, S.REJECTED, True),  # it cannot proceed after all
        (S.INPUT_REQUIRED, S.SUBMITTED, True),
        (S.INPUT_REQUIRED, S.COMPLETED, False),
        (S.AUTH_REQUIRED, S.WORKING, True),
        (S.AUTH_REQUIRED, S.CANCELED, True),
        (S.COMPLETED, S.CANCELED, False),
        (S.CANCELED, S.COMPLETED, False),  # a late reply after a cancel changes nothing
    ],
)
def test_transitions(current: TaskState, wanted: TaskState, legal: bool) -> None:
    assert can_transition(current, wanted) is legal
    if legal:
        check_transition("t1", current, wanted)
    else:
        with pytest.raises(IllegalTransitionError) as info:
            check_transition("t1", current, wanted)
        assert info.value.code == "E_UNSUPPORTED"
        assert (info.value.current, info.value.wanted) == (current, wanted)


def test_a_streams_text_joins_the_text_before_it_and_nothing_else() -> None:
    def text(value: str, **extra: object) -> Part:
        return Part(kind="text", value=value, **extra)  # type: ignore[arg-type]

    data = Part(kind="data", value={"n": 1})
    first = [text("You ")]
    after = appended(first, [text("ordered ")])
    assert after == [text("You ordered ")]
    assert first == [text("You ")]  # the parts given are not changed
    assert appended(after, [text("tea."), data, text("x")]) == [
        text("You ordered tea."),
        data,
        text("x"),
    ]
    assert appended([data], [text("a")]) == [data, text("a")]
    # text that says more than its words (a media type, metadata) stays its own part
    marked = text("# Title", media_type="text/markdown")
    assert appended([text("a")], [marked]) == [text("a"), marked]
    noted = text("b", metadata={"source": "x"})
    assert appended([noted], [text("c")]) == [noted, text("c")]
    assert appended([], [text("a")]) == [text("a")]


async def test_store_round_trips_tasks_runs_and_conversations(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "gw.db"
    store = await TaskStore.open(db)
    user = Message(message_id="m1", role="user", parts=[Part(kind="text", value="hi")])
    task = Task(
        id="t1",
        context_id="c1",
        status=TaskStatus(state=S.COMPLETED, timestamp="2026-11-23T08:00:00.000Z"),
        history=[user],
        artifacts=[
            Artifact(
                artifact_id="a1",
                parts=[Part(kind="raw", value=b"\x00\x01"), Part(kind="data", value={"k": [1]})],
            )
        ],
        metadata={"gateway": {"agent": "echo"}},
    )
    await store.save_task(task, agent="echo", protocol="a2a")
    await store.save_run(Run("r1", "t1", "ask", "echo", "text", "completed", 1, 2))
    await store.touch_conversation("c1", agent="echo", protocol="a2a")
    await store.touch_conversation("c1", agent="echo", protocol="a2a")
    await store.close()

    again = await TaskStore.open(db)
    try:
        stored = await again.get_task("t1")
        assert stored is not None
        assert stored.task == task  # bytes, data and history come back exactly
        assert (stored.agent, stored.protocol) == ("echo", "a2a")
        assert await again.get_task("nope") is None
        assert [r.state for r in await again.runs_of("t1")] == ["completed"]
        conv = await again.get_conversation("c1", "echo")
        assert conv is not None
        assert conv.turns == 2
        found, total = await again.list_tasks(TaskQuery(agent="echo", state=S.COMPLETED))
        assert total == 1
        assert [t.task.id for t in found] == ["t1"]
        assert (await again.list_tasks(TaskQuery(agent="other")))[1] == 0
        assert await again.stats() == {"tasks": 1, "runs": 1, "conversations": 1}
    finally:
        await again.close()


async def test_a_store_of_schema_1_is_converted_when_opened(tmp_path: Path) -> None:
    """A gateway before the neutral task model kept tasks as A2A 1.0 JSON: its
    store opens, the tasks read back exactly, and saving one works as before."""
    import json

    import aiosqlite

    from actorbus.codecs.a2a.errors import V10
    from actorbus.codecs.a2a.wire import task_to_wire

    db = tmp_path / "old.db"
    store = await TaskStore.open(db)
    await store.close()
    task = Task(
        id="t1",
        context_id="c1",
        status=TaskStatus(state=S.INPUT_REQUIRED, timestamp="2026-11-23T08:00:00.000Z"),
        artifacts=[Artifact(artifact_id="a1", parts=[Part(kind="raw", value=b"\x00\x01")])],
    )
    body = json.dumps(task_to_wire(task, V10))
    async with aiosqlite.connect(db) as old:  # as schema 1 wrote it
        await old.execute(
            "INSERT INTO tasks (id, agent, protocol, context_id, state, created_ms,"
            " updated_ms, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ("t1", "echo", "acp", "c1", "input-required", 1, 2, body),
        )
        await old.execute("PRAGMA user_version=1")
        await old.commit()

    again = await TaskStore.open(db)
    try:
        stored = await again.get_task("t1")
        assert stored is not None
        assert stored.task == task
        assert stored.protocol == "acp"
        done = Task(id="t2", status=TaskStatus(state=S.COMPLETED))
        await again.save_task(done, agent="echo", protocol="mcp")
        found = await again.get_task("t2")
        assert found is not None
        assert found.task == done
    finally:
        await again.close()
