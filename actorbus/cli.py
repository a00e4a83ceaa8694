"""The ``actorbus`` command: try the demo, run a local NATS, host actors on a bus.

Every command returns an exit code from :func:`main` instead of exiting, so tests
and embedding programs can call it; only the console-script wrapper (and
``python -m actorbus``) turn that into a process exit. Expected failures (bad
input, no server) are one-line messages on stderr, never tracebacks: a
traceback would make a user's typo look like a bug in actorbus.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats.errors
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.tree import Tree

import actorbus
from actorbus.actors import Actor, ActorSystem
from actorbus.actors.dead_letters import DeadLetter
from actorbus.actors.directory import Listing
from actorbus.bus.cluster import EmbeddedCluster
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.server import EmbeddedServer, ServerConfig, ServerStartError
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError
from actorbus.demo import DEFAULT_QUESTION, run_demo
from actorbus.telemetry import configure, flush
from actorbus.telemetry.recorder import (
    DEFAULT_TRACE_DIR,
    SpanNode,
    build_tree,
    read_trace,
    recent_traces,
)

# Exit codes: 2 for input the user must fix (argparse uses 2 too), 1 for failures
# at run time, 130 for an interrupt that arrived before we could stop cleanly.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SPEC = re.compile(rf"^(?P<module>{_DOTTED}):(?P<attr>{_DOTTED})$")


class CliError(Exception):
    """An expected failure: its message is shown as is, with ``code`` as exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# -- output ------------------------------------------------------------------
# Machine-read lines (URLs, "ready") are printed with soft_wrap so that rich never
# breaks them at the terminal width; colour is dropped automatically on pipes.


def _stdout() -> Console:
    return Console(soft_wrap=True, highlight=False, emoji=False)


def _stderr() -> Console:
    return Console(stderr=True, soft_wrap=True, highlight=False, emoji=False)


def _setup_logging(verbosity: int) -> None:
    """Configure logging only if nobody has: when ``main`` is called from a program
    (or a test) that set logging up, its configuration wins."""
    root = logging.getLogger()
    if root.handlers:
        return
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = RichHandler(console=_stderr(), show_path=False, show_time=verbosity > 1)
    logging.basicConfig(level=level, format="%(name)s: %(message)s", handlers=[handler])


@contextlib.contextmanager
def _quiet(logger: str, unless: bool) -> Iterator[None]:
    """Silence per-attempt warnings while a failure is still going to be reported
    once, clearly, by the caller."""
    target = logging.getLogger(logger)
    previous = target.level
    if not unless:
        target.setLevel(logging.ERROR)
    try:
        yield
    finally:
        target.setLevel(previous)


# -- signals -----------------------------------------------------------------


def _install_stop_signals(stop: asyncio.Event, on_signal: Callable[[str], None]) -> None:
    """SIGINT/SIGTERM ask for a graceful stop once; a second one uses the default
    action, so a stuck shutdown can still be interrupted."""
    loop = asyncio.get_running_loop()
    if threading.current_thread() is not threading.main_thread():
        return  # signals reach the main thread only; an embedding program stops us

    def handle(sig: signal.Signals) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(s)
        on_signal(sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, handle, sig)
        except NotImplementedError:  # pragma: no cover - Windows event loops
            signal.signal(sig, lambda n, _f: loop.call_soon_threadsafe(handle, signal.Signals(n)))


# -- actorbus demo -----------------------------------------------------------


async def _demo(question: str, as_json: bool) -> int:
    console = Console(quiet=True) if as_json else Console()
    async with ActorSystem.start() as system:
        result = await run_demo(system, question, console)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
        sys.stdout.flush()
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    if not args.trace:
        return asyncio.run(_demo(args.question, args.json))
    return _demo_in_phoenix(args.question, args.json)


def _demo_in_phoenix(question: str, as_json: bool) -> int:
    """The demo with its spans in a local Arize Phoenix, left running to look at."""
    from actorbus.services import trace_ui

    err = _stderr()
    err.print("[dim]starting Arize Phoenix (10-30 s)...[/]")
    try:
        server = trace_ui.start_phoenix()
    except trace_ui.TraceUIError as exc:
        raise CliError(str(exc)) from None
    with server:
        # Before the first ActorSystem: tracing is configured once per process.
        os.environ.update(server.otel_env(service_name="actorbus-demo"))
        trace_id = asyncio.run(_demo_traced(question, as_json))
        spans = server.client().wait_for_spans(trace_id, 1, timeout=15)
        err.print(escape(trace_ui.format_tree(spans)))
        err.print(f"trace:   [bold]{server.trace_url(trace_id)}[/]")
        err.print(f"phoenix: {server.ui_url}  [dim](Ctrl-C stops it)[/]")
        with contextlib.suppress(KeyboardInterrupt):
            server.wait()
    return EXIT_OK


async def _demo_traced(question: str, as_json: bool) -> str:
    """Run the demo under one root span, so the whole flow is one trace."""
    from opentelemetry import trace

    configure()  # from the environment just set: the root span must be a real one
    with trace.get_tracer("actorbus.cli").start_as_current_span("actorbus demo") as root:
        await _demo(question, as_json)
    flush()
    return format(root.get_span_context().trace_id, "032x")


# -- actorbus up -------------------------------------------------------------


async def _up(port: int, store_dir: Path | None) -> int:
    out = _stdout()
    stop = asyncio.Event()
    _install_stop_signals(stop, lambda name: out.print(f"[yellow]{name}[/]: stopping nats-server"))
    server = EmbeddedServer(ServerConfig(port=port, store_dir=store_dir))
    # Started from this (main) thread on purpose: the server is tied to the
    # lifetime of the thread that started it (PR_SET_PDEATHSIG), and only the
    # main thread lives exactly as long as this process.
    try:
        server.start_sync()
    except ServerStartError as exc:
        raise CliError(f"nats-server did not start: {_server_failure(exc)}") from None
    try:
        store = f"{server.store_dir}" + ("" if store_dir else " (temporary, removed on exit)")
        out.print(f"[bold green]nats-server ready[/] at [bold]{server.url}[/]")
        out.print(f"  url         {server.url}")
        out.print(f"  monitoring  {server.monitor_url or '-'}")
        out.print(f"  store       {escape(store)}")
        out.print(f"  pid         {server.pid}")
        out.print("[dim]connect actors with: actorbus run module:Class --url " + server.url)
        out.print("[dim]Ctrl-C to stop")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await stop.wait()
            if not server.running:
                raise CliError(f"nats-server exited unexpectedly:\n{server.log_tail()}")
    finally:
        await asyncio.to_thread(server.stop_sync)
    out.print("[green]stopped")
    return EXIT_OK


_SERVER_LOG_LINE = re.compile(r"^\[\d+\] \S+ \S+ \[(?P<level>[A-Z]{3})\] (?P<text>.*)$")


def _server_failure(exc: ServerStartError) -> str:
    """The server's own fatal/error line out of its log tail: the one line that
    says what went wrong ("address already in use"), not twenty lines of banner."""
    lines = str(exc).splitlines()
    for line in reversed(lines):
        m = _SERVER_LOG_LINE.match(line.strip())
        if m and m["level"] in ("FTL", "ERR"):
            return m["text"]
    return lines[0] if lines else type(exc).__name__


def cmd_up(args: argparse.Namespace) -> int:
    store = Path(args.store_dir).resolve() if args.store_dir else None
    if args.cluster is not None:
        if args.cluster < 2:
            raise CliError("--cluster needs at least 2 nodes", EXIT_USAGE)
        return asyncio.run(_up_cluster(args.cluster, store))
    return asyncio.run(_up(args.port, store))


async def _up_cluster(size: int, store_dir: Path | None) -> int:
    out = _stdout()
    stop = asyncio.Event()
    _install_stop_signals(stop, lambda name: out.print(f"[yellow]{name}[/]: stopping the cluster"))
    cluster = EmbeddedCluster(size, store_dir=store_dir)
    try:
        await cluster.start()
    except ServerStartError as exc:
        raise CliError(f"cluster did not start: {_server_failure(exc)}") from None
    try:
        urls = ",".join(cluster.urls)
        out.print(f"[bold green]NATS cluster ready[/]: {size} nodes, JetStream on")
        for i, node in enumerate(cluster.nodes):
            out.print(f"  node {i}  {node.url}  (pid {node.pid})")
        out.print(f"  urls    {urls}")
        out.print(f"  store   {escape(str(cluster.dir))}")
        out.print("[dim]use DurableSettings(replicas=3) for streams that survive a node")
        out.print("[dim]Ctrl-C to stop")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await stop.wait()
            if not cluster.running:
                raise CliError("a cluster node exited unexpectedly")
    finally:
        await asyncio.to_thread(cluster.stop_sync)
    out.print("[green]stopped")
    return EXIT_OK


# -- actorbus run ------------------------------------------------------------


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


async def _connect(
    url: str, namespace: str, wait_s: float, verbose: bool, js_replicas: int = 1
) -> ActorSystem:
    # The first contact gives up after a few quick tries; the timeout also bounds
    # a server that accepts TCP but never answers the NATS handshake.
    hint = "(is a server running? start one with `actorbus up`)"
    try:
        with _quiet("actorbus.bus", unless=verbose):
            async with asyncio.timeout(wait_s):
                # "nats://a:4222,nats://b:4222": every node of a cluster, tried in turn
                servers = [u.strip() for u in url.split(",") if u.strip()]
                return await ActorSystem.connect(
                    servers, namespace=namespace, durable=DurableSettings(replicas=js_replicas)
                )
    except TimeoutError:
        raise CliError(f"cannot connect to NATS at {url} within {wait_s:g}s {hint}") from None
    except ActorBusError as exc:
        raise CliError(f"{exc} {hint}") from None


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
    out = _stdout()
    stop = asyncio.Event()
    _install_stop_signals(stop, lambda name: out.print(f"[yellow]{name}[/]: stopping actors"))
    system = await _connect(
        args.url, args.namespace, args.connect_timeout, args.verbose > 0, args.js_replicas
    )
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
        out.print(f"connected to [bold]{escape(args.url)}[/] (namespace {args.namespace})")
        for line in lines:
            out.print(f"  [cyan]{escape(line)}[/]")
        # Tools (and tests) wait for this line: everything above is subscribed.
        out.print(f"[bold green]ready[/]: hosting {len(specs)} actor type(s); Ctrl-C to stop")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stop.wait()
            # The runtime gives up after its reconnect deadline; a host with no bus
            # must say so and exit, not sit there looking healthy.
            if system.nc.is_closed:
                raise CliError(f"lost the connection to NATS at {args.url}; giving up")
    finally:
        await system.close()
    out.print("[green]stopped")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    if args.replicas is not None and args.replicas < 1:
        raise CliError("--replicas must be at least 1", EXIT_USAGE)
    specs = [ActorSpec(text, load_actor_class(text)) for text in args.actors]
    return asyncio.run(_run(args, specs))


# -- durable queues: dead letters and depth ----------------------------------


def cmd_dlq(args: argparse.Namespace) -> int:
    return asyncio.run(_with_system(args, _dlq))


def cmd_queue(args: argparse.Namespace) -> int:
    return asyncio.run(_with_system(args, _queue))


async def _with_system(
    args: argparse.Namespace, work: Callable[[ActorSystem, argparse.Namespace], Any]
) -> int:
    system = await _connect(args.url, args.namespace, args.connect_timeout, args.verbose > 0)
    try:
        await work(system, args)
    finally:
        await system.close()
    return EXIT_OK


async def _dlq(system: ActorSystem, args: argparse.Namespace) -> None:
    out = _stdout()
    if args.action == "ls":
        letters = await system.dead_letters(args.address, limit=args.limit)
        if args.json:
            out.print_json(data=[_letter_json(letter) for letter in letters])
            return
        if not letters:
            out.print("no dead letters")
            return
        table = Table(title="dead letters")
        for col in ("seq", "address", "attempts", "code", "reason"):
            table.add_column(col)
        for letter in letters:
            table.add_row(
                str(letter.seq),
                letter.address,
                str(letter.attempts),
                letter.code,
                escape(letter.reason),
            )
        out.print(table)
        return
    if args.seq is None:
        raise CliError(f"dlq {args.action} needs the dead letter's seq", EXIT_USAGE)
    if args.action == "show":
        letter = await system.get_dead_letter(args.seq)
        data = _letter_json(letter)
        data["envelope"] = letter.envelope().model_dump(mode="json")
        out.print_json(data=data)
    elif args.action == "replay":
        await system.replay_dead_letter(args.seq)
        out.print(f"[green]replayed[/] dead letter #{args.seq}")
    else:
        await system.drop_dead_letter(args.seq)
        out.print(f"[yellow]dropped[/] dead letter #{args.seq}")


def _letter_json(letter: DeadLetter) -> dict[str, Any]:
    return {
        "seq": letter.seq,
        "address": letter.address,
        "attempts": letter.attempts,
        "code": letter.code,
        "reason": letter.reason,
        "envelope_id": letter.envelope_id,
    }


async def _queue(system: ActorSystem, args: argparse.Namespace) -> None:
    stats = await system.queue_stats(args.address)
    data = dataclasses.asdict(stats)
    if args.json:
        _stdout().print_json(data=data)
        return
    table = Table(title=f"durable queue of {args.address}")
    for col in data:
        table.add_column(col, justify="right")
    table.add_row(*(str(v) for v in data.values()))
    _stdout().print(table)


# -- history and rerun: stored messages ---------------------------------------


def cmd_history(args: argparse.Namespace) -> int:
    return asyncio.run(_with_system(args, _history))


async def _history(system: ActorSystem, args: argparse.Namespace) -> None:
    picked = [x for x in (args.address, args.session, args.topic) if x]
    if len(picked) != 1:
        raise CliError("give exactly one of ADDRESS, --session or --topic")
    since = _parse_since(args.since) if args.since else None
    found = system.history(
        address=args.address,
        session_id=args.session,
        topic=args.topic,
        since_seq=args.since_seq,
        since=since,
    )
    if args.rerun_to:
        await _rerun(system, found, args.rerun_to, args.json)
        return
    rows = [env.model_dump(mode="json") async for env in found]
    if args.json:
        _stdout().print_json(data=rows)
        return
    table = Table(title=f"{len(rows)} stored message(s)")
    for col in ("time", "id", "src", "dst", "intent", "session"):
        table.add_column(col)
    for row in rows:
        when = datetime.fromtimestamp(row["ts"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        table.add_row(
            when[:-3],
            row["id"],
            escape(row["src"]),
            escape(row["dst"]),
            escape(row["intent"]),
            escape(str(row["context"].get("session_id") or "")),
        )
    _stdout().print(table)


async def _rerun(
    system: ActorSystem, found: AsyncIterator[Envelope], target: str, as_json: bool
) -> None:
    """Send stored messages again to ``target``, durably and in order, with progress."""
    envelopes = [env async for env in found]

    async def each() -> AsyncIterator[Envelope]:
        for env in envelopes:
            yield env
            progress.advance(task)

    with Progress(
        SpinnerColumn(),
        TextColumn("rerun to {task.fields[target]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=_stderr(),
        disable=as_json,
    ) as progress:
        task = progress.add_task("rerun", total=len(envelopes), target=target)
        sent = await system.rerun(each(), target)
    if as_json:
        _stdout().print_json(data={"sent": sent, "to": target})
    else:
        _stdout().print(f"sent {sent} message(s) to {escape(target)}")


def _parse_since(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"--since wants an ISO time like 2026-11-23T08:00:00, not {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# -- trace: a recorded flow as a tree -------------------------------------------


def cmd_trace(args: argparse.Namespace) -> int:
    directory = Path(args.dir or os.environ.get("ACTORBUS_TRACE_DIR") or DEFAULT_TRACE_DIR)
    if not directory.is_dir():
        raise CliError(
            f"no recorded spans in {directory} (run with ACTORBUS_TRACE_DIR={directory} set)"
        )
    if args.trace_id is None:
        roots = recent_traces(directory, args.limit)
        if args.json:
            _stdout().print_json(data=roots)
            return EXIT_OK
        table = Table(title=f"recent traces in {directory}")
        for col in ("trace id", "root span", "service", "ms"):
            table.add_column(col)
        for r in roots:
            ms = ((r.get("end") or 0) - (r.get("start") or 0)) / 1e6
            table.add_row(r["trace_id"], escape(r["name"]), str(r.get("service")), f"{ms:.1f}")
        _stdout().print(table)
        return EXIT_OK
    records = read_trace(directory, args.trace_id)
    if not records:
        raise CliError(f"no spans of trace {args.trace_id!r} in {directory}")
    if args.json:
        _stdout().print_json(data=records)
        return EXIT_OK
    tree = Tree(f"trace [bold]{records[0]['trace_id']}[/] ({len(records)} spans)")
    for root in build_tree(records):
        _grow(tree, root)
    _stdout().print(tree)
    return EXIT_OK


def _grow(parent: Tree, node: SpanNode) -> None:
    rec = node.record
    attrs = rec.get("attributes") or {}
    bad = "[red]✗[/] " if rec.get("status") == "ERROR" else ""
    extra = " ".join(
        f"{key.split('.')[-1]}={escape(str(attrs[key]))}"
        for key in ("actorbus.intent", "actorbus.delivery", "actorbus.attempt")
        if key in attrs
    )
    label = (
        f"{bad}[bold]{escape(rec['name'])}[/] [dim]{rec.get('kind', '').lower()} · "
        f"{rec.get('service')} · {node.duration_ms:.2f} ms[/] {extra}"
    )
    branch = parent.add(label)
    for child in node.children:
        _grow(branch, child)


# -- registry: what the namespace offers ---------------------------------------


def cmd_registry(args: argparse.Namespace) -> int:
    return asyncio.run(_with_system(args, _registry))


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
        _stdout().print_json(data=records if len(records) > 1 else records[0])
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
                _stdout().rule(f"index {index}")
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
        _stdout().print_json(
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
    _stdout().print(table)


def _bus_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        required=True,
        help="NATS server URL, e.g. nats://127.0.0.1:4222 (a comma list for a cluster)",
    )
    p.add_argument("--namespace", default="ab", help="subject namespace (default: ab)")
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="give up if the server cannot be reached (default: 5)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


# -- parser and entry point --------------------------------------------------


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

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run a small multi-agent flow on an embedded nats-server",
        description="Planner, readers, aggregator, narrator and monitor answer a question "
        "deterministically, showing ask, fan-out, pub/sub and streaming.",
    )
    demo.add_argument("--question", default=DEFAULT_QUESTION, help="what to ask the team")
    demo.add_argument("--json", action="store_true", help="print a JSON result instead")
    demo.add_argument(
        "--trace",
        action="store_true",
        help="send the demo's spans to a local Arize Phoenix and keep it open "
        "(install it with `python -m actorbus.services.trace_ui --install`)",
    )
    demo.set_defaults(func=cmd_demo)

    up = sub.add_parser(
        "up",
        parents=[common],
        help="run a local nats-server (JetStream on) until Ctrl-C",
        description="Start an embedded nats-server and print its URLs.",
    )
    up.add_argument("--port", type=int, default=-1, help="client port (default: a free one)")
    up.add_argument(
        "--store-dir", metavar="DIR", help="JetStream store (default: a temp dir removed on exit)"
    )
    up.add_argument(
        "--cluster", type=int, metavar="N", help="start an N-node cluster on loopback instead"
    )
    up.set_defaults(func=cmd_up)

    run = sub.add_parser(
        "run",
        parents=[common],
        help="host actor classes on an existing NATS server",
        description="Import module:Class actor classes (modules resolve from the current "
        "directory) and host them until Ctrl-C/SIGTERM. Without --key the types "
        "are activated on demand for any key.",
    )
    run.add_argument("actors", nargs="+", metavar="module:Class", help="actor classes to host")
    run.add_argument(
        "--url",
        required=True,
        help="NATS server URL, e.g. nats://127.0.0.1:4222 (a comma list for a cluster)",
    )
    run.add_argument("--key", help="spawn at this key (default: activate any key on demand)")
    run.add_argument(
        "--replicas", type=int, help="instances sharing the address (with no --key: at key 0)"
    )
    run.add_argument("--namespace", default="ab", help="subject namespace (default: ab)")
    run.add_argument(
        "--js-replicas",
        type=int,
        default=1,
        choices=(1, 3, 5),
        help="replicas of the JetStream streams and buckets it creates (3 on a cluster)",
    )
    run.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="give up if the server cannot be reached (default: 5)",
    )
    run.set_defaults(func=cmd_run)

    dlq = sub.add_parser(
        "dlq",
        parents=[common],
        help="list, show, replay or drop dead letters of durable queues",
        description="Dead letters are durable messages that ran out of attempts (or could "
        "never succeed). `replay` sends one to its actor again; `drop` deletes it.",
    )
    dlq.add_argument("action", choices=("ls", "show", "replay", "drop"))
    dlq.add_argument("seq", type=int, nargs="?", help="the dead letter (from `dlq ls`)")
    dlq.add_argument("--address", help="only this actor's dead letters (ls)")
    dlq.add_argument("--limit", type=int, default=100, help="at most this many (ls)")
    _bus_options(dlq)
    dlq.set_defaults(func=cmd_dlq)

    queue = sub.add_parser(
        "queue",
        parents=[common],
        help="depth and lag of an actor's durable queue",
        description="Messages stored and not yet delivered, in flight, redelivered.",
    )
    queue.add_argument("address", help="the actor address, type/key")
    _bus_options(queue)
    queue.set_defaults(func=cmd_queue)

    registry = sub.add_parser(
        "registry",
        parents=[common],
        help="list, show or watch what the namespace's agents offer",
        description="`ls` lists healthy agents (filter by NAME, --skill, --tag, --protocol; "
        "--all includes unhealthy ones), `show NAME` prints the records, `watch` prints the "
        "list at every change. The registry service itself (HTTP API, health checks) runs "
        "with `python -m actorbus.services.registry`.",
    )
    registry.add_argument("action", choices=("ls", "show", "watch"))
    registry.add_argument("name", nargs="?", help="an actor type or service name")
    registry.add_argument("--skill", help="only agents offering this skill")
    registry.add_argument("--tag", action="append", help="only agents with this tag (repeat)")
    registry.add_argument("--protocol", help="only agents speaking this protocol (a2a, ...)")
    registry.add_argument("--all", action="store_true", help="include unhealthy agents")
    registry.add_argument(
        "--changes", type=int, default=None, help=argparse.SUPPRESS
    )  # watch: stop after N changes (tests)
    _bus_options(registry)
    registry.set_defaults(func=cmd_registry)

    history = sub.add_parser(
        "history",
        parents=[common],
        help="stored messages of an actor, a session or a topic; --rerun-to sends them again",
        description="Reads the durable stream (and kept topics) oldest first, from --since-seq "
        "or --since. With --rerun-to ADDRESS the messages are sent again, durably and in "
        "order, to that actor (say, a new version of an agent), with a progress bar.",
    )
    history.add_argument("address", nargs="?", help="an actor address, type/key")
    history.add_argument("--session", help="a session id instead of an address")
    history.add_argument("--topic", help="a topic (pattern) instead of an address")
    history.add_argument("--since-seq", type=int, help="from this stream sequence")
    history.add_argument("--since", help="from this time (ISO 8601; UTC unless it says)")
    history.add_argument("--rerun-to", metavar="ADDRESS", help="send them again to ADDRESS")
    _bus_options(history)
    history.set_defaults(func=cmd_history)

    tracecmd = sub.add_parser(
        "trace",
        parents=[common],
        help="print a recorded flow as a tree (or list recent traces)",
        description="Reads the spans that processes run with ACTORBUS_TRACE_DIR set recorded "
        "there (one JSON-lines file per process) and prints one trace as a tree of "
        "send/receive/process spans. Without TRACE_ID: the latest traces.",
    )
    tracecmd.add_argument("trace_id", nargs="?", help="a trace id (a unique prefix is enough)")
    tracecmd.add_argument(
        "--dir",
        help=f"the recording directory (default: $ACTORBUS_TRACE_DIR or {DEFAULT_TRACE_DIR})",
    )
    tracecmd.add_argument("--limit", type=int, default=20, help="recent traces to list (20)")
    tracecmd.add_argument("--json", action="store_true", help="print JSON for scripts")
    tracecmd.set_defaults(func=cmd_trace)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    _setup_logging(args.verbose)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CliError as exc:
        _stderr().print(f"[bold red]actorbus: error:[/] {escape(str(exc))}")
        return exc.code
    except ActorBusError as exc:
        _stderr().print(f"[bold red]actorbus: error:[/] {type(exc).__name__}: {escape(str(exc))}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
