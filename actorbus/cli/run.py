"""``actorbus run``: host actor classes from the user's code on an existing NATS."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import nats.errors
from rich.markup import escape

from actorbus.actors import Actor, ActorSystem
from actorbus.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    STATE_STORE_HELP,
    URL_HELP,
    CliError,
    connect,
    install_stop_signals,
    resolve_url,
    stderr,
    stdout,
)
from actorbus.cli.workers import WORKER_FIELD, Supervisor, check_worker_args, for_worker
from actorbus.codecs.errors import ActorBusError
from actorbus.extras import require

# -- actorbus run ------------------------------------------------------------

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SPEC = re.compile(rf"^(?P<module>{_DOTTED}):(?P<attr>{_DOTTED})$")


@dataclass(frozen=True)
class ActorSpec:
    """A ``module:Class`` argument, resolved to the class it names."""

    text: str
    cls: type[Actor]


def load_actor_class(spec: str) -> type[Actor]:
    """Import ``module:Class`` the way a user means it (relative to the current
    directory), turning every way it can go wrong into one sentence."""
    m = _SPEC.match(spec)
    if m is None:
        hint = ""
        if "/" in spec or spec.split(":", 1)[0].endswith(".py"):
            hint = " (use a dotted module path, not a file path)"
        raise CliError(
            f"invalid actor {spec!r}: expected module:Class, e.g. examples.echo:Echo{hint}",
            EXIT_USAGE,
        )
    module_name, attr = m["module"], m["attr"]
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            raise CliError(
                f"module {module_name!r} not found (looked in {cwd} and installed packages)",
                EXIT_USAGE,
            ) from None
        raise CliError(f"importing {module_name!r} failed: {exc}") from None
    except Exception as exc:
        raise CliError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CliError(f"{module_name!r} has no attribute {attr!r}", EXIT_USAGE) from None
    if not (isinstance(obj, type) and issubclass(obj, Actor)):
        what = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
        raise CliError(
            f"{spec} is not an Actor subclass (it is a {what}); subclass actorbus.Actor to host it",
            EXIT_USAGE,
        )
    try:
        signature = inspect.signature(obj)
    except ValueError:  # pragma: no cover - no signature available (C types)
        return obj
    required = [
        name
        for name, p in signature.parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise CliError(
            f"{spec} needs constructor arguments ({', '.join(required)}); "
            "`actorbus run` creates actors without arguments",
            EXIT_USAGE,
        )
    return obj


async def _host(
    system: ActorSystem, specs: Sequence[ActorSpec], key: str | None, replicas: int | None
) -> list[str]:
    """Spawn or register each class; returns what to tell the user."""
    lines: list[str] = []
    for spec in specs:
        type_name = spec.cls.type_name
        if key is not None:
            n = replicas or 1
            ref = await system.spawn(spec.cls, key=key, replicas=n)
            lines.append(f"{ref.address:<24} {n} replica(s)   {spec.text}")
            continue
        await system.register(spec.cls)
        lines.append(f"{type_name + '/*':<24} on demand      {spec.text}")
        if replicas:
            ref = await system.spawn(spec.cls, key="0", replicas=replicas)
            lines.append(f"{ref.address:<24} {replicas} replica(s)   {spec.text}")
    return lines


async def _run(args: argparse.Namespace, specs: Sequence[ActorSpec]) -> int:
    out = stdout()
    stop = asyncio.Event()
    worker: int | None = getattr(args, "worker", None)
    who = "" if worker is None else f"worker {worker} "
    install_stop_signals(
        stop,
        lambda name: out.print(f"[yellow]{who}{name}[/]: stopping actors"),
        # a worker stops when its supervisor says so (SIGTERM), not on the terminal's Ctrl-C
        signals=(signal.SIGINT, signal.SIGTERM) if worker is None else (signal.SIGTERM,),
    )
    args.url = resolve_url(args.url)
    system = await connect(
        args.url,
        args.namespace,
        args.connect_timeout,
        args.verbose > 0,
        args.js_replicas,
        hosts=[spec.cls.type_name for spec in specs],  # its broker user takes these only
        debug=args.debug,
        state_store=args.state_store,
    )
    watching: asyncio.Task[str] | None = None
    try:
        try:
            lines = await _host(system, specs, args.key, args.replicas)
            # A PING/PONG round trip: once it returns the server has processed every
            # SUB above, so "ready" really means another process can reach us.
            await system.nc.flush(timeout=max(1, round(args.connect_timeout)))
        except (ActorBusError, ValueError) as exc:
            raise CliError(f"cannot host actors: {exc}") from None
        except nats.errors.Error as exc:
            raise CliError(f"cannot host actors: NATS did not confirm: {exc}") from None
        if worker is None:
            out.print(f"connected to [bold]{escape(args.url)}[/] (namespace {args.namespace})")
            for line in lines:
                out.print(f"  [cyan]{escape(line)}[/]")
            # Tools (and tests) wait for this line: everything above is subscribed.
            out.print(f"[bold green]ready[/]: hosting {len(specs)} actor type(s); Ctrl-C to stop")
        else:
            hosted = ", ".join(line.split()[0] for line in lines)
            out.print(f"[bold green]{who}ready[/]: {escape(hosted)} (pid {os.getpid()})")
        watching = _watch(stop, out) if args.reload else None
        while not stop.is_set():
            if args.health_file and system.nc.is_connected:
                _alive(args.health_file)  # this process, its loop and its connection are live
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stop.wait()
            # The runtime gives up after its reconnect deadline; a host with no bus
            # must say so and exit, not sit there looking healthy.
            if system.nc.is_closed:
                raise CliError(f"lost the connection to NATS at {args.url}; giving up")
            if worker is not None and os.getppid() != args.supervisor:
                out.print(f"[yellow]{who}[/]the supervisor is gone: stopping actors")
                break
        if watching is not None and watching.done() and not watching.cancelled():
            args.changed = watching.result()
    finally:
        if watching is not None:
            watching.cancel()
        if args.health_file:
            _alive(args.health_file, no_longer=True)
        await system.close()
    if args.changed:
        return EXIT_OK  # cmd_run starts afresh with the new code
    out.print(f"[green]{who}stopped")
    return EXIT_OK


def _alive(path: str, *, no_longer: bool = False) -> None:
    """Touch (or remove) the health file: a local file, as quick as a clock read."""
    if no_longer:
        Path(path).unlink(missing_ok=True)
    else:
        Path(path).touch()


def _watch(stop: asyncio.Event, out: Any) -> asyncio.Task[str]:
    """Until a Python file under the current directory changes: then ``stop``, and
    the task's result names the file."""
    watchfiles = require("watchfiles", "reload", "actorbus run --reload")

    async def first_change() -> str:
        async for changes in watchfiles.awatch(".", watch_filter=watchfiles.PythonFilter()):
            changed = sorted(path for _, path in changes)[0]
            out.print(f"[yellow]changed[/]: {escape(changed)}; reloading")
            stop.set()
            return str(changed)
        return ""

    return asyncio.ensure_future(first_change())


def _restart() -> NoReturn:
    """This command again, in this process (new code, a clean interpreter)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def cmd_run(args: argparse.Namespace) -> int:
    if args.replicas is not None and args.replicas < 1:
        raise CliError("--replicas must be at least 1", EXIT_USAGE)
    if args.workers is not None:
        check_worker_args(args)
    elif WORKER_FIELD in (args.key or "") + (args.health_file or ""):
        raise CliError(f"{WORKER_FIELD} is filled in only with --workers", EXIT_USAGE)
    args.changed = ""
    if args.reload:  # before anything says ready: a missing extra is said first
        try:
            require("watchfiles", "reload", "actorbus run --reload")
        except ActorBusError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    try:
        specs = [ActorSpec(text, load_actor_class(text)) for text in args.actors]
    except CliError as exc:
        if not args.reload:
            raise
        # a typo while developing: say so, and start again once the file is saved
        stderr().print(f"[bold red]actorbus: error:[/] {escape(str(exc))}; waiting for a change")
        watchfiles = require("watchfiles", "reload", "actorbus run --reload")
        next(iter(watchfiles.watch(".", watch_filter=watchfiles.PythonFilter())))
        _restart()
    if args.workers is not None:
        # imported once here, before the fork: every worker starts warm
        out = stdout()
        return Supervisor(
            count=args.workers,
            restart_delay=args.restart_delay,
            serve=lambda index: asyncio.run(_run(for_worker(args, index), specs)),
            say=lambda text: out.print(f"[dim]supervisor:[/] {escape(text)}"),
        ).run()
    code = asyncio.run(_run(args, specs))
    if args.changed:
        _restart()
    return code


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    run = sub.add_parser(
        "run",
        parents=[common],
        help="host actor classes on an existing NATS server",
        description="Import module:Class actor classes (modules resolve from the current "
        "directory) and host them until Ctrl-C/SIGTERM. Without --key the types "
        "are activated on demand for any key.",
    )
    run.add_argument("actors", nargs="+", metavar="module:Class", help="actor classes to host")
    run.add_argument("--url", default=None, help=URL_HELP)
    run.add_argument("--key", help="spawn at this key (default: activate any key on demand)")
    run.add_argument(
        "--reload",
        action="store_true",
        help="start again when a .py file under the current directory changes (development; "
        "needs actorbus[reload])",
    )
    run.add_argument(
        "--replicas", type=int, help="instances sharing the address (with no --key: at key 0)"
    )
    run.add_argument("--namespace", default="ab", help="subject namespace (default: ab)")
    run.add_argument(
        "--debug",
        action="store_true",
        help="send handlers' tracebacks to their callers (RemoteError.remote_traceback); "
        "the host logs every failure with its traceback either way",
    )
    run.add_argument(
        "--js-replicas",
        type=int,
        default=None,
        choices=(1, 3, 5),
        help="replicas of the JetStream streams and buckets it creates (3 on a cluster; "
        "default: 3 on the cluster `actorbus up --cluster` runs here, else 1)",
    )
    run.add_argument("--state-store", metavar="URL", help=STATE_STORE_HELP)
    run.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="give up if the server cannot be reached (default: 5)",
    )
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="host in N processes forked from this one once the code is imported; one that "
        "dies is started again, warm, after --restart-delay ({worker} in --key and "
        "--health-file is the worker's index; Linux and macOS)",
    )
    run.add_argument(
        "--restart-delay",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="with --workers: wait this long before starting a dead worker again, doubled "
        "while it keeps dying within a second of its start (default: 1)",
    )
    run.add_argument(
        "--health-file",
        metavar="PATH",
        help="touch PATH every second while connected, for a healthcheck of this very "
        "process (compose/healthcheck.py file PATH): a replica checks itself, not the "
        "address its siblings answer too",
    )
    run.set_defaults(func=cmd_run)
