"""What the services' ``python -m`` entry points share: the common arguments
(``--nats``, ``--namespace``, ``--http``, ``--log-level``, ``--tls``), argument types, the
stop signals, and the run loop (logging set up, Ctrl-C quiet, other failures
one line and exit 1)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:80`` too; an empty host is loopback)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def service_parser(
    prog: str, description: str, *, http: tuple[int, str] | None = None
) -> argparse.ArgumentParser:
    """A parser with ``--nats``, ``--namespace``, ``--log-level`` and, when
    ``http`` gives (default port, what listens), ``--http HOST:PORT``."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument(
        "--nats", default="nats://127.0.0.1:4222", help="NATS URL (comma-separated for several)"
    )
    p.add_argument("--namespace", default="ab", help="actorbus namespace (default: ab)")
    if http is not None:
        port, what = http
        p.add_argument(
            "--http",
            type=host_port,
            default=("127.0.0.1", port),
            metavar="HOST:PORT",
            help=f"where {what} listens (default 127.0.0.1:{port}; port 0: any free port)",
        )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def tls_options(p: argparse.ArgumentParser) -> None:
    """``--tls auto|on|off``, ``--tls-cert``, ``--tls-key``: HTTPS for the HTTP face."""
    p.add_argument(
        "--tls",
        choices=("auto", "on", "off"),
        default="auto",
        help="HTTPS: auto (when the bus is secured), on, or off (plain HTTP; logged)",
    )
    p.add_argument("--tls-cert", type=Path, help="HTTPS certificate (PEM; default: the dev one)")
    p.add_argument("--tls-key", type=Path, help="its private key (PEM)")


def nats_urls(text: str) -> list[str]:
    """``--nats``: one URL or several, comma-separated."""
    return [u.strip() for u in text.split(",") if u.strip()]


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT: a service's run waits on it, then stops cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def run_main(
    name: str, args: argparse.Namespace, run: Callable[[argparse.Namespace], Awaitable[None]]
) -> None:
    """Run a service until it stops: ``args.log_level`` sets the logging."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def main() -> None:
        await run(args)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        sys.exit(1)
