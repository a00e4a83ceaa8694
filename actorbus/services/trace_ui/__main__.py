"""``python -m actorbus.services.trace_ui``: a local tracing UI until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Sequence

from actorbus.services.trace_ui.install import (
    DEFAULT_PROJECT,
    DEFAULT_TRACE_VENV,
    PHOENIX_REQUIREMENT,
    TraceUIError,
    default_venv,
    ensure_phoenix_venv,
    find_phoenix,
)
from actorbus.services.trace_ui.server import start_phoenix

# -- python -m actorbus.services.trace_ui -----------------------------------------


def parser() -> argparse.ArgumentParser:
    """The command line, as the docs' command lines are checked against."""
    p = argparse.ArgumentParser(
        prog="python -m actorbus.services.trace_ui",
        description="A local tracing UI (Arize Phoenix) on 127.0.0.1, until Ctrl-C.",
    )
    p.add_argument("--port", type=int, default=None, help="default: a free port")
    p.add_argument("--dir", default=None, help="keep Phoenix's data here (default: temp)")
    p.add_argument("--project", default=DEFAULT_PROJECT, help="Phoenix project name")
    p.add_argument(
        "--install",
        action="store_true",
        help=f"create {DEFAULT_TRACE_VENV} with Phoenix in it first if Phoenix is missing",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Start Phoenix, print where to send spans and where to look, run until Ctrl-C."""
    import shlex

    args = parser().parse_args(argv)
    # Ctrl-C and SIGTERM both end in server.stop(): Phoenix runs in a session of its
    # own and would outlive this process otherwise.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    python = find_phoenix()
    if python is None and args.install:
        print(f"installing {PHOENIX_REQUIREMENT} into {default_venv()} ...", flush=True)
        python = ensure_phoenix_venv()
    try:
        server = start_phoenix(
            python=python, port=args.port, working_dir=args.dir, project=args.project
        )
    except TraceUIError as exc:
        print(exc, file=sys.stderr)
        return 2
    with server:
        print(f"Phoenix {server.version} up in {server.startup_seconds:.1f} s")
        print(f"UI:   {server.ui_url}")
        print("Send spans from a shell with:")
        for key in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES"):
            print(f"  export {key}={shlex.quote(server.otel_env(base={})[key])}")
        print("  export OTEL_METRICS_EXPORTER=none")
        print("Ctrl-C stops it.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
