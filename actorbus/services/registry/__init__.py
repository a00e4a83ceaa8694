"""The UAP registry: services and gateway routes on JetStream, with an HTTP API and an actor.

- :class:`RegistryService`: one instance (store, leader election, lifecycles,
  HTTP API, actor); run several for high availability.
- :class:`RegistryActor` and its messages: the registry over the bus.
- ``python -m actorbus.services.registry``: an instance from the shell.

The registry's store (``actorbus.services.registry.store``) extends the service
records every ActorSystem shares to announce its actor types
(``actorbus.bus.service_records``); the record models are ``actorbus.codecs.uap``.
"""

from actorbus.extras import missing

try:
    from actorbus.services.registry.actor import (
        DeregisterService,
        Done,
        GetService,
        ListRoutes,
        ListServices,
        RegisterService,
        RegistryActor,
        RenewService,
        RouteList,
        ServiceList,
        UpdateService,
    )
    from actorbus.services.registry.core import Registry
    from actorbus.services.registry.service import RegistryService, RegistrySettings
except ImportError as exc:  # aiohttp, jsonschema: the [registry] extra
    raise missing("registry", "the registry service", exc) from exc

__all__ = [
    "DeregisterService",
    "Done",
    "GetService",
    "ListRoutes",
    "ListServices",
    "RegisterService",
    "Registry",
    "RegistryActor",
    "RegistryService",
    "RegistrySettings",
    "RenewService",
    "RouteList",
    "ServiceList",
    "UpdateService",
]
