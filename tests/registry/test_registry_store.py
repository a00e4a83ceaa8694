"""RegistryStore: records in the shared KV bucket, the mirror, blocking waits, renewals."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest

from actorbus.bus.kvkeys import decode_token, encode_token, key
from actorbus.bus.registration import Registration
from actorbus.bus.server import EmbeddedServer
from actorbus.codecs.uap import (
    UNHEALTHY,
    RouteResponse,
    ServiceResponse,
    UapConflictError,
    UapNotFoundError,
    ephemeral_service,
)
from actorbus.services.registry.store import RegistryStore, registry_bucket


@pytest.fixture
async def nc(nats_server: EmbeddedServer) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_server.url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def store(nc: nats.NATS, ns: str) -> AsyncIterator[RegistryStore]:
    s = await RegistryStore.open(nc.jetstream(), ns)
    try:
        yield s
    finally:
        await s.close()


def persistent(name: str, sid: str) -> ServiceResponse:
    return ServiceResponse(id=sid, name=name, ephemeral=False, host="127.0.0.1", port=80)


@pytest.mark.parametrize(
    "name", ["plain", "with space", "dots.in.it", "ünïcödé/名前", "=", "a*b>c", "-_"]
)
def test_any_name_is_a_legal_key_and_comes_back(name: str) -> None:
    token = encode_token(name)
    assert decode_token(token) == name
    assert "." not in token
    assert "*" not in token
    assert ">" not in token
    assert " " not in token
    assert key("svc", name) == f"svc.{token}"


def test_encoding_is_one_to_one() -> None:
    names = ["a", "=a", "YQ", "=YQ", "a b", "a_b"]
    assert len({encode_token(n) for n in names}) == len(names)


async def test_put_get_list_and_index(store: RegistryStore) -> None:
    assert store.list_services() == []
    assert store.index == 0
    a = await store.put_service(ephemeral_service("search", tags=["eu", "fast"], service_id="a"))
    b = await store.put_service(ephemeral_service("search", tags=["us"], service_id="b"))
    c = await store.put_service(persistent("billing", "c"))
    assert 0 < a.index < b.index < c.index == store.services_index == await store.revision()
    assert a.created_at > 0
    assert a.updated_at > 0
    assert store.get_service("a") == a
    assert [s.id for s in store.services_named("search")] == ["a", "b"]
    assert [s.id for s in store.list_services()] == ["c", "a", "b"]  # by name, then age
    assert [s.id for s in store.list_services(tags=["eu"])] == ["a"]
    assert [s.id for s in store.list_services(tags=["eu", "us"])] == []
    assert [s.id for s in store.list_services(ephemeral=False)] == ["c"]
    assert [s.id for s in store.list_services(agent_protocol="actorbus")] == ["a", "b"]
    fetched = await store.fetch_service("a")
    assert fetched is not None
    assert fetched.tags == ["eu", "fast"]


async def test_ids_and_names_of_any_shape(store: RegistryStore) -> None:
    odd = "svc id/with.dots and ünïcode"
    await store.put_service(ephemeral_service("odd name.v1", service_id=odd))
    await store.put_route(RouteResponse(id="r", name="route with space.and/slash", service="x"))
    assert store.get_service(odd) is not None
    assert store.get_route("route with space.and/slash") is not None


async def test_optimistic_concurrency(store: RegistryStore) -> None:
    svc = await store.put_service(persistent("p", "p1"))
    with pytest.raises(UapConflictError, match="exists already"):
        await store.put_service(persistent("p", "p1"), expect_index=0)
    newer = await store.put_service(svc.model_copy(update={"tags": ["x"]}), expect_index=svc.index)
    with pytest.raises(UapConflictError, match="changed since"):
        await store.put_service(svc.model_copy(update={"tags": ["y"]}), expect_index=svc.index)
    assert store.get_service("p1") == newer
    with pytest.raises(UapConflictError):
        await store.delete_service("p1", expect_index=svc.index)
    assert await store.delete_service("p1", expect_index=newer.index)
    assert store.get_service("p1") is None
    assert not await store.delete_service("p1")
    # The id is free again once deleted.
    again = await store.put_service(persistent("p", "p1"), expect_index=0)
    assert again.index > newer.index


async def test_modify_service_retries_on_conflict(store: RegistryStore) -> None:
    await store.put_service(persistent("p", "m"))
    calls = 0

    def add_tag(cur: ServiceResponse) -> ServiceResponse:
        nonlocal calls
        calls += 1
        return cur.model_copy(update={"tags": [*cur.tags, "t"]})

    # Someone writes behind the mirror's back: the first attempt conflicts.
    stale = store.get_service("m")
    assert stale is not None
    await store.kv.put(
        f"svc.{encode_token('m')}",
        stale.model_copy(update={"tags": ["other"]}).model_dump_json().encode(),
    )
    store._services["m"] = stale  # make the mirror stale on purpose
    done = await store.modify_service("m", add_tag)
    assert done is not None
    assert done.tags == ["other", "t"]
    assert calls == 2
    assert await store.modify_service("missing", add_tag) is None


async def test_two_stores_share_the_bucket_and_wake_each_other(
    nc: nats.NATS, store: RegistryStore, ns: str
) -> None:
    other = await RegistryStore.open(nc.jetstream(), ns)
    try:
        before = other.services_index
        waiter = asyncio.create_task(other.wait_for_change(before, 10.0, "services"))
        await asyncio.sleep(0)  # the waiter is inside its wait (it does not yield before)
        t = time.monotonic()
        svc = await store.put_service(ephemeral_service("shared", service_id="s"))
        index = await asyncio.wait_for(waiter, 5.0)
        assert time.monotonic() - t < 1.0
        assert index == svc.index
        assert other.get_service("s") == svc
    finally:
        await other.close()


async def test_wait_for_change_times_out_and_ignores_other_kinds(store: RegistryStore) -> None:
    await store.put_service(persistent("p", "w"))
    index = store.services_index
    t = time.monotonic()
    waiter = asyncio.create_task(store.wait_for_change(index, 0.4, "services"))
    await store.put_route(RouteResponse(id="r1", name="r1", service="p"))  # not a service
    assert await waiter == index
    assert 0.35 <= time.monotonic() - t < 2.0
    # An index the bucket never reached (a recreated bucket) answers at once.
    t = time.monotonic()
    assert await store.wait_for_change(10_000, 5.0) == store.index
    assert time.monotonic() - t < 1.0


async def test_renewals(store: RegistryStore) -> None:
    svc = await store.put_service(ephemeral_service("e", service_id="e1"))
    first = store.renewed_at("e1")  # the store reads its own writes
    assert first is not None
    assert abs(first - svc.created_at) < 5_000
    sick = await store.put_service(
        svc.model_copy(update={"health_status": UNHEALTHY}),
        expect_index=svc.index,
    )
    healed = await store.renew("e1")
    assert healed.healthy
    assert healed.index > sick.index
    assert healed.health_output == "renewed"
    renewals_before = store.services_index
    await store.renew("e1")  # healthy already: only the renewals bucket moves
    assert store.services_index == renewals_before
    with pytest.raises(UapNotFoundError):
        await store.renew("nope")
    await store.put_service(persistent("p", "p2"))
    with pytest.raises(UapConflictError, match="persistent"):
        await store.renew("p2")
    assert await store.delete_service("e1")


async def test_routes(store: RegistryStore) -> None:
    r = await store.put_route(RouteResponse(id="1", name="chat", service="llm", paths=["/chat"]))
    assert store.get_route("chat") == r
    assert store.routes_index == r.index
    with pytest.raises(UapConflictError):
        await store.put_route(RouteResponse(id="2", name="chat", service="x"), expect_index=0)
    await store.put_route(RouteResponse(id="3", name="alpha", service="other"))
    assert [x.name for x in store.list_routes()] == ["alpha", "chat"]
    assert [x.name for x in store.list_routes(service="llm")] == ["chat"]
    assert await store.fetch_route("chat") == r
    assert await store.delete_route("chat")
    assert not await store.delete_route("chat")
    assert store.get_route("chat") is None


async def test_records_outlive_the_store_and_bad_records_are_skipped(
    nc: nats.NATS, store: RegistryStore, ns: str
) -> None:
    await store.put_service(persistent("keep", "k"))
    kv = await nc.jetstream().key_value(registry_bucket(ns))
    await kv.put("svc.garbage", b"not json")
    await kv.put("route.bad", b'{"name": 5}')
    await store.close()
    again = await RegistryStore.open(nc.jetstream(), ns)
    try:
        assert again.get_service("k") is not None
        assert again.get_service("garbage") is None
        assert again.get_route("bad") is None
        await again.put_service(persistent("after", "a"))  # the mirror still works
        assert again.get_service("a") is not None
    finally:
        await again.close()


async def test_a_registration_renews_and_comes_back(store: RegistryStore) -> None:
    record = ephemeral_service(
        "echo", service_id="sys-echo", renewal_interval=0.1, unhealthy_after=1, delete_after=2
    )
    reg = Registration(store, record)
    first = await reg.start()
    try:
        assert store.get_service("sys-echo") == first
        renewed = store.renewed_at("sys-echo")
        t = time.monotonic()
        while store.renewed_at("sys-echo") == renewed:
            assert time.monotonic() - t < 2.0, "never renewed"
            await store.wait_for_change(store.services_index, 0.05)
        await store.delete_service("sys-echo")  # as the leader would after an outage
        t = time.monotonic()
        while store.get_service("sys-echo") is None:
            assert time.monotonic() - t < 2.0, "never registered again"
            await store.wait_for_change(store.services_index, 0.5, "services")
        assert reg.registrations == 2
    finally:
        await reg.stop()
    t = time.monotonic()
    while store.get_service("sys-echo") is not None:  # the mirror hears of the delete
        assert time.monotonic() - t < 5.0, "still registered after stop()"
        await store.wait_for_change(store.services_index, 0.5, "services")
    with pytest.raises(ValueError, match="ephemeral"):
        Registration(store, persistent("p", "p"))
