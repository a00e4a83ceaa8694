"""Actor state in PostgreSQL, for teams whose state lives in a database
(``pip install 'actorbus[postgres]'``: asyncpg).

One table (``actorbus_state`` unless named otherwise), a row per actor:
``(namespace, type, key)``, the sealed value, a revision, when it was written
and when it expires. Revisions come from one sequence, so they only ever grow,
also across a delete and a new first write (a stale writer's revision can never
match again). A write is compare-and-set on the revision in one statement; an
expired row counts as absent and is swept away as rows are listed. The table and
sequence are made on first use. Only the current value is kept (the key-value
store can keep more revisions).

::

    store = PostgresStateStore("postgresql://app@db/app", namespace="ab")
    system = await ActorSystem.connect(url, state=StateSettings(store=store))
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from actorbus.codecs.errors import StateError, StateTooLargeError
from actorbus.extras import require
from actorbus.state.store import StoredState, revision_conflict

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresStateStore:
    """:class:`~actorbus.state.store.StateStore` on a PostgreSQL table."""

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str = "ab",
        table: str = "actorbus_state",
        ttl: float | None = None,
        max_size: int = 16 * 1024 * 1024,
        pool_size: int = 4,
    ) -> None:
        if not _NAME.match(table):
            raise ValueError(f"table name {table!r}: lowercase letters, digits and '_' only")
        self.namespace = namespace
        self._dsn = dsn
        self._table = table
        self._ttl = ttl
        self._max_size = max_size
        self._pool_size = pool_size
        self._pool: Any = None
        self._lock = asyncio.Lock()

    @property
    def max_size(self) -> int:
        return self._max_size

    async def open(self) -> None:
        """Connect now and make the table if missing (else done on first use), so
        a host finds a wrong URL or a database it cannot reach as it starts.
        StateError says why."""
        await self._connected()

    async def _connected(self) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is None:
                asyncpg = require("asyncpg", "postgres", "PostgresStateStore")
                try:
                    pool = await asyncpg.create_pool(
                        self._dsn, min_size=1, max_size=self._pool_size
                    )
                except (OSError, asyncpg.PostgresError) as exc:
                    raise StateError(f"cannot reach the state database: {exc}") from None
                t = self._table
                async with pool.acquire() as conn:
                    await conn.execute(
                        f"CREATE SEQUENCE IF NOT EXISTS {t}_revision;"
                        f"CREATE TABLE IF NOT EXISTS {t} ("
                        " namespace text NOT NULL, type text NOT NULL, key text NOT NULL,"
                        " revision bigint NOT NULL, data bytea NOT NULL,"
                        " written_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz,"
                        " PRIMARY KEY (namespace, type, key))"
                    )
                self._pool = pool
        return self._pool

    def _expiry(self) -> str:
        return "NULL" if self._ttl is None else f"now() + interval '{float(self._ttl)} seconds'"

    async def load(self, type_: str, key: str) -> StoredState | None:
        pool = await self._connected()
        row = await pool.fetchrow(
            f"SELECT data, revision FROM {self._table} WHERE namespace = $1 AND type = $2 "
            "AND key = $3 AND (expires_at IS NULL OR expires_at > now())",
            self.namespace,
            type_,
            key,
        )
        return None if row is None else StoredState(bytes(row["data"]), int(row["revision"]))

    async def save(self, type_: str, key: str, data: bytes, revision: int | None) -> int:
        if len(data) > self._max_size:
            raise StateTooLargeError(
                f"the state of {type_}/{key} is {len(data):,} bytes; this PostgreSQL store "
                f"takes {self._max_size:,} at most (PostgresStateStore(max_size=...))"
            )
        pool = await self._connected()
        t = self._table
        if revision is None:  # only where there is no row, or an expired one
            query = (
                f"INSERT INTO {t} AS s (namespace, type, key, revision, data, expires_at) "
                f"VALUES ($1, $2, $3, nextval('{t}_revision'), $4, {self._expiry()}) "
                "ON CONFLICT (namespace, type, key) DO UPDATE SET "
                f"revision = nextval('{t}_revision'), data = EXCLUDED.data, "
                "written_at = now(), expires_at = EXCLUDED.expires_at "
                "WHERE s.expires_at IS NOT NULL AND s.expires_at <= now() RETURNING s.revision"
            )
            args: tuple[Any, ...] = (self.namespace, type_, key, data)
        else:
            query = (
                f"UPDATE {t} SET revision = nextval('{t}_revision'), data = $4, "
                f"written_at = now(), expires_at = {self._expiry()} "
                "WHERE namespace = $1 AND type = $2 AND key = $3 AND revision = $5 "
                "AND (expires_at IS NULL OR expires_at > now()) RETURNING revision"
            )
            args = (self.namespace, type_, key, data, revision)
        new = await pool.fetchval(query, *args)
        if new is None:
            raise revision_conflict(type_, key, revision)
        return int(new)

    async def delete(self, type_: str, key: str) -> None:
        pool = await self._connected()
        await pool.execute(
            f"DELETE FROM {self._table} WHERE namespace = $1 AND type = $2 AND key = $3",
            self.namespace,
            type_,
            key,
        )

    async def keys(self, type_: str) -> AsyncIterator[str]:
        pool = await self._connected()
        await pool.execute(  # the abandoned rows go as the living ones are listed
            f"DELETE FROM {self._table} WHERE expires_at <= now()"
        )
        rows = await pool.fetch(
            f"SELECT key FROM {self._table} WHERE namespace = $1 AND type = $2 ORDER BY key",
            self.namespace,
            type_,
        )
        for row in rows:
            yield str(row["key"])

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except TimeoutError:
                pool.terminate()
