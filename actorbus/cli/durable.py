"""``actorbus dlq``, ``queue``, ``history`` and ``migrate``: dead letters, queue
depth, stored messages and sending them again, and moving a namespace's store to
this version's layout.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import nats.errors
from pydantic_core import to_jsonable_python
from rich.markup import escape
from rich.table import Table

from actorbus.actors import ActorSystem
from actorbus.actors.dead_letters import DeadLetter
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.legacy_queue import Moved, migrate_legacy_queue
from actorbus.bus.probe import server_info, wants_security
from actorbus.bus.subjects import Subjects
from actorbus.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    bus_options,
    resolve_url,
    stderr,
    stdout,
    with_system,
)
from actorbus.codecs.envelope import Envelope
from actorbus.security.secure_broker import admin_connect_options
from actorbus.security.settings import actorbus_home

# -- durable queues: dead letters and depth ----------------------------------


def cmd_dlq(args: argparse.Namespace) -> int:
    # replay and drop delete the dead letter: the broker's admin's right
    return asyncio.run(with_system(args, _dlq, admin=args.action in ("replay", "drop")))


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
    reminders = await system.reminders.list(args.address.removesuffix("/*"))
    fired = await system.reminders.waiting(args.address.partition("/")[0])
    if not stats.started and stats.pending == 0 and not reminders and not fired:
        raise CliError(
            f"no durable queue for {args.address}: nothing was stored for it and no "
            f"actor ever read it (namespace {args.namespace})"
        )
    data = dataclasses.asdict(stats)
    if args.json:
        data["reminders"] = [dataclasses.asdict(r) for r in reminders]
        data["fired_waiting"] = fired
        stdout().print_json(data=data)
        return
    table = Table(title=f"durable queue of {args.address}")
    for col in data:
        table.add_column(col, justify="right")
    table.add_row(*(str(v) for v in data.values()))
    stdout().print(table)
    if reminders:
        waiting = Table(title=f"reminders of {args.address}")
        for col in ("address", "name", "schedule"):
            waiting.add_column(col)
        for r in reminders:
            waiting.add_row(r.address, r.name, r.schedule)
        stdout().print(waiting)
    if fired:
        stdout().print(
            f"{fired} reminder firing(s) of {args.address.partition('/')[0]} wait for a host of "
            "the type to take them into its queue"
        )


# -- migrate: the store of an earlier version ---------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    url = resolve_url(args.url)
    home = Path(args.home) if args.home else None
    out = stdout()
    moved = asyncio.run(
        migrate_namespace(url, args.namespace, args.connect_timeout, home, report=out.print)
    )
    if moved is None:
        out.print(f"namespace {args.namespace}: nothing to move (already a stream per type)")
    return EXIT_OK


async def migrate_namespace(
    url: str,
    namespace: str,
    wait: float,
    home: Path | None = None,
    report: Callable[[str], None] = lambda _: None,
) -> Moved | None:
    """Move ``namespace``'s durable messages from the one stream of earlier versions
    to a stream per actor type (:mod:`actorbus.bus.legacy_queue`), as the broker's
    admin: on a secured broker, one issued from the operator keys in ``home``
    (``ACTORBUS_HOME`` by default, where ``actorbus up`` keeps them)."""
    servers = [u.strip() for u in url.split(",") if u.strip()]
    kwargs: dict[str, Any] = {}
    if wants_security(await server_info(servers[0], wait)):
        options = admin_connect_options(namespace, home)
        kwargs = {
            "user_credentials": options.nats_credentials(),
            "tls": options.tls,
            "inbox_prefix": options.inbox_prefix,
        }
    nc = await nats.connect(
        servers, name="actorbus-migrate", connect_timeout=wait, allow_reconnect=False, **kwargs
    )
    spool = (home or actorbus_home()) / "migrations" / f"{namespace}.spool"
    try:
        moved = await migrate_legacy_queue(
            nc.jetstream(), Subjects(namespace), DurableSettings(), spool, report
        )
    except nats.errors.Error as exc:
        raise CliError(f"namespace {namespace}: the move failed ({exc}); run it again") from None
    finally:
        await nc.close()
    if moved is not None:
        per_type = ", ".join(f"{t} {n}" for t, n in sorted(moved.types.items())) or "none"
        report(
            f"namespace {namespace}: moved {moved.moved} unsettled message(s) to a stream "
            f"per actor type ({per_type}); {moved.settled} already handled, left behind"
        )
        if moved.lost_originals:
            report(
                f"{moved.lost_originals} dead letter(s) referenced an original too large to "
                "copy, in the old stream: those originals are gone"
            )
    return moved


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
    from rich.progress import (  # here: a twentieth of every command's start otherwise
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeRemainingColumn,
    )

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
    migrate = sub.add_parser(
        "migrate",
        parents=[common],
        help="move a namespace's durable messages to this version's layout",
        description="Earlier versions kept every actor type's durable messages in one "
        "stream (actorbus-NS-durable); this one keeps a stream per type, so that the "
        "broker can give each member its own types' queues and no other's. The move "
        "deletes the old stream, so it runs as the broker's admin, issued from the "
        "operator keys in ACTORBUS_HOME (`actorbus up` does it by itself at start). Run "
        "again if it was cut short: the spooled messages are stored once.",
    )
    migrate.add_argument(
        "--home",
        help="where the broker's operator keys (broker/) and CA (tls/) are "
        "(default: ACTORBUS_HOME)",
    )
    bus_options(migrate)
    migrate.set_defaults(func=cmd_migrate)
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
