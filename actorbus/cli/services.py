"""``actorbus gateway``, ``actorbus router`` and ``actorbus registry serve``: the
services from the one command (their ``python -m actorbus.services...`` forms stay).

Their own options pass through untouched; without ``--nats`` a service connects
to the server the other commands would find (``$ACTORBUS_URL``, ``$NATS_URL``,
or the one ``actorbus up`` runs), else to its default, nats://127.0.0.1:4222.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from actorbus.actors.context import env_url, recorded_url
from actorbus.cli.common import EXIT_OK, EXIT_USAGE, CliError
from actorbus.codecs.errors import MissingExtraError
from actorbus.extras import missing

SERVICES: dict[tuple[str, ...], str] = {
    ("gateway",): "actorbus.services.gateway.__main__",
    ("router",): "actorbus.services.router.__main__",
    ("registry", "serve"): "actorbus.services.registry.__main__",
}
# The extra each service's HTTP face comes with (actorbus.extras).
EXTRA_OF: dict[str, str] = {
    "actorbus.services.gateway.__main__": "gateway",
    "actorbus.services.router.__main__": "router",
    "actorbus.services.registry.__main__": "registry",
}


def service_of(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """The service module ``argv`` runs and the arguments that are its own, if any."""
    for words, module in SERVICES.items():
        if tuple(argv[: len(words)]) == words:
            return module, list(argv[len(words) :])
    return None


def serve(module: str, rest: list[str]) -> int:
    """Run a service's own ``main`` with ``rest``; its exit code."""
    asks_help = any(a in ("-h", "--help") for a in rest)
    names_nats = any(a == "--nats" or a.startswith("--nats=") for a in rest)
    if not asks_help and not names_nats:
        url = env_url() or recorded_url()
        if url:
            rest = ["--nats", url, *rest]
    try:
        service = importlib.import_module(module)
    except MissingExtraError as exc:
        raise CliError(str(exc)) from None
    except ImportError as exc:  # its HTTP server's packages, before --help can be read
        name = "actorbus " + module.split(".")[2]
        raise CliError(str(missing(EXTRA_OF.get(module, "all"), name, exc))) from None
    try:
        service.main(rest)
    except SystemExit as exc:  # --help, a usage error, or the service's own exit
        if exc.code is None:
            return EXIT_OK
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return EXIT_OK


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Listed in ``actorbus --help``; :func:`actorbus.cli.main.main` hands their
    arguments to the service before parsing (they are the service's own)."""
    for name, what in (
        ("gateway", "the HTTP gateway: A2A, ACP, ANP, Agora, MCP (`actorbus gateway --help`)"),
        ("router", "the router service (`actorbus router --help`)"),
    ):
        sub.add_parser(name, help=what, add_help=False)
