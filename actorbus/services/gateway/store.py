"""Where the gateway keeps tasks, runs and conversations: one SQLite file.

Tables (created on first open; ``PRAGMA user_version`` numbers the schema):

- ``tasks``: one row per task, the columns the gateway searches by (agent,
  protocol, context, state, times) and the whole task (status, history,
  artifacts, metadata) in ``body``: the protocol-neutral task
  (:mod:`actorbus.codecs.tasks`) as msgpack, so nothing is lost when an edge of
  another protocol reads it back. (Schema 1 kept it as A2A 1.0 JSON; a store
  of that schema is converted when it is opened.)
- ``runs``: one row per actor call made for a task (ask or stream): address,
  intent, state (running, completed, failed, canceled), error, times.
- ``conversations``: one row per (context id, agent): the multi-turn session
  whose id travels to the actor as the envelope's ``context.session_id``.

WAL journal, one connection (aiosqlite runs it on its own thread), a commit
after each write: what a client was told survives a gateway restart.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiosqlite
import msgspec

from actorbus.codecs.tasks import Task, TaskState

log = logging.getLogger("actorbus.gateway")

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    protocol TEXT NOT NULL,
    context_id TEXT,
    state TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_agent ON tasks (agent, updated_ms);
CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (context_id, updated_ms);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    address TEXT NOT NULL,
    intent TEXT NOT NULL,
    state TEXT NOT NULL,
    error_code TEXT,
    error_message TEXT,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_task ON runs (task_id, started_ms);
CREATE TABLE IF NOT EXISTS conversations (
    context_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    protocol TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (context_id, agent)
);
"""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TaskQuery:
    """Which tasks to list: every filter given must match; a page of ``limit``
    from ``offset`` (newest first)."""

    agent: str | None = None
    context_id: str | None = None
    state: TaskState | None = None
    updated_after_ms: int | None = None
    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class StoredTask:
    task: Task
    agent: str
    protocol: str
    created_ms: int
    updated_ms: int


@dataclass(frozen=True)
class Run:
    """One actor call made for a task."""

    id: str
    task_id: str
    kind: str  # "ask" | "stream" | "tell" (a durable intent: stored, handled once)
    address: str
    intent: str
    state: str  # "running" | "completed" | "failed" | "canceled"
    started_ms: int
    ended_ms: int | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class Conversation:
    context_id: str
    agent: str
    protocol: str
    created_ms: int
    updated_ms: int
    turns: int


_TASK_ENCODER: Final = msgspec.msgpack.Encoder()
_TASK_DECODER: Final = msgspec.msgpack.Decoder(Task)


def _task_body(task: Task) -> bytes:
    return _TASK_ENCODER.encode(task)


def _task_of(body: bytes) -> Task:
    return _TASK_DECODER.decode(body)


async def _from_schema_1(db: aiosqlite.Connection) -> int:
    """Schema 1 kept each task as A2A 1.0 JSON: each becomes the neutral task, in
    the transaction that opens the store; how many."""
    from actorbus.codecs.a2a.errors import V10
    from actorbus.codecs.a2a.wire import result_from_wire

    async with db.execute("SELECT id, body FROM tasks") as cursor:
        rows = list(await cursor.fetchall())
    for task_id, body in rows:
        result, _ = result_from_wire(json.loads(body), V10, where="stored task")
        assert isinstance(result, Task)
        await db.execute("UPDATE tasks SET body = ? WHERE id = ?", (_task_body(result), task_id))
    return len(rows)


class TaskStore:
    """The gateway's SQLite database (``await TaskStore.open(path)``)."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    async def open(cls, path: str | Path) -> TaskStore:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        db = await aiosqlite.connect(p)
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=NORMAL")
            async with db.execute("PRAGMA user_version") as cursor:
                row = await cursor.fetchone()
            found = int(row[0]) if row else 0
            await db.executescript(_SCHEMA)
            if found == 1:
                converted = await _from_schema_1(db)
                log.info("gateway store %s: %d task(s) moved to schema 2", p, converted)
            await db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            await db.commit()
        except BaseException:
            await db.close()
            raise
        return cls(db, p)

    async def close(self) -> None:
        await self.db.close()

    # -- tasks ---------------------------------------------------------------------
    async def save_task(self, task: Task, *, agent: str, protocol: str) -> None:
        """Insert or replace ``task`` (its created time is kept on replace)."""
        await self._put_task(task, agent, protocol)
        await self.db.commit()

    async def save(
        self,
        *,
        task: tuple[Task, str, str] | None = None,
        run: Run | None = None,
        conversation: tuple[str, str, str] | None = None,
    ) -> None:
        """Several changes in one transaction (one commit, one fsync): a task with
        its agent and protocol, a run, a conversation turn (context, agent, protocol)."""
        if task is not None:
            await self._put_task(*task)
        if run is not None:
            await self._put_run(run)
        if conversation is not None:
            await self._put_turn(*conversation)
        await self.db.commit()

    async def _put_task(self, task: Task, agent: str, protocol: str) -> None:
        now = now_ms()
        await self.db.execute(
            "INSERT INTO tasks (id, agent, protocol, context_id, state, created_ms,"
            " updated_ms, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET state=excluded.state,"
            " context_id=excluded.context_id, updated_ms=excluded.updated_ms,"
            " body=excluded.body",
            (
                task.id,
                agent,
                protocol,
                task.context_id,
                task.status.state.value,
                now,
                now,
                _task_body(task),
            ),
        )

    async def get_task(self, task_id: str) -> StoredTask | None:
        async with self.db.execute(
            "SELECT body, agent, protocol, created_ms, updated_ms FROM tasks WHERE id = ?",
            (task_id,),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return StoredTask(_task_of(row[0]), row[1], row[2], row[3], row[4])

    async def list_tasks(self, query: TaskQuery) -> tuple[list[StoredTask], int]:
        """Tasks matching every filter of ``query``, newest first, and how many match."""
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("agent", query.agent), ("context_id", query.context_id)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if query.state is not None:
            where.append("state = ?")
            args.append(query.state.value)
        if query.updated_after_ms is not None:
            where.append("updated_ms > ?")
            args.append(query.updated_after_ms)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        async with self.db.execute(f"SELECT count(*) FROM tasks{clause}", args) as cur:
            row = await cur.fetchone()
        total = int(row[0]) if row else 0
        async with self.db.execute(
            "SELECT body, agent, protocol, created_ms, updated_ms FROM tasks"
            f"{clause} ORDER BY updated_ms DESC, id LIMIT ? OFFSET ?",
            [*args, query.limit, query.offset],
        ) as cur:
            rows = await cur.fetchall()
        return [StoredTask(_task_of(r[0]), r[1], r[2], r[3], r[4]) for r in rows], total

    async def unfinished_tasks(self) -> list[StoredTask]:
        """Tasks a previous gateway was working on (submitted or working)."""
        states = (TaskState.SUBMITTED.value, TaskState.WORKING.value)
        async with self.db.execute(
            "SELECT body, agent, protocol, created_ms, updated_ms FROM tasks WHERE state IN (?, ?)",
            states,
        ) as cur:
            rows = await cur.fetchall()
        return [StoredTask(_task_of(r[0]), r[1], r[2], r[3], r[4]) for r in rows]

    # -- runs ----------------------------------------------------------------------
    async def save_run(self, run: Run) -> None:
        await self._put_run(run)
        await self.db.commit()

    async def _put_run(self, run: Run) -> None:
        await self.db.execute(
            "INSERT OR REPLACE INTO runs (id, task_id, kind, address, intent, state,"
            " error_code, error_message, started_ms, ended_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.id,
                run.task_id,
                run.kind,
                run.address,
                run.intent,
                run.state,
                run.error_code,
                run.error_message,
                run.started_ms,
                run.ended_ms,
            ),
        )

    async def runs_of(self, task_id: str) -> list[Run]:
        async with self.db.execute(
            "SELECT id, task_id, kind, address, intent, state, started_ms, ended_ms,"
            " error_code, error_message FROM runs WHERE task_id = ? ORDER BY started_ms, id",
            (task_id,),
        ) as cur:
            rows = await cur.fetchall()
        return [Run(*r) for r in rows]

    async def unfinished_runs(self) -> list[Run]:
        async with self.db.execute(
            "SELECT id, task_id, kind, address, intent, state, started_ms, ended_ms,"
            " error_code, error_message FROM runs WHERE state = 'running'"
        ) as cur:
            rows = await cur.fetchall()
        return [Run(*r) for r in rows]

    # -- conversations -------------------------------------------------------------
    async def touch_conversation(self, context_id: str, *, agent: str, protocol: str) -> None:
        """Count one more turn of a conversation (created on its first)."""
        await self._put_turn(context_id, agent, protocol)
        await self.db.commit()

    async def _put_turn(self, context_id: str, agent: str, protocol: str) -> None:
        now = now_ms()
        await self.db.execute(
            "INSERT INTO conversations (context_id, agent, protocol, created_ms, updated_ms,"
            " turns) VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(context_id, agent) DO UPDATE"
            " SET updated_ms=excluded.updated_ms, turns=turns + 1",
            (context_id, agent, protocol, now, now),
        )

    async def get_conversation(self, context_id: str, agent: str) -> Conversation | None:
        async with self.db.execute(
            "SELECT context_id, agent, protocol, created_ms, updated_ms, turns"
            " FROM conversations WHERE context_id = ? AND agent = ?",
            (context_id, agent),
        ) as cur:
            row = await cur.fetchone()
        return Conversation(*row) if row else None

    async def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for table in ("tasks", "runs", "conversations"):
            async with self.db.execute(f"SELECT count(*) FROM {table}") as cur:
                row = await cur.fetchone()
            out[table] = int(row[0]) if row else 0
        return out
