"""`actorbus registry ls|show|watch` against a real server and live actor systems."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from actorbus import Actor, handler
from actorbus.cli import main


class Doc(BaseModel):
    text: str


class Indexer(Actor):
    """Indexes documents."""

    skills = ("index", "search")
    tags = ("docs",)

    @handler
    async def index(self, d: Doc) -> None: ...


async def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))  # main runs its own event loop
    out, err = capsys.readouterr()
    return code, out, err


async def test_registry_ls_and_show(make_system, nats_server: Any, ns: str, capsys: Any) -> None:
    host = await make_system()
    await host.spawn(Indexer, "i")
    await host.directory.announced()
    bus = ("--url", nats_server.url, "--namespace", ns)

    code, out, _ = await cli(capsys, "registry", "ls", *bus, "--json")
    assert code == 0
    [listing] = json.loads(out)
    assert listing["name"] == "indexer"
    assert listing["skills"] == ["index", "search"]
    assert listing["healthy"] is True

    code, out, _ = await cli(capsys, "registry", "ls", *bus, "--skill", "translate", "--json")
    assert json.loads(out) == []
    code, out, _ = await cli(capsys, "registry", "ls", *bus)
    assert "indexer" in out
    assert "1 agent(s)" in out

    code, out, _ = await cli(capsys, "registry", "show", "indexer", *bus)
    assert json.loads(out)["agent_info"]["actorbus"]["description"] == "Indexes documents."
    code, _, err = await cli(capsys, "registry", "show", "nobody", *bus)
    assert code == 1
    assert "nothing is registered as 'nobody'" in err


async def test_registry_watch_prints_the_list_again_at_a_change(
    make_system, nats_server: Any, ns: str, capsys: Any
) -> None:
    host = await make_system()
    bus = ("--url", nats_server.url, "--namespace", ns)
    watching = asyncio.create_task(
        cli(capsys, "registry", "watch", *bus, "--json", "--changes", "1")
    )
    n = 0
    while not watching.done():  # changes until the watcher, once waiting, sees one
        n += 1
        kind = type(f"Kind{n}", (Indexer,), {"type_name": f"kind-{n}"})
        await host.spawn(kind, "k")
        await host.directory.announced()
        await asyncio.wait({watching}, timeout=0.2)
        assert n < 50, "watch never noticed a change"
    code, out, _ = await watching
    assert code == 0
    lists = [json.loads(line) for line in _json_documents(out)]
    assert len(lists) == 2
    assert len(lists[1]) > len(lists[0])


def _json_documents(text: str) -> list[str]:
    """Split concatenated pretty-printed JSON documents."""
    decoder, docs, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        _, end = decoder.raw_decode(text, i)
        docs.append(text[i:end])
        i = end
    return docs
