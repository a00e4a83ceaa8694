"""``actorbus ask | tell | stream | publish``: talk to actors from a shell.

CONTENT is JSON (an object, a list, a number, a quoted string) or, when it does
not parse as JSON, the text itself; ``-`` reads it from stdin. Without
``--intent`` (a model's intent is its class name: ``--intent Ping``) it is fitted
to the actor's handlers as the registry lists them, as the gateway does: an
actor with one handler gets it there. Replies print as JSON, one per line for a
stream, so they pipe into ``jq``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import shlex
import sys
from typing import Any

from pydantic import BaseModel

from actorbus.actors import ActorSystem
from actorbus.actors.delivery import DeliveryPolicy
from actorbus.actors.interim import AuthRequired, InputRequired
from actorbus.actors.listing import Listing
from actorbus.actors.messages import to_content
from actorbus.cli.common import EXIT_USAGE, CliError, bus_options, stdout, with_system
from actorbus.codecs.common import fit_to_intent
from actorbus.codecs.errors import ActorBusError


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
    """One reply as a line of JSON, written at once (a stream's items as they
    come, also into a pipe). Not through rich: a console made per line cost a
    stream of 20,000 items 6 s."""
    sys.stdout.write(json.dumps(printable(value), ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def fitted(
    system: ActorSystem, args: argparse.Namespace
) -> tuple[str | None, Any, Listing | None]:
    """The intent and content to send: ``--intent`` as given; else, when the registry
    lists the actor's type, fitted to its handlers the way the gateway does (an
    object for a one-handler actor goes to that handler). And the type's listing
    (None: the registry does not list it)."""
    content = content_of(args.content)
    if "/" not in args.address:
        return args.intent, content, None
    try:
        found = await system.discover(name=args.address.split("/", 1)[0], healthy=False)
    except ActorBusError:
        return args.intent, content, None  # no registry here: sent as it is
    listing = next((listing for listing in found if listing.intents), None)
    if listing is None:
        return args.intent, content, None
    intent = args.intent
    if intent is None:
        intent, content = fit_to_intent(listing.intents, to_content(content)[0], content)
    return intent, content, listing


def _streams(listing: Listing | None, intent: str | None) -> bool:
    """Whether the registry says that ``intent`` streams its reply."""
    return listing is not None and bool(listing.calls.get(intent or "", {}).get("streams"))


async def _ask(system: ActorSystem, args: argparse.Namespace) -> None:
    intent, content, listing = await fitted(system, args)
    streams = _streams(listing, intent)
    options: dict[str, Any] = {"intent": intent, "session_id": args.session}
    if not streams:
        _print(await system.ask(args.address, content, timeout=args.timeout, **options))
        return
    # A handler that streams (an agent's tokens): its items, collected, as the
    # gateway does for a plain A2A send; text items as one text.
    items = [i async for i in system.stream(args.address, content, timeout=args.timeout, **options)]
    texts = [i for i in items if isinstance(i, str)]
    _print("".join(texts) if len(texts) == len(items) else items)


async def _tell(system: ActorSystem, args: argparse.Namespace) -> None:
    intent, content, listing = await fitted(system, args)
    announced = listing.native.get("delivery") if listing is not None else None
    if args.durable and isinstance(announced, dict):
        # as a sender that knows the class: one without a durable queue is refused
        policy = DeliveryPolicy.from_json(announced)
        system.delivery.learn(args.address.partition("/")[0], policy)
    await system.tell(
        args.address,
        content,
        intent=intent,
        session_id=args.session,
        durable=True if args.durable else None,
    )
    if args.durable:
        stdout().print("stored", markup=False)  # the send returned after JetStream's ack


async def _stream(system: ActorSystem, args: argparse.Namespace) -> None:
    intent, content, _ = await fitted(system, args)
    items = system.stream(
        args.address,
        content,
        intent=intent,
        timeout=args.timeout,
        session_id=args.session,
    )
    mid_line = False
    async for item in items:
        if args.text and isinstance(item, str):  # a model's tokens, as one text
            sys.stdout.write(item)
            sys.stdout.flush()
            mid_line = True
        elif args.text and isinstance(item, InputRequired | AuthRequired):
            # the run waits for a person: the question, and how to answer it
            session = f" --session {args.session}" if args.session else ""
            answer = f"actorbus stream {args.address} 'ANSWER'{session} --text"
            sys.stdout.write(("\n" if mid_line else "") + f"{item.message}\n(answer: {answer})")
            mid_line = True
        else:
            _print(item)
    if args.text:
        sys.stdout.write("\n")


async def _publish(system: ActorSystem, args: argparse.Namespace) -> None:
    await system.publish(args.address, content_of(args.content), intent=args.intent)


WORK = {"ask": _ask, "tell": _tell, "stream": _stream, "publish": _publish}


def cmd_send(args: argparse.Namespace) -> int:
    if args.extra:
        raise CliError(_one_content(args.content, args.extra), EXIT_USAGE)
    if args.timeout is not None and args.timeout <= 0:
        raise CliError("--timeout must be positive", EXIT_USAGE)
    return asyncio.run(with_system(args, WORK[args.command]))


def _one_content(content: str, extra: list[str]) -> str:
    """What to say when CONTENT came as more than one argument: most often an
    intent put before it (``ask echo/1 Ping '{...}'``), or text left unquoted."""
    if len(extra) == 1 and content.isidentifier():
        with contextlib.suppress(ValueError):
            json.loads(extra[0])
            return (
                f"CONTENT is one argument; to name the handler's intent, give it as "
                f"--intent {content} {shlex.quote(extra[0])}"
            )
    text = " ".join([content, *extra])
    return f"CONTENT is one argument: quote text with spaces, as {shlex.quote(text)}"


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
        p.add_argument("extra", nargs="*", help=argparse.SUPPRESS)  # said clearly if given
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
        if name == "stream":
            p.add_argument(
                "--text",
                action="store_true",
                help="print text items as one text as they come (an agent's tokens); "
                "other items as JSON lines",
            )
        bus_options(p)
        p.set_defaults(func=cmd_send)
