"""The registry's view of the shared bucket: services and its gateway routes.

:class:`RegistryStore` extends the service records every ActorSystem shares
(:mod:`actorbus.bus.service_records`, which describes the bucket layout and its
blocking queries) with what only the registry service needs: gateway routes (``route.<name>`` in the
same bucket, so one revision sequence orders services and routes and is the
blocking-query index) and the index of each kind.
"""

from __future__ import annotations

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from actorbus.bus.bucket_mirror import now_ms
from actorbus.bus.service_records import (
    ROUTE,
    WRITE_ATTEMPTS,
    Kind,
    ServiceRecords,
    parse_record,
    record_key,
    registry_bucket,
)
from actorbus.codecs.uap import RouteResponse, UapConflictError

__all__ = ["WRITE_ATTEMPTS", "Kind", "RegistryStore", "registry_bucket"]


class RegistryStore(ServiceRecords):
    """Services and routes of one namespace; a blocking query may wait on either."""

    def __init__(
        self, js: JetStreamContext, kv: KeyValue, renewals: KeyValue, ns: str, replicas: int = 1
    ) -> None:
        super().__init__(js, kv, renewals, ns, replicas)
        self._routes: dict[str, RouteResponse] = {}
        self.routes_index = 0

    def forget(self) -> None:
        super().forget()
        self._routes.clear()
        self.routes_index = 0

    def on_other_record(self, family: str, name: str, value: bytes | None, revision: int) -> None:
        if family != ROUTE:
            return
        self.routes_index = max(self.routes_index, revision)
        route = parse_record(RouteResponse, value, revision) if value is not None else None
        if route is None:
            self._routes.pop(name, None)
        else:
            self._routes[name] = route

    # -- indexes and blocking ------------------------------------------------
    @property
    def index(self) -> int:
        """The highest revision seen of any service or route (0 when none ever existed)."""
        return max(self.services_index, self.routes_index)

    def index_of(self, kind: Kind) -> int:
        if kind == "services":
            return self.services_index
        if kind == "routes":
            return self.routes_index
        return self.index

    # -- routes ------------------------------------------------------------------
    def get_route(self, name: str) -> RouteResponse | None:
        return self._routes.get(name)

    def list_routes(
        self, *, service: str | None = None, gateway_id: str | None = None
    ) -> list[RouteResponse]:
        out = [
            r
            for r in self._routes.values()
            if (service is None or r.service == service)
            and (gateway_id is None or r.gateway_id == gateway_id)
        ]
        out.sort(key=lambda r: r.name)
        return out

    async def fetch_route(self, name: str) -> RouteResponse | None:
        try:
            entry = await self.kv.get(_route_key(name))
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.value is None or entry.revision is None:
            return None
        return parse_record(RouteResponse, entry.value, entry.revision)

    async def put_route(
        self, route: RouteResponse, *, expect_index: int | None = None
    ) -> RouteResponse:
        """Store ``route`` under its name; ``expect_index`` as for :meth:`put_service`."""
        stamp = now_ms()
        r = route.model_copy(
            update={
                "created_at": route.created_at or stamp,
                "updated_at": stamp,
                "index": 0,
            }
        )
        payload = r.model_dump_json(exclude_none=True, exclude={"index"}).encode()
        r.index = await self.write(_route_key(r.name), payload, expect_index, f"route {r.name!r}")
        await self.records_mirror.wait_seen(r.index)
        return r

    async def delete_route(self, name: str, *, expect_index: int | None = None) -> bool:
        current = self.get_route(name) or await self.fetch_route(name)
        if current is None:
            return False
        try:
            if expect_index:
                await self.delete_at(_route_key(name), expect_index)
            else:
                await self.kv.delete(_route_key(name))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise UapConflictError(f"route {name!r} changed; not deleted") from None
        await self.records_mirror.wait_seen(await self.revision())
        return True


def _route_key(name: str) -> str:
    return record_key(ROUTE, name)
