"""``actorbus state ls|get|rm`` against a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from _actors import Counted

from actorbus.cli.main import main


async def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))  # main runs its own event loop
    out, err = capsys.readouterr()
    return code, out, err


async def test_state_ls_get_rm(make_system: Any, nats_server: Any, ns: str, capsys: Any) -> None:
    host = await make_system()
    for key in ("a", "b"):
        await host.spawn(Counted, key)
        await host.ask(f"counted/{key}", "x", intent="bump")
    await host.ask("counted/a", "x", intent="bump")
    bus = ("--url", nats_server.url, "--namespace", ns)
    code, out, _ = await cli(capsys, "state", "ls", "counted", *bus, "--json")
    assert code == 0
    assert json.loads(out) == ["counted/a", "counted/b"]
    code, out, _ = await cli(capsys, "state", "get", "counted/a", *bus, "--json")
    assert code == 0
    view = json.loads(out)
    assert view["state"] == {"count": 2}
    assert (view["version"], view["sealed"]) == (1, False)
    code, out, _ = await cli(capsys, "state", "rm", "counted/b", *bus)
    assert (code, "deleted") == (0, out.split()[0])
    code, _, err = await cli(capsys, "state", "get", "counted/b", *bus)
    assert code == 1
    assert "counted/b has no state" in err
    code, _, err = await cli(capsys, "state", "get", "counted", *bus)
    assert code == 1
    assert "give type/key" in err


async def test_after_rm_a_running_activation_stops_and_its_next_message_starts_afresh(
    make_system: Any, nats_server: Any, ns: str, capsys: Any
) -> None:
    """The activation still holding the deleted state cannot write it back: its next
    turn fails saying why and it stops; the next message activates it again."""
    import pytest

    from actorbus.codecs.errors import StateConflictError

    host = await make_system()
    await host.register(Counted)
    for _ in range(3):
        await host.ask("counted/r", "x", intent="bump")
    bus = ("--url", nats_server.url, "--namespace", ns)
    code, _, _ = await cli(capsys, "state", "rm", "counted/r", *bus)
    assert code == 0
    with pytest.raises(StateConflictError, match="written by another activation, or deleted"):
        await host.ask("counted/r", "x", intent="bump")
    await host.ask("counted/r", "x", intent="bump")
    code, out, _ = await cli(capsys, "state", "get", "counted/r", *bus, "--json")
    assert json.loads(out)["state"] == {"count": 1}
