"""``actorbus up``: an embedded nats-server (or an N-node cluster) until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from rich.markup import escape

from actorbus.actors import context
from actorbus.bus.cluster import EmbeddedCluster, wait_for_jetstream
from actorbus.bus.server import EmbeddedServer, ServerConfig, ServerStartError
from actorbus.cli.common import EXIT_OK, EXIT_USAGE, CliError, install_stop_signals, stdout
from actorbus.cli.durable import migrate_namespace
from actorbus.security.secure_broker import SecureBroker
from actorbus.security.settings import actorbus_home

# -- actorbus up -------------------------------------------------------------

NATS_PORT = 4222
LAST_PORT = "up-port"  # in ACTORBUS_HOME: where the broker listened when 4222 was taken


async def _up(port: int, store_dir: Path | None, namespaces: list[str], insecure: bool) -> int:
    out = stdout()
    stop = asyncio.Event()
    install_stop_signals(stop, lambda name: out.print(f"[yellow]{name}[/]: stopping nats-server"))
    broker = None if insecure else SecureBroker()
    extra = broker.server_config(namespaces) if broker is not None else ""
    earlier = store_dir is not None and await asyncio.to_thread(_has_files, store_dir)
    server = EmbeddedServer(ServerConfig(port=port, store_dir=store_dir, extra=extra))
    # Started from this (main) thread on purpose: the server is tied to the
    # lifetime of the thread that started it (PR_SET_PDEATHSIG), and only the
    # main thread lives exactly as long as this process.
    try:
        server.start_sync()
    except ServerStartError as exc:
        raise CliError(f"nats-server did not start: {_server_failure(exc)}") from None
    context.record(server.url)  # other commands in other terminals find it there
    _remember_port(server.url)
    try:
        store = f"{server.store_dir}" + ("" if store_dir else " (temporary, removed on exit)")
        if earlier:
            store += " (kept: what earlier runs stored is back)"
        out.print(f"[bold green]nats-server ready[/] at [bold]{server.url}[/]")
        out.print(f"  url         {server.url}")
        out.print(f"  monitoring  {server.monitor_url or '-'}")
        out.print(f"  store       {escape(store)}")
        out.print(f"  pid         {server.pid}")
        if broker is None:
            out.print(
                "  security    [bold red]none[/] (--insecure): anyone on this machine can "
                "read, send and delete anything"
            )
        else:
            out.print(f"  security    NATS JWT auth + TLS; namespaces {', '.join(namespaces)}")
            out.print(f"  CA          {escape(str(broker.tls.ca_file))}")
            out.print(f"  keys        {escape(str(broker.home))} (ACTORBUS_HOME)")
            out.print(
                "[dim]processes on this machine with the same ACTORBUS_HOME join as "
                "members; in code: SecureBroker().connect_options(namespace, name)"
            )
        out.print(
            "[dim]host actors with: actorbus run module:Class (commands here find this "
            "server; elsewhere: --url " + server.url + ")"
        )
        await _migrate(server.url, namespaces)
        out.print("[dim]Ctrl-C to stop")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await stop.wait()
            ended = server.ended()
            if ended is not None:
                raise CliError(
                    f"nats-server (pid {server.pid}) {ended}; its log ended with:\n"
                    f"{server.log_tail()}\n"
                    + (
                        "`actorbus up` again serves what it stored, on the same port: "
                        "processes still reconnecting carry on"
                        if store_dir is not None
                        else "its store was temporary (--ephemeral): what it held is gone"
                    )
                )
    finally:
        context.forget(server.url)
        await asyncio.to_thread(server.stop_sync)
    out.print("[green]stopped")
    return EXIT_OK


async def _migrate(url: str, namespaces: list[str]) -> None:
    """A store kept from an earlier version is moved to this version's layout at
    once (this machine holds the broker's keys), so that no process meets the old one."""
    out = stdout()
    for ns in namespaces:
        try:
            await migrate_namespace(url, ns, 5.0, report=lambda text: out.print(f"  {text}"))
        except Exception as exc:
            out.print(
                f"[bold red]namespace {ns}: its store could not be moved to this version's "
                f"layout[/] ({escape(str(exc))}); try `actorbus migrate --namespace {ns}`"
            )


_KEEPS_DYING = 10.0  # seconds: a node dead again this soon after its restart is given up


async def _node_back(
    cluster: EmbeddedCluster, index: int, ended: str, back_at: dict[int, float]
) -> None:
    """A node died: the others go on (replicated streams keep their quorum) and it
    starts again on its port and store, as a deployment's restart policy would,
    so that its failover can be tried here. One that keeps dying ends the cluster."""
    out, node = stdout(), cluster.nodes[index]
    now = time.monotonic()
    if now - back_at.get(index, float("-inf")) < _KEEPS_DYING:
        raise CliError(
            f"node {index} (pid {node.pid}) {ended} again within {_KEEPS_DYING:g}s of its "
            f"restart; its log ended with:\n{node.log_tail()}"
        )
    out.print(
        f"[yellow]node {index} (pid {node.pid}) {ended}[/]: the other nodes go on; "
        "starting it again on its port and store"
    )
    try:
        await asyncio.to_thread(cluster.restart, index)
        # back once JetStream answers through it (its routes are up again)
        await wait_for_jetstream([cluster.urls[index]], 30.0, **cluster.client)
    except ServerStartError as exc:
        raise CliError(f"node {index} did not start again: {_server_failure(exc)}") from None
    back_at[index] = time.monotonic()
    out.print(f"  node {index}  {node.url}  (pid {node.pid}) back")


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def default_port(port: int) -> int:
    """``--port``; else NATS's own 4222 when it is free (what the nats CLI and every
    example assume); else the port this home's broker listened on last, when it is
    free (hosts still connected to it reconnect there after a restart); else any
    free port (-1)."""
    if port != -1:
        return port
    for candidate in (NATS_PORT, _last_port()):
        if candidate is not None and _bindable(candidate):
            return candidate
    return -1


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        # As the server will bind it: a port whose last connections linger in
        # TIME_WAIT (a restart within a minute) is free; one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _last_port_file() -> Path:
    return actorbus_home() / LAST_PORT


def _last_port() -> int | None:
    try:
        port = int(_last_port_file().read_text())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _remember_port(url: str) -> None:
    port = urlsplit(url).port
    if port is not None and port != NATS_PORT:
        with contextlib.suppress(OSError):
            _last_port_file().write_text(f"{port}\n")


def default_store(args: argparse.Namespace) -> Path | None:
    """``--store-dir``; else, unless ``--ephemeral``, ``$ACTORBUS_HOME/jetstream``
    (``jetstream-cluster`` for a cluster), so that a restarted broker has every
    message it acknowledged; None: a temp dir removed on exit."""
    if args.store_dir:
        if args.ephemeral:
            raise CliError("--store-dir and --ephemeral contradict each other", EXIT_USAGE)
        return Path(args.store_dir).resolve()
    if args.ephemeral:
        return None
    store = actorbus_home() / ("jetstream-cluster" if args.cluster is not None else "jetstream")
    store.mkdir(parents=True, exist_ok=True)
    return store


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
    store = default_store(args)
    if args.cluster is not None:
        if args.cluster < 2:
            raise CliError("--cluster needs at least 2 nodes", EXIT_USAGE)
        return asyncio.run(
            _up_cluster(args.cluster, store, args.namespace or ["ab"], args.insecure)
        )
    port = default_port(args.port)
    return asyncio.run(_up(port, store, args.namespace or ["ab"], args.insecure))


async def _up_cluster(
    size: int, store_dir: Path | None, namespaces: list[str], insecure: bool
) -> int:
    out = stdout()
    stop = asyncio.Event()
    install_stop_signals(stop, lambda name: out.print(f"[yellow]{name}[/]: stopping the cluster"))
    if insecure:
        cluster = EmbeddedCluster(size, store_dir=store_dir)
    else:
        broker = SecureBroker()
        probe = broker.connect_options(namespaces[0], "actorbus-up")
        cluster = EmbeddedCluster(
            size,
            store_dir=store_dir,
            extra=broker.server_config(namespaces),
            client={
                "user_credentials": probe.nats_credentials(),
                "tls": probe.tls,
                "inbox_prefix": probe.inbox_prefix,
            },
        )
    try:
        await cluster.start()
    except ServerStartError as exc:
        raise CliError(f"cluster did not start: {_server_failure(exc)}") from None
    urls = ",".join(node.url for node in cluster.nodes)  # tls:// when secured, as printed
    # every node (a command in another terminal tries each in turn), and the
    # replicas its streams should have, so that a command need not be told
    context.record(urls, replicas=3 if size >= 3 else 1)
    try:
        out.print(f"[bold green]NATS cluster ready[/]: {size} nodes, JetStream on")
        for i, node in enumerate(cluster.nodes):
            out.print(f"  node {i}  {node.url}  (pid {node.pid})")
        out.print(f"  urls    {urls}")
        out.print(f"  store   {escape(str(cluster.dir))}")
        out.print(
            "  security "
            + (
                "[bold red]none[/] (--insecure)"
                if insecure
                else "NATS JWT auth + TLS on every node"
            )
        )
        out.print(
            "[dim]use DurableSettings(replicas=3) for streams that survive a node; a node "
            "that dies is started again on its port and store"
        )
        await _migrate(urls, namespaces)
        out.print("[dim]Ctrl-C to stop")
        back_at: dict[int, float] = {}  # node -> when it was last started again
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await stop.wait()
            for index, node in enumerate(cluster.nodes):
                ended = node.ended()
                if ended is not None:
                    await _node_back(cluster, index, ended, back_at)
    finally:
        context.forget(urls)
        await asyncio.to_thread(cluster.stop_sync)
    out.print("[green]stopped")
    return EXIT_OK


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    up = sub.add_parser(
        "up",
        parents=[common],
        help="run a local nats-server (JetStream on) until Ctrl-C",
        description="Start an embedded nats-server and print its URLs.",
    )
    up.add_argument(
        "--port",
        type=int,
        default=-1,
        help="client port (default: 4222 when free, else the last one when free, else any)",
    )
    up.add_argument(
        "--store-dir",
        metavar="DIR",
        help="JetStream store (default: $ACTORBUS_HOME/jetstream, kept across restarts)",
    )
    up.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep JetStream in a temp dir removed on exit (queued messages do not survive)",
    )
    up.add_argument(
        "--cluster", type=int, metavar="N", help="start an N-node cluster on loopback instead"
    )
    up.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="a namespace whose systems may join (repeatable; default: ab)",
    )
    up.add_argument(
        "--insecure",
        action="store_true",
        help="no authentication and no TLS (the old behaviour; anyone can read and delete)",
    )
    up.set_defaults(func=cmd_up)
