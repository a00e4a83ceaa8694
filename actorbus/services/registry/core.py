"""The registry's operations, shared by its HTTP API and its actor.

Each method is one spec operation: validate the request against the UAP schema,
apply it to the store, raise a typed error (:class:`UapValidationError` -> 400,
:class:`UapNotFoundError` -> 404, :class:`UapConflictError` -> 409) when it
cannot. Reads answer from the store's in-memory mirror.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from actorbus.bus.bucket_mirror import now_ms
from actorbus.codecs.uap import (
    RouteResponse,
    ServiceResponse,
    UapConflictError,
    UapNotFoundError,
    new_route,
    new_service,
    updated_route,
    updated_service,
)
from actorbus.services.registry.cards import (
    AgentInfoFetcher,
    AgentInfoFetchError,
    agent_info_sources,
)
from actorbus.services.registry.store import WRITE_ATTEMPTS, Kind, RegistryStore

log = logging.getLogger("actorbus.registry")


class Registry:
    """Services and routes of one namespace, as the spec's API sees them."""

    def __init__(self, store: RegistryStore, fetcher: AgentInfoFetcher, *, max_wait: float) -> None:
        self.store = store
        self.fetcher = fetcher
        self.max_wait = max_wait

    # -- services ------------------------------------------------------------
    async def register(self, body: object, *, replace: bool = False) -> ServiceResponse:
        """``POST /services``. An ``id`` already taken is a conflict unless ``replace``
        (a registrant registering itself again after a crash)."""
        svc = new_service(body, now_ms=now_ms())
        chosen_id = isinstance(body, dict) and "id" in body
        if (
            chosen_id
            and not replace
            and (self.store.get_service(svc.id) or await self.store.fetch_service(svc.id))
        ):  # checked before fetching its card; the create below is what guarantees it
            raise UapConflictError(f"a service with id {svc.id!r} exists already")
        svc = await self.with_agent_info(svc)
        return await self.store.put_service(svc, expect_index=None if replace else 0)

    async def with_agent_info(self, svc: ServiceResponse) -> ServiceResponse:
        """``svc`` with its agent_info fetched when it has none but a source for it
        (see :mod:`.cards`); with ``agent_info_error`` when the fetch failed."""
        if not agent_info_sources(svc):
            return svc
        try:
            info = await self.fetcher.fetch(svc)
        except AgentInfoFetchError as exc:
            log.info("agent_info of %s (%s) not fetched: %s", svc.name, svc.id, exc)
            return svc.model_copy(update={"agent_info_error": str(exc)})
        return svc.model_copy(update={"agent_info": info, "agent_info_error": None})

    async def update(self, service_id: str, body: object) -> ServiceResponse:
        """``PATCH /services/{id}``: the body's fields replace the stored ones."""
        for _ in range(WRITE_ATTEMPTS):
            current = self.store.get_service(service_id) or await self.store.fetch_service(
                service_id
            )
            if current is None:
                raise UapNotFoundError(f"no service with id {service_id!r}")
            svc = updated_service(current, body, now_ms=now_ms())
            url_changed = svc.agent_info_url != current.agent_info_url
            if url_changed and isinstance(body, dict) and "agent_info" not in body:
                svc.agent_info = None  # fetched from the old URL: fetch it anew
            svc = await self.with_agent_info(svc)
            try:
                return await self.store.put_service(svc, expect_index=current.index)
            except UapConflictError:
                await self.store.sync()  # someone else wrote it: read again
        raise UapConflictError(f"service {service_id} kept changing; try again")

    async def renew(self, service_id: str) -> ServiceResponse:
        """``PUT /services/{id}/renewal``."""
        return await self.store.renew(service_id)

    async def deregister(self, service_id: str) -> None:
        """``DELETE /services/{id}``."""
        if not await self.store.delete_service(service_id):
            raise UapNotFoundError(f"no service with id {service_id!r}")

    def services(
        self,
        *,
        tags: Iterable[str] = (),
        agent_protocol: str | None = None,
        health_status: str | None = None,
    ) -> list[ServiceResponse]:
        """``GET /services`` (the filters are actorbus extensions)."""
        return self.store.list_services(
            tags=tags, agent_protocol=agent_protocol, health_status=health_status
        )

    def services_named(self, name: str) -> list[ServiceResponse]:
        """``GET /services/{name}``: every instance of that name. A service id is
        accepted too, for clients that know only the id."""
        found = self.store.services_named(name)
        if not found:
            by_id = self.store.get_service(name)
            found = [by_id] if by_id is not None else []
        if not found:
            raise UapNotFoundError(f"no service named {name!r}")
        return found

    async def wait(self, index: int, wait: float, kind: Kind) -> int:
        """Block until the index of ``kind`` passes ``index`` or ``wait`` seconds
        (capped at ``max_wait``) pass; returns the index."""
        return await self.store.wait_for_change(index, min(wait, self.max_wait), kind)

    # -- routes --------------------------------------------------------------
    async def create_route(self, body: object) -> RouteResponse:
        """``POST /routes``; a name already taken is a conflict."""
        route = new_route(body, now_ms=now_ms())
        return await self.store.put_route(route, expect_index=0)

    async def update_route(self, name: str, body: object) -> RouteResponse:
        """``PATCH /routes/{name}``. A new ``name`` in the body renames the route
        (a conflict if that name is taken)."""
        for _ in range(WRITE_ATTEMPTS):
            current = self.get_route_or_none(name) or await self.store.fetch_route(name)
            if current is None:
                raise UapNotFoundError(f"no route named {name!r}")
            route = updated_route(current, body, now_ms=now_ms())
            try:
                if route.name == name:
                    return await self.store.put_route(route, expect_index=current.index)
                stored = await self.store.put_route(route, expect_index=0)
            except UapConflictError:
                if route.name != name:
                    raise UapConflictError(f"a route named {route.name!r} exists already") from None
                await self.store.sync()
                continue
            await self.store.delete_route(name)
            return stored
        raise UapConflictError(f"route {name!r} kept changing; try again")

    async def delete_route(self, name: str) -> None:
        """``DELETE /routes/{name}``."""
        if not await self.store.delete_route(name):
            raise UapNotFoundError(f"no route named {name!r}")

    def get_route_or_none(self, name: str) -> RouteResponse | None:
        return self.store.get_route(name)

    def route(self, name: str) -> RouteResponse:
        """``GET /routes/{name}``."""
        route = self.store.get_route(name)
        if route is None:
            raise UapNotFoundError(f"no route named {name!r}")
        return route

    def routes(self, *, service: str | None = None) -> list[RouteResponse]:
        """``GET /routes`` (the ``service`` filter is an actorbus extension)."""
        return self.store.list_routes(service=service)
