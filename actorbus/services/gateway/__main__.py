"""``python -m actorbus.services.gateway``: run one HTTP gateway.

    python -m actorbus.services.gateway --nats nats://127.0.0.1:4222 \\
        --namespace ab --http 127.0.0.1:8480 [--db PATH]

Prints ``gateway <url> namespace <ns>`` and then ``ready`` once it serves (port
0 picks a free port; the line says which) and stops gracefully on SIGTERM or
Ctrl-C (exit status 0).
"""

from __future__ import annotations

import argparse

from actorbus.services import runner
from actorbus.services.gateway.edges import EDGES
from actorbus.services.gateway.service import GatewayService
from actorbus.services.gateway.settings import GatewaySettings


def parser() -> argparse.ArgumentParser:
    p = runner.service_parser(
        "python -m actorbus.services.gateway",
        "Run the actorbus HTTP gateway: actors as A2A (and other protocols') agents.",
        http=(8480, "the gateway"),
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
    p.add_argument("--ask-timeout", type=runner.positive, default=60.0, help="seconds per ask (60)")
    p.add_argument(
        "--stream-item-timeout", type=runner.positive, default=300.0, help="seconds per item (300)"
    )
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
    stop = runner.stop_on_signals()
    urls = runner.nats_urls(args.nats)
    async with GatewayService(nats_url=urls, namespace=args.namespace, settings=settings) as gw:
        print(f"gateway {gw.http_url} namespace {gw.namespace}", flush=True)
        print("ready", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    runner.run_main("gateway", args, run)


if __name__ == "__main__":
    main()
