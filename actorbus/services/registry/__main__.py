"""``python -m actorbus.services.registry``: run one registry instance.

    python -m actorbus.services.registry --nats nats://127.0.0.1:4222 \\
        --namespace ab --http 127.0.0.1:8470

Prints ``registry <url> instance <id> namespace <ns>`` and then ``ready`` once
it serves (port 0 picks a free port; the line says which), and stops
gracefully on SIGTERM or Ctrl-C (stepping down as leader, so another instance
takes over at once).
"""

from __future__ import annotations

import argparse

from actorbus.services import runner
from actorbus.services.registry.service import RegistryService, RegistrySettings


def parser() -> argparse.ArgumentParser:
    p = runner.service_parser(
        "python -m actorbus.services.registry",
        "Run a UAP registry instance (HTTP API + registry actor) on NATS.",
        http=(8470, "the HTTP API"),
    )
    p.add_argument("--no-http", action="store_true", help="serve only the registry actor")
    p.add_argument("--no-actor", action="store_true", help="serve only the HTTP API")
    p.add_argument("--replicas", type=int, default=1, help="bucket replicas (3 on a cluster)")
    p.add_argument(
        "--leader-ttl", type=runner.positive, default=3.0, help="leader lease seconds (3)"
    )
    p.add_argument(
        "--sweep-interval",
        type=runner.positive,
        default=1.0,
        help="seconds between the leader's lifecycle sweeps (1)",
    )
    p.add_argument(
        "--card-timeout", type=runner.positive, default=5.0, help="agent card fetch timeout (5)"
    )
    p.add_argument(
        "--card-retry",
        type=runner.positive,
        default=30.0,
        help="seconds between retries of a failed agent card fetch (30)",
    )
    p.add_argument("--instance-id", default=None, help="this instance's name (default: generated)")
    runner.tls_options(p)
    return p


async def run(args: argparse.Namespace) -> None:
    host, port = args.http
    settings = RegistrySettings(
        replicas=args.replicas,
        leader_ttl=args.leader_ttl,
        sweep_interval=args.sweep_interval,
        card_timeout=args.card_timeout,
        card_retry_interval=args.card_retry,
        http_host=host,
        http_port=None if args.no_http else port,
        actor_key=None if args.no_actor else "main",
        instance_id=args.instance_id,
        tls=args.tls,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    stop = runner.stop_on_signals()
    urls = runner.nats_urls(args.nats)
    async with RegistryService(nats_url=urls, namespace=args.namespace, settings=settings) as reg:
        print(
            f"registry {reg.http_url or '-'} instance {reg.instance_id} namespace {reg.namespace}",
            flush=True,
        )
        print("ready", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    runner.run_main("registry", args, run)


if __name__ == "__main__":
    main()
