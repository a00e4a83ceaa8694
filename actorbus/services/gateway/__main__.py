"""``python -m actorbus.services.gateway``: run one HTTP gateway.

    python -m actorbus.services.gateway --nats nats://127.0.0.1:4222 \\
        --namespace ab --http 127.0.0.1:8480 [--db PATH]

Prints ``gateway <url> namespace <ns>`` and then ``ready`` once it serves (port
0 picks a free port; the line says which) and stops gracefully on SIGTERM or
Ctrl-C (exit status 0).
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from actorbus.services.gateway.edges import EDGES
from actorbus.services.gateway.service import GatewayService
from actorbus.services.gateway.settings import GatewaySettings
from actorbus.services.runner import host_port, positive, run_main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m actorbus.services.gateway",
        description="Run the actorbus HTTP gateway: actors as A2A (and other protocols') agents.",
    )
    p.add_argument(
        "--nats", default="nats://127.0.0.1:4222", help="NATS URL (comma-separated for several)"
    )
    p.add_argument("--namespace", default="ab", help="actorbus namespace (default: ab)")
    p.add_argument(
        "--http",
        type=host_port,
        default=("127.0.0.1", 8480),
        metavar="HOST:PORT",
        help="where the gateway listens (default 127.0.0.1:8480; port 0: any free port)",
    )
    p.add_argument(
        "--db", default=None, help="SQLite file for tasks (default: a file in the temp dir)"
    )
    p.add_argument(
        "--edges",
        default=",".join(GatewaySettings.edges),
        help=f"protocol edges to serve, comma-separated (default and known: "
        f"{', '.join(sorted(EDGES))})",
    )
    p.add_argument("--public-url", default=None, help="base URL to put in agent cards")
    p.add_argument("--ask-timeout", type=positive, default=60.0, help="seconds per ask (60)")
    p.add_argument(
        "--stream-item-timeout", type=positive, default=300.0, help="seconds per item (300)"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


async def run(args: argparse.Namespace) -> None:
    host, port = args.http
    settings = GatewaySettings(
        http_host=host,
        http_port=port,
        db_path=args.db,
        edges=tuple(e.strip() for e in args.edges.split(",") if e.strip()),
        public_url=args.public_url,
        ask_timeout=args.ask_timeout,
        stream_item_timeout=args.stream_item_timeout,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    urls = [u.strip() for u in args.nats.split(",") if u.strip()]
    async with GatewayService(nats_url=urls, namespace=args.namespace, settings=settings) as gw:
        print(f"gateway {gw.http_url} namespace {gw.namespace}", flush=True)
        print("ready", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    run_main("gateway", args, run)


if __name__ == "__main__":
    main()
