"""The registry as an actor: the same operations as the HTTP API, over the bus.

Every registry instance hosts one ``RegistryActor`` at ``registry/<key>``
(``registry/main`` by default); instances share it through the address's
queue group, so ``system.ask("registry", ...)`` (anycast) or
``system.ask("registry/main", ...)`` reaches whichever is up::

    svc = await system.ask("registry", RegisterService(service={...}), returns=ServiceResponse)
    await system.ask("registry", RenewService(id=svc.id))
    found = await system.ask("registry", ListServices(tags=["search"]), returns=ServiceList)
    one = await system.ask("registry", GetService(id=svc.id), returns=ServiceResponse)

Errors arrive typed: an invalid service as ``ValidationFailedError`` naming the
field; unknown ids and conflicts as ``RemoteError`` whose ``remote_type`` is
``UapNotFoundError`` or ``UapConflictError``. A blocking ``ListServices``
(``index`` given) needs an ask ``timeout`` longer than its ``wait``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.codecs.uap import RouteResponse, ServiceResponse, UapNotFoundError
from actorbus.services.registry.core import Registry


class RegisterService(BaseModel):
    """Register a service: ``service`` is a ``CreateServiceRequest`` body. With
    ``replace``, an existing service of the same ``id`` is replaced (a registrant
    registering itself again) instead of being a conflict."""

    __intent__ = "registry.register"
    service: dict[str, Any]
    replace: bool = False


class UpdateService(BaseModel):
    """``service`` is an ``UpdateServiceRequest`` body."""

    __intent__ = "registry.update"
    id: str
    service: dict[str, Any]


class RenewService(BaseModel):
    __intent__ = "registry.renew"
    id: str


class DeregisterService(BaseModel):
    __intent__ = "registry.deregister"
    id: str


class GetService(BaseModel):
    """One service by id (``UapNotFoundError`` if unknown)."""

    __intent__ = "registry.get"
    id: str


class ListServices(BaseModel):
    """Services matching every given filter; with ``index`` (the ``index`` of an
    earlier answer), wait up to ``wait`` seconds for the index to move past it first."""

    __intent__ = "registry.list"
    name: str | None = None
    tags: list[str] = []
    agent_protocol: str | None = None
    health_status: str | None = None
    index: int | None = None
    wait: float = 300.0


class ListRoutes(BaseModel):
    __intent__ = "registry.routes"
    service: str | None = None
    index: int | None = None
    wait: float = 300.0


class ServiceList(BaseModel):
    __intent__ = "registry.services"
    index: int
    services: list[ServiceResponse]


class RouteList(BaseModel):
    __intent__ = "registry.route-list"
    index: int
    routes: list[RouteResponse]


class Done(BaseModel):
    __intent__ = "registry.done"
    id: str


class RegistryActor(Actor):
    """Answers registry intents; hosted by every :class:`RegistryService`."""

    type_name: ClassVar[str] = "registry"
    concurrency: ClassVar[int] = 64  # blocking lists wait side by side
    advertise: ClassVar[bool] = False  # infrastructure, not an agent: not in its own lists

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    @handler
    async def register(self, msg: RegisterService) -> ServiceResponse:
        return await self.registry.register(msg.service, replace=msg.replace)

    @handler
    async def update(self, msg: UpdateService) -> ServiceResponse:
        return await self.registry.update(msg.id, msg.service)

    @handler
    async def renew(self, msg: RenewService) -> Done:
        await self.registry.renew(msg.id)
        return Done(id=msg.id)

    @handler
    async def deregister(self, msg: DeregisterService) -> Done:
        await self.registry.deregister(msg.id)
        return Done(id=msg.id)

    @handler
    async def get(self, msg: GetService) -> ServiceResponse:
        svc = self.registry.store.get_service(msg.id) or await self.registry.store.fetch_service(
            msg.id
        )
        if svc is None:
            raise UapNotFoundError(f"no service with id {msg.id!r}")
        return svc

    @handler
    async def list_services(self, msg: ListServices) -> ServiceList:
        store = self.registry.store
        index = store.services_index
        if msg.index is not None:
            index = await self.registry.wait(msg.index, msg.wait, "services")
        found = store.list_services(
            name=msg.name,
            tags=msg.tags,
            agent_protocol=msg.agent_protocol,
            health_status=msg.health_status,
        )
        return ServiceList(index=index, services=found)

    @handler
    async def list_routes(self, msg: ListRoutes) -> RouteList:
        store = self.registry.store
        index = store.routes_index
        if msg.index is not None:
            index = await self.registry.wait(msg.index, msg.wait, "routes")
        return RouteList(index=index, routes=self.registry.routes(service=msg.service))
