"""Optional parts and the extras that bring them.

``pip install actorbus`` is the actor runtime on NATS (with its security and
tracing); what only some deployments need comes with an extra named for it:

==============  ===============================================================
extra           brings
==============  ===============================================================
``server``      the ``nats-server`` binary (``actorbus up``, ``ActorSystem.start``)
``gateway``     the HTTP gateway (aiohttp, aiosqlite, jsonschema)
``registry``    the registry service's HTTP API (aiohttp, jsonschema)
``router``      the router service's HTTP face (aiohttp)
``anp``         ANP end-to-end sessions in an actor (the anp SDK, aiohttp)
``protocols``   spec validation in the A2ACP and UAP codecs (jsonschema)
``otlp``        exporting spans and metrics over OTLP/HTTP (Jaeger, Phoenix)
``reload``      ``actorbus run --reload`` (watchfiles)
``agents``      ``actorbus.agents``: the openai and anthropic SDKs, the mcp client
``postgres``    actor state in PostgreSQL (asyncpg)
``testing``     ``actorbus.testing``: pytest fixtures with a real broker
``all``         every one of them
==============  ===============================================================

A missing one is a :class:`MissingExtraError` naming the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from actorbus.codecs.errors import MissingExtraError


def missing(extra: str, what: str, exc: ImportError) -> MissingExtraError:
    """The error for an import of ``what`` that failed for want of ``extra``."""
    return MissingExtraError.needs((exc.name or "a package").split(".")[0], extra, what)


def require(module: str, extra: str, what: str, package: str | None = None) -> ModuleType:
    """``module``, imported; else MissingExtraError saying which extra brings it
    (and which package, ``package`` when it is not the module's first name)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = package or module.split(".")[0]
        raise MissingExtraError.needs(name, extra, what) from exc
