"""``actorbus dlq``, ``queue`` and ``history``: dead letters, queue depth, stored
messages and sending them again.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_jsonable_python
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from actorbus.actors import ActorSystem
from actorbus.actors.dead_letters import DeadLetter
from actorbus.cli.common import EXIT_USAGE, CliError, bus_options, stderr, stdout, with_system
from actorbus.codecs.envelope import Envelope

# -- durable queues: dead letters and depth ----------------------------------


def cmd_dlq(args: argparse.Namespace) -> int:
    return asyncio.run(with_system(args, _dlq))


def cmd_queue(args: argparse.Namespace) -> int:
    return asyncio.run(with_system(args, _queue))


async def _dlq(system: ActorSystem, args: argparse.Namespace) -> None:
    out = stdout()
    if args.action == "ls":
        letters = await system.dead_letters(args.address, limit=args.limit)
        if args.json:
            out.print_json(data=[_letter_json(letter) for letter in letters])
            return
        if not letters:
            out.print("no dead letters")
            return
        table = Table(title="dead letters")
        for col in ("seq", "address", "attempts", "code", "reason"):
            table.add_column(col)
        for letter in letters:
            table.add_row(
                str(letter.seq),
                letter.address,
                str(letter.attempts),
                letter.code,
                escape(letter.reason),
            )
        out.print(table)
        return
    if args.seq is None:
        raise CliError(f"dlq {args.action} needs the dead letter's seq", EXIT_USAGE)
    if args.action == "show":
        letter = await system.get_dead_letter(args.seq)
        data = _letter_json(letter)
        data["envelope"] = letter.envelope().model_dump(mode="json")
        out.print_json(data=data)
    elif args.action == "replay":
        await system.replay_dead_letter(args.seq)
        out.print(f"[green]replayed[/] dead letter #{args.seq}")
    else:
        await system.drop_dead_letter(args.seq)
        out.print(f"[yellow]dropped[/] dead letter #{args.seq}")


def _letter_json(letter: DeadLetter) -> dict[str, Any]:
    return {
        "seq": letter.seq,
        "address": letter.address,
        "attempts": letter.attempts,
        "code": letter.code,
        "reason": letter.reason,
        "envelope_id": letter.envelope_id,
    }


async def _queue(system: ActorSystem, args: argparse.Namespace) -> None:
    stats = await system.queue_stats(args.address)
    if not stats.started and stats.pending == 0:
        raise CliError(
            f"no durable queue for {args.address}: nothing was stored for it and no "
            f"actor ever read it (namespace {args.namespace})"
        )
    data = dataclasses.asdict(stats)
    if args.json:
        stdout().print_json(data=data)
        return
    table = Table(title=f"durable queue of {args.address}")
    for col in data:
        table.add_column(col, justify="right")
    table.add_row(*(str(v) for v in data.values()))
    stdout().print(table)


# -- history and rerun: stored messages ---------------------------------------


def cmd_history(args: argparse.Namespace) -> int:
    return asyncio.run(with_system(args, _history))


async def _history(system: ActorSystem, args: argparse.Namespace) -> None:
    picked = [x for x in (args.address, args.session, args.topic) if x]
    if len(picked) != 1:
        raise CliError("give exactly one of ADDRESS, --session or --topic")
    since = _parse_since(args.since) if args.since else None
    found = system.history(
        address=args.address,
        session_id=args.session,
        topic=args.topic,
        since_seq=args.since_seq,
        since=since,
    )
    if args.rerun_to:
        await _rerun(system, found, args.rerun_to, args.json)
        return
    rows = [_jsonable(env) async for env in found]
    if args.json:
        stdout().print_json(data=rows)
        return
    table = Table(title=f"{len(rows)} stored message(s)")
    for col in ("time", "id", "src", "dst", "intent", "session"):
        table.add_column(col)
    for row in rows:
        when = datetime.fromtimestamp(row["ts"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        table.add_row(
            when[:-3],
            row["id"],
            escape(row["src"]),
            escape(row["dst"]),
            escape(row["intent"]),
            escape(str(row["context"].get("session_id") or "")),
        )
    stdout().print(table)


def _jsonable(env: Envelope) -> dict[str, Any]:
    """An envelope as JSON: content still sealed (this process holds no key for
    its recipient) is shown by its size, other bytes in base64."""
    if isinstance(env.content, bytes) and env.meta.cipher:
        env = env.model_copy(update={"content": f"<sealed: {len(env.content)} bytes>"})
    row: dict[str, Any] = to_jsonable_python(env, bytes_mode="base64")
    return row


async def _rerun(
    system: ActorSystem, found: AsyncIterator[Envelope], target: str, as_json: bool
) -> None:
    """Send stored messages again to ``target``, durably and in order, with progress."""
    envelopes = [env async for env in found]

    async def each() -> AsyncIterator[Envelope]:
        for env in envelopes:
            yield env
            progress.advance(task)

    with Progress(
        SpinnerColumn(),
        TextColumn("rerun to {task.fields[target]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr(),
        disable=as_json,
    ) as progress:
        task = progress.add_task("rerun", total=len(envelopes), target=target)
        sent = await system.rerun(each(), target)
    if as_json:
        stdout().print_json(data={"sent": sent, "to": target})
    else:
        stdout().print(f"sent {sent} message(s) to {escape(target)}")


def _parse_since(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"--since wants an ISO time like 2026-11-23T08:00:00, not {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    dlq = sub.add_parser(
        "dlq",
        parents=[common],
        help="list, show, replay or drop dead letters of durable queues",
        description="Dead letters are durable messages that ran out of attempts (or could "
        "never succeed). `replay` sends one to its actor again; `drop` deletes it.",
    )
    dlq.add_argument("action", choices=("ls", "show", "replay", "drop"))
    dlq.add_argument("seq", type=int, nargs="?", help="the dead letter (from `dlq ls`)")
    dlq.add_argument("--address", help="only this actor's dead letters (ls)")
    dlq.add_argument("--limit", type=int, default=100, help="at most this many (ls)")
    bus_options(dlq)
    dlq.set_defaults(func=cmd_dlq)
    queue = sub.add_parser(
        "queue",
        parents=[common],
        help="depth and lag of an actor's durable queue",
        description="Messages stored and not yet delivered, in flight, redelivered.",
    )
    queue.add_argument("address", help="the actor address, type/key")
    bus_options(queue)
    queue.set_defaults(func=cmd_queue)
    history = sub.add_parser(
        "history",
        parents=[common],
        help="stored messages of an actor, a session or a topic; --rerun-to sends them again",
        description="Reads the durable stream (and kept topics) oldest first, from --since-seq "
        "or --since. With --rerun-to ADDRESS the messages are sent again, durably and in "
        "order, to that actor (say, a new version of an agent), with a progress bar.",
    )
    history.add_argument("address", nargs="?", help="an actor address, type/key")
    history.add_argument("--session", help="a session id instead of an address")
    history.add_argument("--topic", help="a topic (pattern) instead of an address")
    history.add_argument("--since-seq", type=int, help="from this stream sequence")
    history.add_argument("--since", help="from this time (ISO 8601; UTC unless it says)")
    history.add_argument("--rerun-to", metavar="ADDRESS", help="send them again to ADDRESS")
    bus_options(history)
    history.set_defaults(func=cmd_history)
