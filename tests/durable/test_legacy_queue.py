"""A namespace kept by an earlier version (every type's durable messages in one
stream): refused with the way out, and moved by ``actorbus migrate`` (and by
``actorbus up`` at start) to a stream per type with nothing lost or repeated."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig
from test_durable import Entry, spawn_ledger

from actorbus.actors.sending import SendOptions
from actorbus.bus.jetstream import (
    LegacyLayoutError,
    consumer_config,
    legacy_stream_name,
    stream_name,
)
from actorbus.bus.subjects import Address
from actorbus.cli.durable import migrate_namespace
from actorbus.cli.main import main
from actorbus.testing import eventually


async def legacy_namespace(raw_nc: nats.NATS, make_system: Any, ns: str) -> None:
    """What an earlier version left: ledger/a 0..4 (0 and 1 handled), ledger/b 0..2
    (never read), all in the one stream."""
    js = raw_nc.jetstream()
    await js.add_stream(StreamConfig(name=legacy_stream_name(ns), subjects=[f"{ns}.d.>"]))
    sender = await make_system(registry=False)
    for key, count in (("a", 5), ("b", 3)):
        for n in range(count):
            addr = Address("ledger", key)
            out = sender.sender.encode(str(addr), Entry(n=n), SendOptions(), durable=True)
            await sender.runtime.mux.request(
                sender.runtime.subjects.durable(addr), out.body, out.headers, 5
            )
    reader = consumer_config(
        sender.runtime.subjects, Address("ledger", "a"), sender.runtime.durable_settings, 2
    )
    await js.add_consumer(legacy_stream_name(ns), config=reader)
    psub = await js.pull_subscribe_bind(reader.durable_name or "", legacy_stream_name(ns))
    for msg in await psub.fetch(2, timeout=5):
        await msg.ack_sync()
    await sender.close(timeout=2)


async def test_a_legacy_namespace_is_refused_then_moved_with_nothing_lost_or_repeated(
    make_system: Any, raw_nc: nats.NATS, nats_server: Any, ns: str, tmp_path: Path, capsys: Any
) -> None:
    await legacy_namespace(raw_nc, make_system, ns)
    system = await make_system(registry=False)
    with pytest.raises(LegacyLayoutError, match=f"actorbus migrate --namespace {ns}"):
        await system.tell("ledger/a", Entry(n=9), durable=True)

    said: list[str] = []

    def cut_short(text: str) -> None:  # the move dies after spooling, before the delete
        said.append(text)
        if "spooled" in text:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        await migrate_namespace(nats_server.url, ns, 5.0, tmp_path, report=cut_short)
    assert (tmp_path / "migrations" / f"{ns}.spool").exists()
    moved = await migrate_namespace(nats_server.url, ns, 5.0, tmp_path, report=said.append)
    assert moved is not None
    assert moved.resumed
    assert (moved.moved, moved.types) == (6, {"ledger": 6})
    assert not (tmp_path / "migrations" / f"{ns}.spool").exists()
    info = await raw_nc.jetstream().stream_info(stream_name(ns, "ledger"))
    assert info.state.messages == 6

    fresh = await make_system(registry=False)
    a, b = await spawn_ledger(fresh, "a"), await spawn_ledger(fresh, "b")
    await a.reached(3)
    await b.reached(3)

    async def settled() -> bool:  # every moved message acked: no repeat can follow
        stats = [await fresh.queue_stats(f"ledger/{k}") for k in ("a", "b")]
        return all(s.pending == 0 and s.in_flight == 0 for s in stats)

    await eventually(settled, what="the moved messages acked")
    assert (a.seen, b.seen) == ([2, 3, 4], [0, 1, 2])

    # Run again (from the command line): nothing left to move.
    code = await asyncio.to_thread(
        main, ["migrate", "--url", nats_server.url, "--namespace", ns, "--home", str(tmp_path)]
    )
    assert code == 0
    assert "nothing to move" in capsys.readouterr().out


async def test_a_move_counts_what_was_handled_already(
    make_system: Any, raw_nc: nats.NATS, nats_server: Any, ns: str, tmp_path: Path
) -> None:
    await legacy_namespace(raw_nc, make_system, ns)
    moved = await migrate_namespace(nats_server.url, ns, 5.0, tmp_path)
    assert moved is not None
    assert not moved.resumed
    assert (moved.moved, moved.settled, moved.lost_originals) == (6, 2, 0)
    streams = [i.config.name for i in await raw_nc.jetstream().streams_info()]
    assert legacy_stream_name(ns) not in streams


async def test_a_queue_made_to_take_schedules_is_refused_then_rebuilt(
    make_system: Any, raw_nc: nats.NATS, nats_server: Any, ns: str, tmp_path: Path
) -> None:
    """The version before kept each type's reminders in its durable queue, whose
    stream then took message schedules: one schedule message from any sender
    purged a key's waiting messages. Such a queue is refused, and migrate
    rebuilds it with its unsettled messages."""
    js = raw_nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name=stream_name(ns, "ledger"),
            subjects=[f"{ns}.d.ledger.*", f"{ns}.rem.ledger.>"],
            allow_msg_schedules=True,
        )
    )
    sender = await make_system(registry=False)
    for n in range(3):
        addr = Address("ledger", "s")
        out = sender.sender.encode(str(addr), Entry(n=n), SendOptions(), durable=True)
        await sender.runtime.mux.request(
            sender.runtime.subjects.durable(addr), out.body, out.headers, 5
        )
    system = await make_system(registry=False)
    with pytest.raises(LegacyLayoutError, match=f"actorbus migrate --namespace {ns}"):
        await spawn_ledger(system, "s")
    moved = await migrate_namespace(nats_server.url, ns, 5.0, tmp_path)
    assert moved is not None
    assert (moved.moved, moved.types) == (3, {"ledger": 3})
    info = await js.stream_info(stream_name(ns, "ledger"))
    assert not info.config.allow_msg_schedules
    assert info.config.subjects == [f"{ns}.d.ledger.*"]
    fresh = await make_system(registry=False)
    progress = await spawn_ledger(fresh, "s")
    await progress.reached(3)
    assert progress.seen == [0, 1, 2]
    assert await migrate_namespace(nats_server.url, ns, 5.0, tmp_path) is None  # done
