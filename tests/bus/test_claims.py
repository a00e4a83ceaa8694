"""Claims that last as long as their holder lives (bus/claims.py), on a real
nats-server: one claimant wins; a live holder keeps its names; a dead holder's
names go to the first claimant after it, never to two."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import nats
import pytest

from actorbus.bus.claims import ClaimTable
from actorbus.bus.leases import LeaseLostError, lease_key

TTL = 1.0
WAIT = 5.0


@pytest.fixture
async def js(nats_server) -> AsyncIterator[nats.js.JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    try:
        yield nc.jetstream()
    finally:
        await nc.close()


async def table(js: nats.js.JetStreamContext, ns: str, holder: str) -> ClaimTable:
    return await ClaimTable.open(js, f"{ns}-hosts", f"{ns}-placement", TTL, holder)


@pytest.fixture
def ns() -> str:
    return f"claims-{uuid.uuid4().hex[:8]}"


async def test_one_of_many_claimants_wins_and_the_others_learn_who(js, ns: str) -> None:
    tables = [await table(js, ns, f"h{i}") for i in range(8)]
    claims = await asyncio.gather(*(t.claim("name") for t in tables))
    winners = [c for c in claims if c.revision is not None]
    assert len(winners) == 1
    assert {c.holder for c in claims} == {winners[0].holder}


async def test_a_live_holder_keeps_its_name_and_a_released_one_is_free(js, ns: str) -> None:
    a, b = await table(js, ns, "a"), await table(js, ns, "b")
    mine = await a.claim("name")
    assert mine.revision is not None
    for _ in range(5):  # longer than a lease lives, renewed as a holder does
        await asyncio.sleep(TTL / 3)
        await a.renew()
    theirs = await b.claim("name")
    assert (theirs.holder, theirs.revision) == ("a", None)
    assert await a.release("name", mine.revision)
    taken = await b.claim("name")
    assert taken.holder == "b"
    assert taken.revision is not None


async def test_a_dead_holders_name_goes_to_one_claimant_and_the_dead_cannot_release_it(
    js, ns: str
) -> None:
    a = await table(js, ns, "a")
    mine = await a.claim("name")
    assert mine.revision is not None
    await a.liveness.kv.delete(lease_key("host", "a"))  # as the server max_age drops it
    others = [await table(js, ns, f"h{i}") for i in range(4)]
    claims = await asyncio.gather(*(t.claim("name") for t in others))
    winners = {c.holder for c in claims if c.revision is not None}
    assert len(winners) == 1
    assert {c.holder for c in claims} == winners
    assert not await a.release("name", mine.revision)  # not its own any more
    with pytest.raises(LeaseLostError):
        await a.renew()


async def test_a_record_lives_its_ttl_unless_its_holder_writes_it_again(js, ns: str) -> None:
    """What a crashed holder leaves goes away by itself, even for a name nobody
    claims again; a live holder's refreshed record outlives the ttl."""
    a = await ClaimTable.open(js, f"{ns}-hosts", f"{ns}-placement", 0.5, "a", record_ttl=2)
    kept, left = await a.claim("kept"), await a.claim("left")
    assert kept.revision is not None
    assert left.revision is not None
    revision, refreshed = kept.revision, 0
    started = asyncio.get_running_loop().time()

    async def left_gone() -> bool:
        nonlocal revision, refreshed
        new = await a.refresh("kept", revision)  # as its holder does at half the ttl
        assert new is not None
        revision, refreshed = new, refreshed + 1
        try:
            await a.records.get("left")
        except nats.js.errors.KeyNotFoundError:
            return True
        return False

    while not await left_gone():
        assert asyncio.get_running_loop().time() - started < 2 + WAIT, "'left' never expired"
        await asyncio.sleep(0.5)
    assert asyncio.get_running_loop().time() - started >= 1.5  # not before its ttl
    while asyncio.get_running_loop().time() - started < 3:  # past the ttl of the first write
        await asyncio.sleep(0.5)
        new = await a.refresh("kept", revision)
        assert new is not None
        revision = new
    entry = await a.records.get("kept")
    assert (entry.value, entry.revision) == (b"a", revision)


async def test_a_record_changed_or_gone_is_not_refreshed(js, ns: str) -> None:
    a = await table(js, ns, "a")
    mine = await a.claim("name")
    assert mine.revision is not None
    await a.records.put("name", b"b")  # taken over while we were away
    assert await a.refresh("name", mine.revision) is None
    await a.records.purge("name")
    assert await a.refresh("name", mine.revision) is None


async def test_a_records_bucket_made_without_ttls_is_changed_to_take_them(js, ns: str) -> None:
    from nats.js.api import StreamConfig

    bucket = f"{ns}-placement"
    await js.add_stream(
        StreamConfig(
            name=f"KV_{bucket}",
            subjects=[f"$KV.{bucket}.>"],
            max_msgs_per_subject=1,
            allow_rollup_hdrs=True,
            deny_delete=True,
            allow_msg_ttl=False,
        )
    )
    a = await table(js, ns, "a")
    assert (await a.claim("name")).revision is not None
    assert (await a.records.status()).stream_info.config.allow_msg_ttl


async def test_a_record_ttl_shorter_than_the_renewals_allow_is_refused(js, ns: str) -> None:
    with pytest.raises(ValueError, match="four times the liveness ttl"):
        await ClaimTable.open(js, f"{ns}-hosts", f"{ns}-placement", TTL, "a", record_ttl=3)
