"""`actorbus run` and `actorbus state` with state kept in PostgreSQL
(`--state-store postgresql://...`), in separate processes, on a real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _cli import cli

from actorbus.bus.server import EmbeddedServer

LEDGER = """
from pydantic import BaseModel

from actorbus import Actor, handler


class Book(BaseModel):
    balance: int = 0


class Ledger(Actor):
    state: Book

    @handler(intent="add")
    async def add(self, amount: dict) -> int:
        self.state.balance += int(amount["n"])
        return self.state.balance
"""


async def finished(*args: str, env: dict[str, str], cwd: Path) -> tuple[int | None, str, str]:
    async with cli(*args, env=env, cwd=cwd) as p:
        out = [line async for line in _lines(p)]
        return await p.proc.wait(), "".join(out), p.stderr


async def _lines(p: Any) -> Any:
    assert p.proc.stdout is not None
    while line := await p.proc.stdout.readline():
        yield line.decode()


async def test_a_host_keeps_state_in_postgresql_and_the_state_command_reads_it(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path, postgres_dsn: str
) -> None:
    (tmp_path / "ledger_agent.py").write_text(LEDGER)
    env = {"ACTORBUS_URL": nats_server.url}
    store = ("--state-store", postgres_dsn, "--namespace", ns)
    caller = await make_system()
    async with cli("run", "ledger_agent:Ledger", *store, env=env, cwd=tmp_path) as host:
        await host.wait_for_line("ready")
        for n in (5, 7):
            last = await caller.ask("ledger/ann", {"n": n}, intent="add")
        assert last == 12
        assert await host.terminate() == 0, host.stderr
    # a new host on the same store: the balance is where the last one left it
    env_store = {**env, "ACTORBUS_STATE_STORE": postgres_dsn}  # the variable does the same
    args = ("run", "ledger_agent:Ledger", "--namespace", ns)
    async with cli(*args, env=env_store, cwd=tmp_path) as host:
        await host.wait_for_line("ready")
        assert await caller.ask("ledger/ann", {"n": 1}, intent="add") == 13
        assert await host.terminate() == 0, host.stderr

    code, out, err = await finished(
        "state", "ls", "ledger", *store, "--json", env=env, cwd=tmp_path
    )
    assert (code, json.loads(out)) == (0, ["ledger/ann"]), err
    code, out, err = await finished(
        "state", "get", "ledger/ann", *store, "--json", env=env, cwd=tmp_path
    )
    assert code == 0, err
    assert json.loads(out)["state"] == {"balance": 13}
    # the bus's own store never held it
    code, _, err = await finished(
        "state", "get", "ledger/ann", "--namespace", ns, env=env, cwd=tmp_path
    )
    assert code == 1
    assert "ledger/ann has no state" in err
    code, out, err = await finished("state", "rm", "ledger/ann", *store, env=env, cwd=tmp_path)
    assert code == 0, err
    code, out, _ = await finished("state", "ls", "ledger", *store, "--json", env=env, cwd=tmp_path)
    assert (code, json.loads(out)) == (0, [])


async def test_a_state_store_that_cannot_be_used_is_said_as_the_host_starts(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    (tmp_path / "ledger_agent.py").write_text(LEDGER)
    env = {"ACTORBUS_URL": nats_server.url}
    run = ("run", "ledger_agent:Ledger", "--namespace", ns)
    code, _, err = await finished(
        *run, "--state-store", "redis://user:pw@127.0.0.1/0", env=env, cwd=tmp_path
    )
    assert code == 2
    assert "give a postgresql:// URL" in err
    assert "pw" not in err  # a password in the URL is never echoed
    code, _, err = await finished(
        *run, "--state-store", "postgresql://app@127.0.0.1:1/app", env=env, cwd=tmp_path
    )
    assert code == 1
    assert "cannot reach the state database" in err
