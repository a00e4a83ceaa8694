"""What every ``actorbus`` command shares: exit codes, the expected-failure error,
consoles and logging, stop signals, and connecting to the bus.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.logging import RichHandler

from actorbus import environment as env
from actorbus.actors import ActorSystem
from actorbus.actors.context import env_url, recorded_replicas, recorded_url
from actorbus.bus.jetstream import DurableSettings
from actorbus.codecs.errors import ActorBusError, ConnectionLostError, StateError
from actorbus.extras import require
from actorbus.security.secure_broker import admin_connect_options, join_options
from actorbus.security.settings import actorbus_home
from actorbus.state.postgres_store import PostgresStateStore
from actorbus.state.store import StateSettings

# Exit codes: 2 for input the user must fix (argparse uses 2 too), 1 for failures
# at run time, 130 for an interrupt that arrived before we could stop cleanly.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: its message is shown as is, with ``code`` as exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# -- output ------------------------------------------------------------------
# Machine-read lines (URLs, "ready") are printed with soft_wrap so that rich never
# breaks them at the terminal width; colour is dropped automatically on pipes.


def _console(*, to_stderr: bool) -> Console:
    """Rich output; piped (not a terminal), as wide as it needs, so tables and
    ids are never cut at 80 columns for the program reading them."""
    wide = None if Console(stderr=to_stderr).is_terminal else 100_000
    return Console(stderr=to_stderr, soft_wrap=True, highlight=False, emoji=False, width=wide)


def stdout() -> Console:
    return _console(to_stderr=False)


def stderr() -> Console:
    return _console(to_stderr=True)


def setup_logging(verbosity: int) -> None:
    """Configure logging only if nobody has: when ``main`` is called from a program
    (or a test) that set logging up, its configuration wins."""
    root = logging.getLogger()
    if root.handlers:
        return
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    console = stderr()
    handler: logging.Handler
    if console.is_terminal:
        handler = RichHandler(console=console, show_path=False, show_time=verbosity > 1)
        fmt = "%(name)s: %(message)s"
    else:  # piped: plain lines (rich would pad each to the console's width)
        handler = logging.StreamHandler(sys.stderr)
        fmt = "%(asctime)s " if verbosity > 1 else ""
        fmt += "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, format=fmt, handlers=[handler])


@contextlib.contextmanager
def quiet(logger: str, unless: bool) -> Iterator[None]:
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


def install_stop_signals(
    stop: asyncio.Event,
    on_signal: Callable[[str], None],
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> None:
    """SIGINT/SIGTERM ask for a graceful stop once; a second one uses the default
    action, so a stuck shutdown can still be interrupted."""
    loop = asyncio.get_running_loop()
    if threading.current_thread() is not threading.main_thread():
        return  # signals reach the main thread only; an embedding program stops us

    def handle(sig: signal.Signals) -> None:
        for s in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(s)
        on_signal(sig.name)
        stop.set()

    for sig in signals:
        try:
            loop.add_signal_handler(sig, handle, sig)
        except NotImplementedError:  # pragma: no cover - Windows event loops
            signal.signal(sig, lambda n, _f: loop.call_soon_threadsafe(handle, signal.Signals(n)))


async def connect(
    url: str,
    namespace: str,
    wait_s: float,
    verbose: bool,
    js_replicas: int | None = None,
    hosts: Sequence[str] | None = None,
    debug: bool = False,
    state_store: str | None = None,
    admin: bool = False,
) -> ActorSystem:
    """A system for a command: on a secured broker its user may subscribe to the
    subjects of ``hosts`` (actor types) and no other type's. Without ``hosts``
    (the commands that look after queues and send: ``dlq``, ``queue``,
    ``history``, ``ask``, ``tell``...) it is not limited to types: these are the
    operator's tools, run where its keys are, and they read every type's queue.
    ``admin``: as the broker's admin where this machine holds its operator keys
    (what deletes a stream's messages: ``dlq replay``, ``dlq drop``)."""
    # The first contact gives up after a few quick tries; the timeout also bounds
    # a server that accepts TCP but never answers the NATS handshake.
    hint = "(is a server running? start one with `actorbus up`)"
    # not given: the cluster's, when `actorbus up --cluster` runs it here; else one
    replicas = js_replicas or recorded_replicas(url) or 1
    try:
        state = state_settings(state_store, namespace)
    except ActorBusError as exc:  # a missing extra
        raise CliError(str(exc)) from None
    try:
        with quiet("actorbus.bus", unless=verbose):
            async with asyncio.timeout(wait_s):
                # "nats://a:4222,nats://b:4222": every node of a cluster, tried in turn
                servers = [u.strip() for u in url.split(",") if u.strip()]
                try:  # a secured `actorbus up` on this machine: joined as a member
                    joining = await join_options(
                        servers[0], namespace, "actorbus-cli", wait_s, hosts=hosts
                    )
                except ConnectionLostError:
                    raise TimeoutError from None  # said below, as for any failed contact
                if admin and "security" in joining and operator_keys_here():
                    joining["connect_options"] = admin_connect_options(namespace)
                system = await ActorSystem.connect(
                    servers,
                    namespace=namespace,
                    durable=DurableSettings(replicas=replicas),
                    debug=debug,
                    state=state,
                    **joining,
                )
    except TimeoutError:
        raise CliError(f"cannot connect to NATS at {url} within {wait_s:g}s {hint}") from None
    except ConnectionLostError as exc:
        raise CliError(refused_advice(exc, url) or f"{exc} {hint}") from None
    except ActorBusError as exc:  # a missing extra, a bad setting: not about the server
        raise CliError(str(exc)) from None
    if state is not None and isinstance(state.store, PostgresStateStore):
        try:  # a wrong URL, a database down: said as the command starts
            await state.store.open()
        except StateError as exc:
            await system.close()
            raise CliError(f"--state-store: {exc}") from None
    return system


def operator_keys_here() -> bool:
    """Whether this machine's ``ACTORBUS_HOME`` holds the broker's operator keys
    (``actorbus up`` made them here), from which its admin user is issued."""
    return (actorbus_home() / "broker" / "operator.nk").exists()


def state_settings(url: str | None, namespace: str) -> StateSettings | None:
    """The state store ``--state-store`` (else ``ACTORBUS_STATE_STORE``) names: a
    ``postgresql://`` URL, or ``nats`` for the default (JetStream key-value on the
    bus; None here). CliError for anything else."""
    url = url or env.ACTORBUS_STATE_STORE.get()
    if url is None or url == "nats":
        return None
    scheme = url.partition("://")[0]
    if scheme not in ("postgresql", "postgres"):
        raise CliError(
            f"--state-store {url.split('@')[-1]!r}: give a postgresql:// URL, or nats for "
            "the bus's own key-value store",
            EXIT_USAGE,
        )
    require("asyncpg", "postgres", "--state-store postgresql://")  # said now, not per turn
    return StateSettings(store=PostgresStateStore(url, namespace=namespace))


STATE_STORE_HELP = (
    "where actors' state is kept: a postgresql:// URL (needs actorbus[postgres]), or nats "
    "(default: $ACTORBUS_STATE_STORE, else JetStream key-value on the bus)"
)


def refused_advice(exc: ConnectionLostError, url: str) -> str | None:
    """What to do, on the command line, about a server that refused us."""
    home = actorbus_home()
    if exc.refused == "untrusted-certificate":
        return (
            f"cannot connect to NATS at {url}: its TLS certificate is not signed by a CA "
            f"this machine's ACTORBUS_HOME ({home}) trusts; run the command with the "
            "ACTORBUS_HOME of the `actorbus up` (or `actorbus security deploy`) that made "
            "the server's certificate"
        )
    if exc.refused == "tls":
        return (
            f"cannot connect to NATS at {url}: TLS was refused; does the URL's scheme match "
            "the server (tls:// for a secured one, nats:// for `actorbus up --insecure`)?"
        )
    if exc.refused == "unauthorized":
        return (
            f"cannot connect to NATS at {url}: the server takes only authenticated members "
            f"and ACTORBUS_HOME ({home}) holds no credentials it trusts; use the "
            "ACTORBUS_HOME of the `actorbus up` that runs it"
        )
    return None


def resolve_url(given: str | None) -> str:
    """``--url``, else ``$ACTORBUS_URL``/``$NATS_URL``, else the running ``actorbus up``
    (see :mod:`actorbus.actors.context`)."""
    found = given or env_url() or recorded_url()
    if found:
        return found
    raise CliError(
        "which NATS server? give --url, set ACTORBUS_URL (or NATS_URL), or start one "
        "with `actorbus up` (other commands then find it by themselves)",
        EXIT_USAGE,
    )


async def with_system(
    args: argparse.Namespace,
    work: Callable[[ActorSystem, argparse.Namespace], Any],
    *,
    admin: bool = False,
) -> int:
    args.url = resolve_url(args.url)
    system = await connect(
        args.url,
        args.namespace,
        args.connect_timeout,
        args.verbose > 0,
        state_store=getattr(args, "state_store", None),
        admin=admin,
    )
    try:
        await work(system, args)
    finally:
        await system.close()
    return EXIT_OK


URL_HELP = (
    "NATS server URL, e.g. nats://127.0.0.1:4222 (a comma list for a cluster); default: "
    "$ACTORBUS_URL, $NATS_URL, else the server `actorbus up` runs"
)


def bus_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help=URL_HELP)
    p.add_argument("--namespace", default="ab", help="subject namespace (default: ab)")
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="give up if the server cannot be reached (default: 5)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
