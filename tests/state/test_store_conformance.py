"""The one conformance suite every state backend passes, each against its real
server: the JetStream key-value default (on the suite's nats-server),
PostgreSQL (a server started from Debian's binaries), and the in-process bus's
buckets, which stand in for JetStream's in fast tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from actorbus import ActorSystem, StateConflictError, StateTooLargeError
from actorbus.state.store import StateStore
from actorbus.testing import eventually

Make = Callable[..., StateStore]


@pytest.fixture(params=["kv", "kv-client", "kv-in-process", "postgres"])
async def make_store(request: Any, system: Any) -> AsyncIterator[Make]:
    """A factory of stores of one backend (``ttl=`` where a test needs one), on a
    namespace of the test's own; each closed at the end. ``kv`` writes on the
    system's request path, as a system's own store does; ``kv-client`` through
    nats-py's key-value client alone; ``kv-in-process`` in the in-memory buckets
    of the in-process bus (``ActorSystem.in_process``)."""
    made: list[StateStore] = []
    ns = f"c{uuid.uuid4().hex[:10]}"
    local = await ActorSystem.in_process() if request.param == "kv-in-process" else None
    if request.param.startswith("kv"):
        on = local or system
        path = on.runtime.mux.request if request.param != "kv-client" else None

        def make(ttl: float | None = None) -> StateStore:
            from actorbus.state.kv_store import KeyValueStateStore

            # A bucket of its own per ttl: the bucket's ttl is its max_age.
            store = KeyValueStateStore.for_namespace(
                on.runtime.js,
                f"{ns}{'t' if ttl else ''}",
                on.nc.max_payload,
                ttl=ttl,
                request=path,
            )
            made.append(store)
            return store
    else:
        dsn = request.getfixturevalue("postgres_dsn")

        def make(ttl: float | None = None) -> StateStore:
            from actorbus.state.postgres_store import PostgresStateStore

            store = PostgresStateStore(dsn, namespace=ns, ttl=ttl, max_size=1024 * 1024)
            made.append(store)
            return store

    yield make
    for store in made:
        await store.close()
    if local is not None:
        await local.close()


async def test_load_of_nothing_is_none(make_store: Make) -> None:
    assert await make_store().load("acct", "nobody") is None


async def test_save_then_load_and_revisions_grow(make_store: Make) -> None:
    store = make_store()
    first = await store.save("acct", "a", b"one", None)
    got = await store.load("acct", "a")
    assert got is not None
    assert (got.data, got.revision) == (b"one", first)
    second = await store.save("acct", "a", b"two", first)
    assert second > first
    got = await store.load("acct", "a")
    assert got is not None
    assert (got.data, got.revision) == (b"two", second)


async def test_a_stale_revision_is_a_conflict_and_changes_nothing(make_store: Make) -> None:
    store = make_store()
    first = await store.save("acct", "b", b"v1", None)
    await store.save("acct", "b", b"v2", first)
    with pytest.raises(StateConflictError):
        await store.save("acct", "b", b"stale", first)
    with pytest.raises(StateConflictError):  # a first write where there is one
        await store.save("acct", "b", b"again", None)
    got = await store.load("acct", "b")
    assert got is not None
    assert got.data == b"v2"


async def test_fencing_a_newer_claim_wins_over_an_older_activation(make_store: Make) -> None:
    """Activation A read revision r; B (newer) claims by writing r -> r2; A's next
    write from r is refused. Also through two store objects (two processes)."""
    a, b = make_store(), make_store()
    r = await a.save("acct", "f", b"start", None)
    r2 = await b.save("acct", "f", b"claimed-by-b", r)
    with pytest.raises(StateConflictError):
        await a.save("acct", "f", b"from-a", r)
    assert (await b.save("acct", "f", b"b-goes-on", r2)) > r2


async def test_delete_removes_for_good_and_a_new_first_write_starts_over(
    make_store: Make,
) -> None:
    store = make_store()
    r = await store.save("acct", "d", b"secret", None)
    await store.delete("acct", "d")
    assert await store.load("acct", "d") is None
    r2 = await store.save("acct", "d", b"fresh", None)
    assert r2 > r  # never a revision a stale writer could hold
    with pytest.raises(StateConflictError):
        await store.save("acct", "d", b"stale", r)
    await store.delete("acct", "never-written")  # nothing to delete: no error


async def test_keys_lists_a_types_actors(make_store: Make) -> None:
    store = make_store()
    for key in ("k1", "k2", "with:colon@x"):
        await store.save("acct", key, b"x", None)
    await store.save("other", "k3", b"x", None)
    await store.delete("acct", "k2")
    assert [k async for k in store.keys("acct")] == ["k1", "with:colon@x"]


async def test_large_state_up_to_the_limit_and_a_typed_error_past_it(make_store: Make) -> None:
    store = make_store()
    big = bytes(range(256)) * (store.max_size // 256)
    big += b"x" * (store.max_size - len(big))
    r = await store.save("acct", "big", big, None)
    got = await store.load("acct", "big")
    assert got is not None
    assert got.data == big
    with pytest.raises(StateTooLargeError, match="at most"):
        await store.save("acct", "big", big + b"!", r)


async def test_concurrent_first_activations_exactly_one_wins(make_store: Make) -> None:
    stores = [make_store() for _ in range(8)]
    results = await asyncio.gather(
        *(s.save("acct", "race", f"{i}".encode(), None) for i, s in enumerate(stores)),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, int)]
    assert len(won) == 1
    assert all(isinstance(r, StateConflictError) for r in results if not isinstance(r, int))


async def test_abandoned_state_expires_after_its_ttl(make_store: Make) -> None:
    store = make_store(ttl=1.0)
    await store.save("acct", "old", b"x", None)

    async def gone() -> bool:
        return await store.load("acct", "old") is None

    await eventually(gone, 10, "the state dropped after its ttl", interval=0.2)
    assert [k async for k in store.keys("acct")] == []
    await store.save("acct", "old", b"new", None)  # gone: a first write again
