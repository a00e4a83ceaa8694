"""``python -m actorbus.services.router``: run a router instance.

    python -m actorbus.services.router --nats nats://127.0.0.1:4222 --http 127.0.0.1:8490

Prints ``router <url> actor <address> namespace <ns>`` and then ``ready`` once it
serves, and stops gracefully on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse

from actorbus.extras import missing
from actorbus.services import runner

try:
    from actorbus.services.router.service import RouterService, RouterSettings
except ImportError as exc:  # aiohttp: the [router] extra
    raise missing("router", "the router service", exc) from exc


def parser() -> argparse.ArgumentParser:
    p = runner.service_parser(
        "python -m actorbus.services.router",
        "Run the router (protocol selection, destination routing) on NATS, with an HTTP face.",
        http=(8490, "the HTTP face"),
    )
    p.add_argument("--no-http", action="store_true", help="serve only the router actor")
    p.add_argument("--key", default="main", help="the router actor's key (default: main)")
    p.add_argument(
        "--auth",
        choices=("auto", "required", "open"),
        default="auto",
        help="POST /route and /observe need a bearer token (router:route, router:observe) "
        "from the namespace's token issuer: auto (when the bus is secured), required, open",
    )
    runner.tls_options(p)
    return p


async def run(args: argparse.Namespace) -> None:
    host, port = args.http
    settings = RouterSettings(
        http_host=host,
        http_port=None if args.no_http else port,
        actor_key=args.key,
        auth=args.auth,
        tls=args.tls,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    stop = runner.stop_on_signals()
    urls = runner.nats_urls(args.nats)
    async with RouterService(nats_url=urls, namespace=args.namespace, settings=settings) as router:
        print(
            f"router {router.http_url or '-'} actor {router.address} namespace {router.namespace}",
            flush=True,
        )
        print("ready", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    runner.run_main("router", args, run)


if __name__ == "__main__":
    main()
