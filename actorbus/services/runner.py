"""What the services' ``python -m`` entry points share: argument types and the
run loop (logging set up, Ctrl-C quiet, other failures one line and exit 1)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable


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
