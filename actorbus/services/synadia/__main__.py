"""``python -m actorbus.services.synadia``: serve actor types as Synadia agents.

    python -m actorbus.services.synadia --nats nats://127.0.0.1:4222 \\
        --namespace ab [--agent TYPE ...] [--owner OWNER] [--session NAME]

Without ``--agent`` every healthy actorbus type in the namespace's registry is
served. Prints ``agent <name> <prompt subject>`` per agent, then ``ready``;
stops gracefully on SIGTERM or Ctrl-C (exit status 0).
"""

from __future__ import annotations

import argparse

from actorbus.actors.system import ActorSystem
from actorbus.security.secure_broker import join_options
from actorbus.services import runner
from actorbus.services.synadia.prompt import PromptSettings
from actorbus.services.synadia.service import BridgeSettings, SynadiaBridge


def parser() -> argparse.ArgumentParser:
    p = runner.service_parser(
        "python -m actorbus.services.synadia",
        "Serve actorbus actor types as Synadia Agent Protocol agents on NATS.",
    )
    p.add_argument(
        "--agent", action="append", default=None, metavar="TYPE", help="actor type (repeatable)"
    )
    p.add_argument("--owner", default=None, help="owner token (default: the namespace)")
    p.add_argument("--session", default="default", help="session token (default: default)")
    p.add_argument("--heartbeat", type=int, default=30, help="seconds between heartbeats (30)")
    p.add_argument(
        "--keepalive", type=runner.positive, default=30.0, help="seconds between acks (30)"
    )
    p.add_argument(
        "--ask-timeout", type=runner.positive, default=300.0, help="seconds per reply (300)"
    )
    return p


async def run(args: argparse.Namespace) -> None:
    settings = BridgeSettings(
        session=args.session,
        heartbeat_interval=args.heartbeat,
        prompt=PromptSettings(
            ask_timeout=args.ask_timeout,
            item_timeout=args.ask_timeout,
            keepalive_interval=args.keepalive,
        ),
    )
    stop = runner.stop_on_signals()
    urls = runner.nats_urls(args.nats)
    joining = await join_options(urls[0], args.namespace, "synadia-bridge")  # secured broker?
    async with (
        ActorSystem.connect(urls, namespace=args.namespace, **joining) as system,
        SynadiaBridge(system, args.agent, owner=args.owner, settings=settings) as bridge,
    ):
        for name, agent in bridge.agents.items():
            print(f"agent {name} {agent.subject.prompt}", flush=True)
        print("ready", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.heartbeat <= 0:
        parser().error("--heartbeat must be > 0")
    runner.run_main("synadia", args, run)


if __name__ == "__main__":
    main()
