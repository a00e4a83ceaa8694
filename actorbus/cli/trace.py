"""``actorbus trace``: a recorded flow as a tree, or the latest traces."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from actorbus import environment as env
from actorbus.cli.common import EXIT_OK, CliError, stdout
from actorbus.telemetry.recorder import (
    DEFAULT_TRACE_DIR,
    SpanNode,
    build_tree,
    read_trace,
    recent_traces,
)

# -- trace: a recorded flow as a tree -------------------------------------------


def cmd_trace(args: argparse.Namespace) -> int:
    directory = Path(args.dir or env.ACTORBUS_TRACE_DIR.get() or DEFAULT_TRACE_DIR)
    if not directory.is_dir():
        raise CliError(
            f"no recorded spans in {directory} (run with ACTORBUS_TRACE_DIR={directory} set)"
        )
    if args.trace_id is None:
        roots = recent_traces(directory, args.limit)
        if args.json:
            stdout().print_json(data=roots)
            return EXIT_OK
        table = Table(title=f"recent traces in {directory}")
        for col in ("trace id", "root span", "service", "ms"):
            table.add_column(col)
        for r in roots:
            ms = ((r.get("end") or 0) - (r.get("start") or 0)) / 1e6
            table.add_row(r["trace_id"], escape(r["name"]), str(r.get("service")), f"{ms:.1f}")
        stdout().print(table)
        return EXIT_OK
    records = read_trace(directory, args.trace_id)
    if not records:
        raise CliError(f"no spans of trace {args.trace_id!r} in {directory}")
    if args.json:
        stdout().print_json(data=records)
        return EXIT_OK
    tree = Tree(f"trace [bold]{records[0]['trace_id']}[/] ({len(records)} spans)")
    for root in build_tree(records):
        _grow(tree, root)
    stdout().print(tree)
    return EXIT_OK


def _grow(parent: Tree, node: SpanNode) -> None:
    rec = node.record
    attrs = rec.get("attributes") or {}
    bad = "[red]✗[/] " if rec.get("status") == "ERROR" else ""
    extra = " ".join(
        f"{key.split('.')[-1]}={escape(str(attrs[key]))}"
        for key in ("actorbus.intent", "actorbus.delivery", "actorbus.attempt")
        if key in attrs
    )
    label = (
        f"{bad}[bold]{escape(rec['name'])}[/] [dim]{rec.get('kind', '').lower()} · "
        f"{rec.get('service')} · {node.duration_ms:.2f} ms[/] {extra}"
    )
    branch = parent.add(label)
    for child in node.children:
        _grow(branch, child)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    tracecmd = sub.add_parser(
        "trace",
        parents=[common],
        help="print a recorded flow as a tree (or list recent traces)",
        description="Reads the spans that processes run with ACTORBUS_TRACE_DIR set recorded "
        "there (one JSON-lines file per process) and prints one trace as a tree of "
        "send/receive/process spans. Without TRACE_ID: the latest traces.",
    )
    tracecmd.add_argument("trace_id", nargs="?", help="a trace id (a unique prefix is enough)")
    tracecmd.add_argument(
        "--dir",
        help=f"the recording directory (default: $ACTORBUS_TRACE_DIR or {DEFAULT_TRACE_DIR})",
    )
    tracecmd.add_argument("--limit", type=int, default=20, help="recent traces to list (20)")
    tracecmd.add_argument("--json", action="store_true", help="print JSON for scripts")
    tracecmd.set_defaults(func=cmd_trace)
