"""`actorbus dlq ...` and `actorbus queue ...` against a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.cli import main

FAST = DurableSettings(backoff=(0.02, 0.02), ack_wait=5.0)


class Job(BaseModel):
    n: int


class Grumpy(Actor):
    durable = True

    @handler
    async def work(self, job: Job) -> None:
        raise ValueError(f"job {job.n} refused")


async def make_dead_letter(url: str, ns: str) -> None:
    system = await ActorSystem.connect(url, namespace=ns, durable=FAST)
    try:
        await system.spawn(Grumpy, "1")
        await system.tell("grumpy/1", Job(n=5), durable=True)

        async def poll() -> None:  # a bounded poll of the broker's state
            while True:
                if await system.dead_letters("grumpy/1"):
                    return
                await asyncio.sleep(0.05)

        await asyncio.wait_for(poll(), 10)
        await system.stop_actor("grumpy/1")
        await system.tell("grumpy/1", Job(n=6), durable=True)  # waits in the queue
        await system.reminders.set("grumpy/1", "later", Job(n=7), after=3600)
    finally:
        await system.close()


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_dlq_and_queue_commands(nats_server: Any, ns: str, capsys: Any) -> None:
    url = nats_server.url
    asyncio.run(make_dead_letter(url, ns))
    bus = ("--url", url, "--namespace", ns)

    letters = run_json(capsys, "dlq", "ls", *bus, "--json")
    assert len(letters) == 1
    assert letters[0]["address"] == "grumpy/1"
    assert letters[0]["attempts"] == FAST.max_deliver
    assert "job 5 refused" in letters[0]["reason"]

    shown = run_json(capsys, "dlq", "show", str(letters[0]["seq"]), *bus, "--json")
    assert shown["envelope"]["content"] == {"n": 5}

    stats = run_json(capsys, "queue", "grumpy/1", *bus, "--json")
    assert stats["pending"] == 1  # job 6, waiting for the actor to come back
    [reminder] = stats["reminders"]
    assert (reminder["address"], reminder["name"]) == ("grumpy/1", "later")
    assert reminder["schedule"].startswith("@at ")
    assert main(["queue", "grumpy", *bus]) == 0  # the type's: every key's reminders
    assert "reminders of grumpy" in capsys.readouterr().out

    assert main(["dlq", "drop", str(letters[0]["seq"]), *bus]) == 0
    assert "dropped dead letter" in capsys.readouterr().out
    assert run_json(capsys, "dlq", "ls", *bus, "--json") == []
    assert main(["dlq", "drop", str(letters[0]["seq"]), *bus]) == 1
    assert "no dead letter" in capsys.readouterr().err
    assert main(["dlq", "show", *bus]) == 2  # no seq


def test_history_and_rerun_commands(nats_server: Any, ns: str, capsys: Any) -> None:
    url = nats_server.url
    bus = ("--url", url, "--namespace", ns)

    async def store() -> None:
        async with await ActorSystem.connect(url, namespace=ns) as system:
            for n in range(3):
                await system.tell("grumpy/h", Job(n=n), durable=True, session_id="s")

    asyncio.run(store())
    stored = run_json(capsys, "history", "grumpy/h", *bus, "--json")
    assert [m["content"] for m in stored] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert main(["history", "--session", "s", *bus]) == 0
    table = capsys.readouterr().out
    assert "3 stored message(s)" in table
    for m in stored:  # whole ids in the table, never cut to 80 columns when piped
        assert m["id"] in table

    # nobody ever read grumpy/h: its queue counts what waits for it in the stream
    waiting = run_json(capsys, "queue", "grumpy/h", *bus, "--json")
    assert waiting["pending"] == 3
    assert waiting["started"] is False
    assert waiting["reading"] is False
    assert main(["queue", "nosuch/1", *bus]) == 1  # nothing stored, no reader: an error
    assert "no durable queue for nosuch/1" in capsys.readouterr().err

    done = run_json(capsys, "history", "grumpy/h", *bus, "--rerun-to", "grumpy/v2", "--json")
    assert done == {"sent": 3, "to": "grumpy/v2"}
    again = run_json(capsys, "history", "grumpy/v2", *bus, "--json")
    assert [m["content"] for m in again] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert main(["history", *bus]) == 1  # no address, session or topic
    assert "exactly one of" in capsys.readouterr().err


def test_history_opens_what_this_machine_holds_the_key_for_and_sizes_the_rest(
    actorbus_home: Any, ns: str, capsys: Any
) -> None:
    """On a secured bus a message to vault/1 is sealed to vault's key. On a machine
    whose home holds that key (vault's hosts run there) history shows the content;
    where it does not, it lists the message by its size (it used to crash on the
    bytes)."""
    from actorbus.bus.server import EmbeddedServer, ServerConfig
    from actorbus.security.secure_broker import SecureBroker
    from actorbus.security.settings import default_home

    extra = SecureBroker().server_config([ns])
    with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:

        async def store() -> None:
            async with ActorSystem.connect(server.url, namespace=ns) as system:
                await system.tell("vault/1", Job(n=1), durable=True)

        asyncio.run(store())
        bus = ("--url", server.url, "--namespace", ns)
        opened = run_json(capsys, "history", "vault/1", *bus, "--json")
        assert [m["content"] for m in opened] == [{"n": 1}]
        key = default_home(ns) / "types" / "vault.key"
        key.rename(key.with_suffix(".away"))  # as on a machine that hosts no vault
        stored = run_json(capsys, "history", "vault/1", *bus, "--json")
        assert len(stored) == 1
        assert stored[0]["meta"]["cipher"] == "A256GCM"
        assert stored[0]["content"].startswith("<sealed: ")
        assert main(["history", "vault/1", *bus]) == 0
        assert "1 stored message(s)" in capsys.readouterr().out
