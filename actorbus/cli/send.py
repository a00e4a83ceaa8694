"""``actorbus ask | tell | stream | publish``: talk to actors from a shell.

CONTENT is JSON (an object, a list, a number, a quoted string) or, when it does
not parse as JSON, the text itself; ``-`` reads it from stdin. An object goes as
the ``dict`` intent unless ``--intent`` names the handler's (a model's intent is
its class name: ``--intent Ping``). Replies print as JSON, one per line for a
stream, so they pipe into ``jq``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from typing import Any

from pydantic import BaseModel

from actorbus.actors import ActorSystem
from actorbus.cli.common import EXIT_USAGE, CliError, bus_options, stdout, with_system


def content_of(text: str) -> Any:
    """The message CONTENT stands for (``-``: stdin)."""
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except ValueError:
        return text  # plain text: the `text` intent


def printable(value: Any) -> Any:
    """A reply as JSON can hold it."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, list | tuple):
        return [printable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): printable(v) for k, v in value.items()}
    return value


def _print(value: Any) -> None:
    stdout().print(json.dumps(printable(value), ensure_ascii=False), markup=False)


async def _ask(system: ActorSystem, args: argparse.Namespace) -> None:
    reply = await system.ask(
        args.address,
        content_of(args.content),
        intent=args.intent,
        timeout=args.timeout,
        session_id=args.session,
    )
    _print(reply)


async def _tell(system: ActorSystem, args: argparse.Namespace) -> None:
    await system.tell(
        args.address,
        content_of(args.content),
        intent=args.intent,
        session_id=args.session,
        durable=True if args.durable else None,
    )
    if args.durable:
        stdout().print("stored", markup=False)  # the send returned after JetStream's ack


async def _stream(system: ActorSystem, args: argparse.Namespace) -> None:
    items = system.stream(
        args.address,
        content_of(args.content),
        intent=args.intent,
        timeout=args.timeout,
        session_id=args.session,
    )
    async for item in items:
        _print(item)


async def _publish(system: ActorSystem, args: argparse.Namespace) -> None:
    await system.publish(args.address, content_of(args.content), intent=args.intent)


WORK = {"ask": _ask, "tell": _tell, "stream": _stream, "publish": _publish}


def cmd_send(args: argparse.Namespace) -> int:
    if args.timeout is not None and args.timeout <= 0:
        raise CliError("--timeout must be positive", EXIT_USAGE)
    return asyncio.run(with_system(args, WORK[args.command]))


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    helps = {
        "ask": ("ADDRESS", "send a message and print the reply"),
        "tell": ("ADDRESS", "send a message, no reply (--durable: stored first)"),
        "stream": ("ADDRESS", "send a message and print each streamed item"),
        "publish": ("TOPIC", "publish to a topic's subscribers"),
    }
    for name, (target, what) in helps.items():
        p = sub.add_parser(name, parents=[common], help=what, description=__doc__)
        p.add_argument("address", metavar=target)
        p.add_argument("content", metavar="CONTENT", help="JSON, or plain text; - reads stdin")
        p.add_argument("--intent", help="the handler's intent (a model's: its class name)")
        if name != "publish":
            p.add_argument("--session", help="the conversation's session id")
        else:
            p.set_defaults(session=None)
        if name in ("ask", "stream"):
            p.add_argument("--timeout", type=float, default=None, help="seconds to wait")
        else:
            p.set_defaults(timeout=None)
        if name == "tell":
            p.add_argument("--durable", action="store_true", help="store it in JetStream first")
        bus_options(p)
        p.set_defaults(func=cmd_send)
