"""The ``actorbus`` command: try the demo, run a local NATS, host actors on a bus.

Every command returns an exit code from :func:`main` instead of exiting, so tests
and embedding programs can call it; only the console-script wrapper (and
``python -m actorbus``) turn that into a process exit. Expected failures (bad
input, no server) are one-line messages on stderr, never tracebacks: a
traceback would make a user's typo look like a bug in actorbus.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rich.markup import escape

import actorbus
from actorbus.cli import (
    bench,
    broker,
    demo,
    durable,
    registry,
    route,
    run,
    security,
    send,
    services,
    state,
    trace,
)
from actorbus.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    setup_logging,
    stderr,
)
from actorbus.codecs.errors import ActorBusError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actorbus",
        description="AI agents as actor classes on NATS.",
        epilog="Try `actorbus demo` first; `actorbus COMMAND --help` for details.",
    )
    parser.add_argument("--version", action="version", version=f"actorbus {actorbus.__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)"
    )
    # Subcommands accept -v too; SUPPRESS keeps them from resetting the global count.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="more logging (-vv for debug)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = (
        demo,
        broker,
        run,
        send,
        durable,
        state,
        registry,
        route,
        security,
        services,
        trace,
        bench,
    )
    for command in commands:
        command.add_parser(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    service = services.service_of(argv if argv is not None else sys.argv[1:])
    if service is not None:  # the service parses its own options
        try:
            return services.serve(*service)
        except CliError as exc:
            stderr().print(f"[bold red]actorbus: error:[/] {escape(str(exc))}")
            return exc.code
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    setup_logging(args.verbose)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CliError as exc:
        stderr().print(f"[bold red]actorbus: error:[/] {escape(str(exc))}")
        return exc.code
    except ActorBusError as exc:
        stderr().print(f"[bold red]actorbus: error:[/] {type(exc).__name__}: {escape(str(exc))}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
