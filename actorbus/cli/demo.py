"""``actorbus demo``: a multi-agent flow on an embedded broker (``--trace``: in Phoenix)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from actorbus.actors import ActorSystem
from actorbus.cli.common import EXIT_OK, CliError, stderr
from actorbus.telemetry import configure, flush

# -- actorbus demo -----------------------------------------------------------


async def _demo(question: str | None, as_json: bool) -> int:
    from actorbus.demo import DEFAULT_QUESTION, run_demo  # its actors: only for this command

    question = question or DEFAULT_QUESTION
    console = Console(quiet=True) if as_json else Console()
    async with ActorSystem.start() as system:
        result = await run_demo(system, question, console)
        agent = await _agent_demo(system, question, console)
    if as_json:
        out = {**result.model_dump(mode="json"), "agent": agent}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        sys.stdout.flush()
    return EXIT_OK


async def _agent_demo(system: ActorSystem, question: str, console: Console) -> Any:
    """The LLM agent's part, when the agents extra is installed (else says how)."""
    missing = [p for p in ("openai", "aiohttp") if importlib.util.find_spec(p) is None]
    if missing:
        console.print(
            f"[dim]the LLM agent's part is skipped: it needs {', '.join(missing)} "
            "(pip install 'actorbus[agents]')[/]"
        )
        return None
    demo = await asyncio.to_thread(importlib.import_module, "actorbus.agents.demo")
    return (await demo.run_agent_demo(system, question, console)).model_dump(mode="json")


def cmd_demo(args: argparse.Namespace) -> int:
    if not args.trace:
        return asyncio.run(_demo(args.question, args.json))
    return _demo_in_phoenix(args.question, args.json)


def _demo_in_phoenix(question: str | None, as_json: bool) -> int:
    """The demo with its spans in a local Arize Phoenix, left running to look at."""
    from actorbus.services import trace_ui

    err = stderr()
    # SIGTERM ends in `with server:` like Ctrl-C: Phoenix runs in a session of its
    # own, so a plain exit would leave it running, orphaned.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    python = trace_ui.find_phoenix()
    if python is None:  # a fresh checkout: make the tracing UI's venv, once
        where = trace_ui.default_venv()
        err.print(f"installing Arize Phoenix into {where} (once; 1-3 min, about 830 MB)...")
        try:
            python = trace_ui.ensure_phoenix_venv(quiet=False)
        except (OSError, subprocess.CalledProcessError, trace_ui.TraceUIError) as exc:
            raise CliError(
                f"could not install Arize Phoenix into {where} ({exc}); "
                "`python -m actorbus.services.trace_ui --install` tries again"
            ) from None
    err.print("[dim]starting Arize Phoenix (10-30 s)...[/]")
    try:
        server = trace_ui.start_phoenix(python=python)
    except trace_ui.TraceUIError as exc:
        raise CliError(str(exc)) from None
    with server, contextlib.suppress(KeyboardInterrupt):
        # Before the first ActorSystem: tracing is configured once per process.
        os.environ.update(server.otel_env(service_name="actorbus-demo"))
        trace_id, sent = asyncio.run(_demo_traced(question, as_json))
        # Phoenix takes the batches in as they come: print the tree once it holds
        # every span this process sent, not just the first batch.
        spans = server.client().wait_for_spans(trace_id, sent, timeout=30)
        err.print(escape(trace_ui.format_tree(spans)))
        err.print(f"trace:   [bold]{server.trace_url(trace_id)}[/]")
        err.print(f"phoenix: {server.ui_url}  [dim](Ctrl-C stops it)[/]")
        server.wait()
    return EXIT_OK


async def _demo_traced(question: str | None, as_json: bool) -> tuple[str, int]:
    """Run the demo under one root span, so the whole flow is one trace; its id
    and how many spans of it were sent."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    class Ended(SpanProcessor):
        def __init__(self) -> None:
            self.count = 0

        def on_end(self, span: ReadableSpan) -> None:
            if span.context is not None and span.context.trace_id == root_id:
                self.count += 1

    configure()  # from the environment just set: the root span must be a real one
    ended = Ended()
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.add_span_processor(ended)
    with trace.get_tracer("actorbus.cli").start_as_current_span("actorbus demo") as root:
        root_id = root.get_span_context().trace_id
        await _demo(question, as_json)
    flush()
    return format(root_id, "032x"), max(ended.count, 1)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run a small multi-agent flow on an embedded nats-server",
        description="Planner, readers, aggregator, narrator and monitor answer a question "
        "deterministically, showing ask, fan-out, pub/sub and streaming.",
    )
    demo.add_argument(
        "--question", help="what to ask the team (default: how actors communicate and recover)"
    )
    demo.add_argument("--json", action="store_true", help="print a JSON result instead")
    demo.add_argument(
        "--trace",
        action="store_true",
        help="send the demo's spans to a local Arize Phoenix and keep it open "
        "(the first time, Phoenix is installed into .venv-trace: 1-3 min)",
    )
    demo.set_defaults(func=cmd_demo)
