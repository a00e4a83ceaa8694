"""``python -m actorbus.services.gateway``: run one HTTP gateway.

    python -m actorbus.services.gateway --nats nats://127.0.0.1:4222 \\
        --namespace ab --http 127.0.0.1:8480 [--db PATH]

Prints ``gateway <url> namespace <ns>`` and then ``ready`` once it serves (port
0 picks a free port; the line says which) and stops gracefully on SIGTERM or
Ctrl-C (exit status 0).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from actorbus.services import runner
from actorbus.services.gateway.clients import read_token_clients
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
    p.add_argument(
        "--default-agent",
        default=None,
        metavar="NAME",
        help="the agent whose card the site root serves (default: the gateway's own card)",
    )
    p.add_argument("--ask-timeout", type=runner.positive, default=60.0, help="seconds per ask (60)")
    p.add_argument(
        "--idle-timeout",
        type=runner.positive,
        default=GatewaySettings.idle_timeout,
        help="seconds a connection may hold no whole request (silent, slow headers, idle) (15)",
    )
    p.add_argument(
        "--body-timeout",
        type=runner.positive,
        default=GatewaySettings.body_timeout,
        help="seconds a request body may take to arrive (30)",
    )
    p.add_argument(
        "--stream-item-timeout", type=runner.positive, default=300.0, help="seconds per item (300)"
    )
    p.add_argument(
        "--auth",
        choices=["auto", "required", "open"],
        default="auto",
        help="who may ask: auto (authenticated callers when the bus is secured), required, open",
    )
    p.add_argument(
        "--open-agent",
        action="append",
        default=[],
        metavar="NAME",
        help="an agent anyone may ask (repeatable; * for all)",
    )
    p.add_argument(
        "--expose",
        action="append",
        default=None,
        metavar="NAME[,NAME]",
        help="the agents served (repeatable; * for all). Default: all on an open bus; "
        "on a secured one only the --open-agent ones",
    )
    p.add_argument(
        "--rate-limits",
        type=rate_limits,
        default=GatewaySettings.rate_limits,
        metavar="CALLER,PAIR,TOTAL",
        help="messages a minute per caller, per caller and agent, and in all "
        "(default 1000,100,10000)",
    )
    p.add_argument(
        "--request-ids",
        choices=["required", "optional"],
        default="required",
        help="whether a token-bearing request must carry an id a replay is told by "
        "(its protocol's, or an Idempotency-Key header); default required",
    )
    p.add_argument(
        "--token-clients",
        type=Path,
        metavar="FILE",
        help="JSON of the token endpoints' clients: {id: secret}, or {id: {secret: ..., "
        "scopes: [agent:NAME, agent:*, gateway:status]}} to limit what one may have "
        "(default: the namespace's token-clients.json in ACTORBUS_HOME, made with a "
        "client 'dev' on a development machine)",
    )
    p.add_argument(
        "--push-urls",
        choices=["public", "any"],
        default="public",
        help="webhooks A2A push notifications may go to: public https hosts (default), "
        "or any URL (a trusted network; logged)",
    )
    p.add_argument("--no-push", action="store_true", help="serve no A2A push notifications")
    p.add_argument(
        "--js-replicas",
        type=int,
        default=1,
        choices=(1, 3, 5),
        help="replicas of the durable streams it creates (3 on a cluster, as its agents)",
    )
    runner.tls_options(p)
    return p


def token_clients(path: Path | None) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """The clients' secrets in ``--token-clients``, and the scopes of those the file limits."""
    if path is None:
        return {}, {}
    try:
        return read_token_clients(path)
    except ValueError as exc:
        raise SystemExit(f"gateway: --token-clients: {exc}") from None


def rate_limits(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError("three positive numbers: CALLER,PAIR,TOTAL")
    a, b, c = (int(p) for p in parts)
    return a, b, c


def exposed(names: list[str] | None) -> tuple[str, ...] | None:
    if names is None:
        return None
    return tuple(n.strip() for joined in names for n in joined.split(",") if n.strip())


async def run(args: argparse.Namespace) -> None:
    host, port = args.http
    secrets, scopes = token_clients(args.token_clients)
    settings = GatewaySettings(
        http_host=host,
        http_port=port,
        db_path=args.db,
        edges=tuple(e.strip() for e in args.edges.split(",") if e.strip()),
        public_url=args.public_url,
        default_agent=args.default_agent,
        ask_timeout=args.ask_timeout,
        stream_item_timeout=args.stream_item_timeout,
        idle_timeout=args.idle_timeout,
        body_timeout=args.body_timeout,
        auth=args.auth,
        open_agents=tuple(args.open_agent),
        expose=exposed(args.expose),
        token_secrets=secrets,
        token_scopes=scopes,
        development_clients=args.token_clients is None,
        request_ids=args.request_ids,
        rate_limits=args.rate_limits,
        push_notifications=not args.no_push,
        push_urls=args.push_urls,
        tls=args.tls,
        js_replicas=args.js_replicas,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
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
