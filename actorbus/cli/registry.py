"""``actorbus registry``: what the namespace's agents offer (ls, show, watch)."""

from __future__ import annotations

import argparse
import asyncio

from rich.markup import escape
from rich.table import Table

from actorbus.actors import ActorSystem
from actorbus.actors.listing import Listing
from actorbus.cli.common import CliError, bus_options, stdout, with_system

# -- registry: what the namespace offers ---------------------------------------


def cmd_registry(args: argparse.Namespace) -> int:
    return asyncio.run(with_system(args, _registry))


async def _registry(system: ActorSystem, args: argparse.Namespace) -> None:
    if args.action == "ls":
        _print_listings(await _listings(system, args), args.json)
    elif args.action == "show":
        if not args.name:
            raise CliError("registry show needs a NAME (an actor type or service name)")
        store = await system.directory.store()
        records = [svc.to_json() for svc in store.services_named(args.name)]
        if not records:
            raise CliError(f"nothing is registered as {args.name!r}")
        stdout().print_json(data=records if len(records) > 1 else records[0])
    else:  # watch: print the list again at every change, until Ctrl-C (or --changes)
        store = await system.directory.store()
        index, shown = store.services_index, 0
        _print_listings(await _listings(system, args), args.json)
        while args.changes is None or shown < args.changes:
            moved = await store.wait_for_change(index, 300.0, "services")
            if moved == index:
                continue
            index, shown = moved, shown + 1
            if not args.json:
                stdout().rule(f"index {index}")
            _print_listings(await _listings(system, args), args.json)


async def _listings(system: ActorSystem, args: argparse.Namespace) -> list[Listing]:
    return await system.discover(
        skill=args.skill,
        tags=args.tag or (),
        protocol=args.protocol,
        name=args.name,
        healthy=not args.all,
    )


def _print_listings(found: list[Listing], as_json: bool) -> None:
    if as_json:
        stdout().print_json(
            data=[
                {
                    "name": x.name,
                    "service_id": x.service_id,
                    "address": x.address,
                    "url": x.url,
                    "agent_protocol": x.agent_protocol,
                    "protocols": sorted(x.protocols),
                    "skills": sorted(x.skills),
                    "tags": sorted(x.tags),
                    "healthy": x.healthy,
                }
                for x in found
            ]
        )
        return
    table = Table(title=f"{len(found)} agent(s)")
    for col in ("name", "address / url", "skills", "tags", "protocols", "health"):
        table.add_column(col)
    for x in found:
        health = "[green]healthy[/]" if x.healthy else "[red]unhealthy[/]"
        table.add_row(
            escape(x.name),
            escape(x.address or x.url or "-"),
            escape(", ".join(sorted(x.skills))),
            escape(", ".join(sorted(x.tags))),
            escape(", ".join(sorted(x.protocols))),
            health,
        )
    stdout().print(table)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    registry = sub.add_parser(
        "registry",
        parents=[common],
        help="list, show or watch what the namespace's agents offer; serve the registry",
        description="`ls` lists healthy agents (filter by NAME, --skill, --tag, --protocol; "
        "--all includes unhealthy ones), `show NAME` prints the records, `watch` prints the "
        "list at every change. `registry serve` runs the registry service itself (HTTP API, "
        "health checks; `actorbus registry serve --help`).",
    )
    registry.add_argument("action", choices=("ls", "show", "watch", "serve"))
    registry.add_argument("name", nargs="?", help="an actor type or service name")
    registry.add_argument("--skill", help="only agents offering this skill")
    registry.add_argument("--tag", action="append", help="only agents with this tag (repeat)")
    registry.add_argument("--protocol", help="only agents speaking this protocol (a2a, ...)")
    registry.add_argument("--all", action="store_true", help="include unhealthy agents")
    registry.add_argument(
        "--changes", type=int, default=None, help=argparse.SUPPRESS
    )  # watch: stop after N changes (tests)
    bus_options(registry)
    registry.set_defaults(func=cmd_registry)
