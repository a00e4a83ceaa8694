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
