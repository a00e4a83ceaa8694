"""``actorbus state ls|get|rm`` against a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from actorbus import Actor, handler
from actorbus.cli.main import main


class Tally(BaseModel):
    count: int = 0


class Counter(Actor):
    type_name = "cli-counter"
    state: Tally

    @handler(intent="bump")
    async def bump(self, _: str) -> int:
        self.state.count += 1
        return self.state.count


async def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))  # main runs its own event loop
    out, err = capsys.readouterr()
    return code, out, err


async def test_state_ls_get_rm(make_system: Any, nats_server: Any, ns: str, capsys: Any) -> None:
    host = await make_system()
    for key in ("a", "b"):
        await host.spawn(Counter, key)
        await host.ask(f"cli-counter/{key}", "x", intent="bump")
    await host.ask("cli-counter/a", "x", intent="bump")
    bus = ("--url", nats_server.url, "--namespace", ns)
    code, out, _ = await cli(capsys, "state", "ls", "cli-counter", *bus, "--json")
    assert code == 0
    assert json.loads(out) == ["cli-counter/a", "cli-counter/b"]
    code, out, _ = await cli(capsys, "state", "get", "cli-counter/a", *bus, "--json")
    assert code == 0
    view = json.loads(out)
    assert view["state"] == {"count": 2}
    assert (view["version"], view["sealed"]) == (1, False)
    code, out, _ = await cli(capsys, "state", "rm", "cli-counter/b", *bus)
    assert (code, "deleted") == (0, out.split()[0])
    code, _, err = await cli(capsys, "state", "get", "cli-counter/b", *bus)
    assert code == 1
    assert "cli-counter/b has no state" in err
    code, _, err = await cli(capsys, "state", "get", "cli-counter", *bus)
    assert code == 1
    assert "give type/key" in err
