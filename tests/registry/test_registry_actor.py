"""The registry over the bus: RegistryActor intents, and plain systems sharing the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from _registry import running_registry

from actorbus import ActorSystem, RemoteError, ValidationFailedError
from actorbus.bus.server import EmbeddedServer
from actorbus.codecs.uap import ServiceResponse, actor_agent_info, ephemeral_service
from actorbus.services.registry import (
    DeregisterService,
    GetService,
    ListRoutes,
    ListServices,
    RegisterService,
    RegistryService,
    RenewService,
    RouteList,
    ServiceList,
    UpdateService,
)
from actorbus.services.registry.store import RegistryStore

BODY = {"name": "search", "host": "127.0.0.1", "port": 8080, "protocol": "http", "tags": ["eu"]}


@pytest.fixture
async def reg(nats_server: EmbeddedServer, ns: str) -> AsyncIterator[RegistryService]:
    async with running_registry(nats_server.url, ns) as r:
        yield r


async def test_register_get_list_renew_deregister(
    reg: RegistryService, system: ActorSystem
) -> None:
    svc = await system.ask("registry", RegisterService(service=BODY), returns=ServiceResponse)
    assert svc.name == "search"
    assert svc.ephemeral
    assert svc.index > 0
    got = await system.ask("registry/main", GetService(id=svc.id), returns=ServiceResponse)
    assert got == svc
    found = await system.ask("registry", ListServices(tags=["eu"]), returns=ServiceList)
    assert found.services == [svc]
    assert found.index == svc.index
    assert (
        await system.ask("registry", ListServices(name="x"), returns=ServiceList)
    ).services == []
    await system.ask("registry", RenewService(id=svc.id))
    new = await system.ask(
        "registry", UpdateService(id=svc.id, service={**BODY, "port": 9}), returns=ServiceResponse
    )
    assert new.port == 9
    await system.ask("registry", DeregisterService(id=svc.id))
    assert reg.store.get_service(svc.id) is None
    routes = await system.ask("registry", ListRoutes(), returns=RouteList)
    assert routes.routes == []


async def test_errors_arrive_typed(reg: RegistryService, system: ActorSystem) -> None:
    with pytest.raises(ValidationFailedError, match=r"\$\.port: must be integer"):
        await system.ask("registry", RegisterService(service={**BODY, "port": "x"}))
    with pytest.raises(RemoteError) as info:
        await system.ask("registry", RenewService(id="nope"))
    assert info.value.remote_type == "UapNotFoundError"
    await system.ask("registry", RegisterService(service={**BODY, "id": "fixed"}))
    with pytest.raises(RemoteError) as info:
        await system.ask("registry", RegisterService(service={**BODY, "id": "fixed"}))
    assert info.value.remote_type == "UapConflictError"
    # replace=True: a registrant registering itself again after a crash.
    again = await system.ask(
        "registry",
        RegisterService(service={**BODY, "id": "fixed", "port": 7}, replace=True),
        returns=ServiceResponse,
    )
    assert again.port == 7


async def test_blocking_list_over_the_bus(reg: RegistryService, system: ActorSystem) -> None:
    first = await system.ask("registry", ListServices(), returns=ServiceList)
    t = time.monotonic()
    waiting = asyncio.create_task(
        system.ask(
            "registry", ListServices(index=first.index, wait=10), returns=ServiceList, timeout=15
        )
    )
    await asyncio.sleep(0.2)
    assert not waiting.done()
    svc = await system.ask("registry", RegisterService(service=BODY), returns=ServiceResponse)
    found = await asyncio.wait_for(waiting, 5)
    assert found.services == [svc]
    assert time.monotonic() - t < 2.0


async def test_a_plain_system_registers_its_actor_types_through_the_store(
    reg: RegistryService, system: ActorSystem, ns: str
) -> None:
    store = await RegistryStore.open(system.runtime.js, ns)
    try:
        record = ephemeral_service(
            "echo",
            agent_info=actor_agent_info("echo", intents={"Question": {"type": "object"}}),
            tags=["actor"],
            path=f"{ns}.any.echo",
            service_id=f"{system.system_id}-echo",
        )
        stored = await store.put_service(record)
        await store.renew(record.id)
        assert reg.http_url is not None
        async with (
            aiohttp.ClientSession() as http,
            http.get(reg.http_url + "/services?index=0&wait=5s&tag=actor") as resp,
        ):
            listed = await resp.json()
        assert [s["id"] for s in listed] == [stored.id]
        assert listed[0]["agent_info"]["actorbus"]["address"] == "echo"
        found = await system.ask("registry", ListServices(name="echo"), returns=ServiceList)
        assert found.services[0].id == stored.id
    finally:
        await store.close()


async def test_registry_instances_share_the_actor_address(
    nats_server: EmbeddedServer, ns: str, reg: RegistryService, system: ActorSystem
) -> None:
    async with running_registry(nats_server.url, ns) as second:
        assert not second.is_leader
        svc = await system.ask("registry", RegisterService(service=BODY), returns=ServiceResponse)
        await reg.stop()  # the first goes away; the second answers on the same address
        got = await system.ask("registry/main", GetService(id=svc.id), returns=ServiceResponse)
        assert got.id == svc.id
        assert await second.election.wait_elected(5.0)  # released on stop: taken over at once
