"""Claim records created together go to the server as atomic batches
(bus/record_batches.py), on a real nats-server: each name still gets its own
answer (its revision, or who holds it), a name that is not free never
spoils the others, and two claimants of the same names never both win one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

from actorbus.bus.claims import ClaimTable

TTL = 1.0


@pytest.fixture
async def js(nats_server: Any) -> AsyncIterator[nats.js.JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    try:
        yield nc.jetstream()
    finally:
        await nc.close()


@pytest.fixture
def ns() -> str:
    return f"batches-{uuid.uuid4().hex[:8]}"


async def table(js: nats.js.JetStreamContext, ns: str, holder: str) -> ClaimTable:
    return await ClaimTable.open(js, f"{ns}-hosts", f"{ns}-placement", TTL, holder)


async def watch_writes(nats_server: Any, ns: str) -> tuple[Any, list[dict[str, str]]]:
    """Every write to the records bucket as published (its headers), seen by a
    plain subscriber of the bucket's subjects."""
    nc = await nats.connect(nats_server.url)
    seen: list[dict[str, str]] = []

    async def on_write(msg: Any) -> None:
        seen.append(dict(msg.headers or {}))

    await nc.subscribe(f"$KV.{ns}-placement.>", cb=on_write)
    await nc.flush()
    return nc, seen


async def test_a_burst_of_claims_goes_in_batches_each_with_its_own_revision(
    js: Any, ns: str, nats_server: Any
) -> None:
    a = await table(js, ns, "a")
    assert a.creates.batched
    watcher, seen = await watch_writes(nats_server, ns)
    try:
        names = [f"n{i}" for i in range(300)]
        claims = await asyncio.gather(*(a.claim(name) for name in names))
        await watcher.flush()
    finally:
        await watcher.close()
    for name, claim in zip(names, claims, strict=True):
        entry = await a.records.get(name)
        assert (claim.holder, claim.revision) == ("a", entry.revision), name
        assert entry.value == b"a"
    batches = {h["Nats-Batch-Id"] for h in seen if "Nats-Batch-Id" in h}
    in_batches = sum("Nats-Batch-Id" in h for h in seen)
    assert in_batches >= 250, f"only {in_batches} of 300 records went in batches"
    assert len(batches) <= 30, f"{len(batches)} batches for 300 records"


async def test_a_taken_name_and_a_released_one_spoil_no_batch(js: Any, ns: str) -> None:
    a, b = await table(js, ns, "a"), await table(js, ns, "b")
    await b.claim("taken")  # b lives and holds it
    gone = await a.claim("gone")
    assert gone.revision is not None
    assert await a.release("gone", gone.revision)  # a tombstone is left behind
    names = [f"n{i}" for i in range(100)]
    names[30:30] = ["taken"]
    names[70:70] = ["gone"]
    claims = dict(zip(names, await asyncio.gather(*(a.claim(n) for n in names)), strict=True))
    assert (claims["taken"].holder, claims["taken"].revision) == ("b", None)
    for name in names:
        if name == "taken":
            continue
        entry = await a.records.get(name)
        assert (claims[name].holder, claims[name].revision) == ("a", entry.revision), name


async def test_two_claimants_of_the_same_names_never_both_win_one(js: Any, ns: str) -> None:
    a, b = await table(js, ns, "a"), await table(js, ns, "b")
    await asyncio.gather(a.renew(), b.renew())

    async def stay_alive() -> None:  # as their systems do: both live throughout
        while True:
            await asyncio.sleep(TTL / 4)
            await asyncio.gather(a.renew(), b.renew())

    names = [f"n{i}" for i in range(200)]
    renewing = asyncio.create_task(stay_alive())
    try:
        both = await asyncio.gather(
            asyncio.gather(*(a.claim(n) for n in names)),
            asyncio.gather(*(b.claim(n) for n in reversed(names))),
        )
    finally:
        renewing.cancel()
    mine, theirs = both[0], list(reversed(both[1]))
    for name, by_a, by_b in zip(names, mine, theirs, strict=True):
        won = [c for c in (by_a, by_b) if c.revision is not None]
        assert len(won) == 1, f"{name}: {by_a}, {by_b}"
        assert by_a.holder == by_b.holder == won[0].holder
        entry = await a.records.get(name)
        assert entry.revision == won[0].revision
        assert entry.value == won[0].holder.encode()


async def test_a_records_bucket_made_before_batches_is_changed_to_take_them(
    js: Any, ns: str
) -> None:
    from nats.js.api import KeyValueConfig, StorageType

    await js.create_key_value(  # as actorbus made it before, and any client makes one
        KeyValueConfig(bucket=f"{ns}-placement", history=1, storage=StorageType.FILE)
    )
    a = await table(js, ns, "a")
    assert a.creates.batched
    claims = await asyncio.gather(*(a.claim(f"n{i}") for i in range(20)))
    assert all(c.revision is not None for c in claims)
