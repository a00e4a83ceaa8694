"""``actorbus state ls|get|rm``: actor state from the shell."""

from __future__ import annotations

import argparse
import asyncio

from rich.markup import escape
from rich.table import Table

from actorbus.actors import ActorSystem
from actorbus.actors.state_admin import read_state, remove_state, state_keys
from actorbus.cli.common import STATE_STORE_HELP, CliError, bus_options, stdout, with_system


def cmd_state(args: argparse.Namespace) -> int:
    return asyncio.run(with_system(args, _state))


async def _state(system: ActorSystem, args: argparse.Namespace) -> None:
    out = stdout()
    rt = system.runtime
    if args.action == "ls":
        found = await state_keys(rt, args.target)
        if args.json:
            out.print_json(data=found)
        elif not found:
            out.print(f"no {escape(args.target)} actor has state")
        else:
            for address in found:
                out.print(escape(address))
        return
    if args.action == "get":
        view = await read_state(rt, args.target)
        if view is None:
            raise CliError(f"{args.target} has no state")
        if args.json or view.state is not None:
            out.print_json(data=view.as_json())
            return
        table = Table(title=f"state of {escape(view.address)}")
        for col, value in view.as_json().items():
            table.add_row(col, escape(str(value)))
        out.print(table)
        out.print("[dim]sealed to the type's key, which this machine's ACTORBUS_HOME does not hold")
        return
    if await remove_state(rt, args.target):
        out.print(f"[yellow]deleted[/] the state of {escape(args.target)}")
    else:
        raise CliError(f"{args.target} has no state")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    state = sub.add_parser(
        "state",
        parents=[common],
        help="list, show or delete actors' persistent state",
        description="`ls TYPE` lists the actors of a type that have state; `get TYPE/KEY` "
        "shows one (opened where this machine's ACTORBUS_HOME holds the type's key, "
        "else its size); `rm TYPE/KEY` deletes it for good (a running activation of it "
        "stops at its next write).",
    )
    state.add_argument("action", choices=("ls", "get", "rm"))
    state.add_argument("target", metavar="TYPE|TYPE/KEY")
    bus_options(state)
    state.add_argument("--state-store", metavar="URL", help=STATE_STORE_HELP)
    state.set_defaults(func=cmd_state)
