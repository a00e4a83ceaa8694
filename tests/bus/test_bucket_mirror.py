"""A bucket mirror is loaded, and a read of the current entries ends, only with every entry.

nats-py's watcher says "the initial values are all in" before any of them when the
server has delivered them all before the watcher asked how many were pending (5-7%
of starts on a bucket of 500 keys). A registry or trust mirror loaded empty would
answer "unknown" for a few milliseconds after its start."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
from nats.js.api import KeyValueConfig

from actorbus.bus.bucket_mirror import BucketMirror
from actorbus.bus.kv_watch import current_entries

KEYS = 500


async def test_every_start_of_a_mirror_holds_every_key(nats_server: Any, ns: str) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=f"{ns}-full"))
        await asyncio.gather(*(kv.put(f"k{i}", b"x" * 50) for i in range(KEYS)))
        await kv.delete("k0")
        short = []
        for start in range(60):
            seen: dict[str, bytes | None] = {}
            mirror = BucketMirror(kv, lambda k, v, *_, seen=seen: seen.__setitem__(k, v), "full")
            await mirror.start(5)
            try:
                if len(seen) != KEYS:
                    short.append((start, len(seen)))
                assert seen.get("k0", b"") is None  # a deleted key is known as deleted
            finally:
                await mirror.stop()
        assert short == [], f"starts that saw fewer than {KEYS} keys (start, keys): {short}"
    finally:
        await nc.close()


async def test_a_mirror_of_an_empty_bucket_is_loaded_at_once(nats_server: Any, ns: str) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=f"{ns}-empty"))
        mirror = BucketMirror(kv, lambda *_: None, "empty")
        await mirror.start(2)
        await mirror.stop()
    finally:
        await nc.close()


async def test_every_read_of_the_current_entries_gives_every_live_key(
    nats_server: Any, ns: str
) -> None:
    """What ``actorbus state list`` reads (nats-py's ``keys()`` raised
    ``NoKeysError`` on a full bucket in 5-7% of the reads)."""
    nc = await nats.connect(nats_server.url)
    try:
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=f"{ns}-read"))
        await asyncio.gather(*(kv.put(f"t.k{i}", b"x") for i in range(KEYS)))
        await kv.put("other.k", b"x")
        await kv.delete("t.k0")
        await kv.purge("t.k1")
        counts = {len(await current_entries(kv, "t.>")) for _ in range(60)}
        assert counts == {KEYS - 2}
        assert await current_entries(kv, "none.>") == []
    finally:
        await nc.close()
