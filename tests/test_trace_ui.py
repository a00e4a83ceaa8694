"""Spans from three OS processes reach a real Arize Phoenix as one tree, and its UI shows it.

Phoenix is found by :func:`actorbus.services.trace_ui.find_phoenix` (this venv,
``$ACTORBUS_PHOENIX_PYTHON``, or ``.venv-trace`` made by ``ensure_phoenix_venv``);
the Phoenix tests skip without it, the screenshot test without Chromium.

This file is also the emitter script: ``python tests/test_trace_ui.py emit 0``
runs step 0 of the flow, which runs step 1 as its own process, which runs step 2.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actorbus.services import trace_ui
from actorbus.services.trace_ui import (
    DEFAULT_PROJECT,
    PhoenixServer,
    TraceUIError,
    capture_page,
    find_chromium,
    find_phoenix,
    format_tree,
    otel_env,
    start_phoenix,
    trace_url,
)

REPO = Path(__file__).resolve().parents[1]
PHOENIX_PYTHON = find_phoenix([REPO / ".venv-trace"])
CHROMIUM = find_chromium()

needs_phoenix = pytest.mark.skipif(
    PHOENIX_PYTHON is None,
    reason="Arize Phoenix is not installed (pip install arize-phoenix, or "
    "python -c 'from actorbus.services.trace_ui import ensure_phoenix_venv; "
    "ensure_phoenix_venv()' for .venv-trace)",
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)"
)


# -- the flow: three processes, one trace ------------------------------------------
# When actorbus's own instrumentation lands, replace run_three_process_flow with
# three actor processes (A asks B, B asks C) run with the same `env_for(service)`
# environments; the assertions below stay as they are.

SERVICES = ("flow-a", "flow-b", "flow-c")
SPAN_NAMES = ("a.root", "b.child", "c.grandchild")


def run_three_process_flow(env_for: Callable[[str], dict[str, str]]) -> str:
    """Run A -> B -> C as three OS processes exporting over OTLP/HTTP; the trace id.

    ``env_for(service)`` is the environment of the process for that service (the
    OTEL_* settings of :meth:`PhoenixServer.otel_env`). A starts the root span and
    starts B with the W3C ``traceparent`` of that span in ``TRACEPARENT``; B does
    the same for C. Each process flushes its spans before it exits.
    """
    env = env_for(SERVICES[0])
    done = subprocess.run(
        [sys.executable, __file__, "emit", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def _emit(step: int) -> None:
    """One process of the flow: a span (child of $TRACEPARENT), the next step inside it."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    w3c = TraceContextTextMapPropagator()
    provider = TracerProvider()  # resource from OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    provider.add_span_processor(trace_ui.ServiceNameSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_*
    tracer = provider.get_tracer("actorbus.tests.trace_ui")
    parent = w3c.extract({"traceparent": os.environ["TRACEPARENT"]}) if step else None
    with tracer.start_as_current_span(
        SPAN_NAMES[step], context=parent, attributes={"flow.step": step}
    ) as span:
        if step + 1 < len(SPAN_NAMES):
            carrier: dict[str, str] = {}
            w3c.inject(carrier)
            env = dict(os.environ)
            env["OTEL_SERVICE_NAME"] = SERVICES[step + 1]
            env["TRACEPARENT"] = carrier["traceparent"]
            subprocess.run(
                [sys.executable, __file__, "emit", str(step + 1)], env=env, check=True, timeout=60
            )
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()  # flushes the batch
    print(trace_id)


# -- with a real Phoenix -------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def phoenix() -> Iterator[PhoenixServer]:
    """One Phoenix for this module; stopped (and checked gone) at its end."""
    server = start_phoenix(python=PHOENIX_PYTHON)
    print(f"Phoenix {server.version} up in {server.startup_seconds:.1f} s at {server.url}")
    try:
        yield server
    finally:
        server.stop()
        assert not _alive(server.pid), "Phoenix outlived stop()"
        assert not _listening(server.port)
        assert not server.working_dir.exists()


@pytest.fixture(scope="module")
def flow_trace(phoenix: PhoenixServer) -> str:
    return run_three_process_flow(phoenix.otel_env)


@needs_phoenix
@pytest.mark.timeout(240)
def test_spans_from_three_processes_form_one_tree(phoenix: PhoenixServer, flow_trace: str) -> None:
    spans = phoenix.client().wait_for_spans(flow_trace, 3, timeout=30)

    assert len(spans) == 3, spans
    by_name = {span.name: span for span in spans}
    root, child, grandchild = (by_name[name] for name in SPAN_NAMES)
    assert root.parent_id is None
    assert child.parent_id == root.span_id
    assert grandchild.parent_id == child.span_id
    assert [by_name[name].service for name in SPAN_NAMES] == list(SERVICES)
    assert {span.trace_id for span in spans} == {flow_trace}
    assert {span.project for span in spans} == {DEFAULT_PROJECT}
    assert grandchild.attributes["flow.step"] == 2
    assert format_tree(spans) == ("a.root [flow-a]\n  b.child [flow-b]\n    c.grandchild [flow-c]")
    assert phoenix.client().latest_trace_id() == flow_trace


@needs_phoenix
@needs_chromium
@pytest.mark.timeout(240)
def test_trace_page_renders_the_tree(
    phoenix: PhoenixServer, flow_trace: str, tmp_path: Path
) -> None:
    phoenix.client().wait_for_spans(flow_trace, 3, timeout=30)
    url = phoenix.trace_url(flow_trace)

    # ACTORBUS_TRACE_SCREENSHOT=path/to/trace.png keeps the picture where you want it.
    target = os.environ.get("ACTORBUS_TRACE_SCREENSHOT") or tmp_path / "trace.png"
    png, dom = capture_page(url, target, window_size=(1400, 900))
    for name in SPAN_NAMES:
        assert name in dom, f"{name} not on {url}"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") == 1400  # IHDR width
    assert len(data) > 20_000, f"suspiciously small screenshot: {len(data)} bytes"
    print(f"trace page screenshot: {png}")


# -- without Phoenix: the parts that must hold anyway ---------------------------------


def test_trace_url_and_otel_env() -> None:
    tid = "0AF7651916CD43DD8448EB211C80319C"
    assert trace_url("http://127.0.0.1:6006/", tid) == (
        "http://127.0.0.1:6006/redirects/traces/0af7651916cd43dd8448eb211c80319c"
    )
    assert trace_url("http://h:1", 1).endswith("/" + "0" * 31 + "1")
    with pytest.raises(ValueError, match="trace id"):
        trace_url("http://h:1", "nope")

    env = otel_env(
        "http://127.0.0.1:6006",
        service_name="svc",
        base={"OTEL_RESOURCE_ATTRIBUTES": "a=1,openinference.project.name=old", "X": "y"},
    )
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://127.0.0.1:6006/v1/traces"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:6006"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "a=1,openinference.project.name=actorbus"
    assert env["OTEL_SERVICE_NAME"] == "svc"
    assert env["X"] == "y"


def _fake_python(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    fake = _fake_python(tmp_path, "echo 'no module named phoenix' >&2; exit 3")
    workdir = tmp_path / "work"
    with pytest.raises(TraceUIError, match=r"(?s)exited with 3.*no module named phoenix"):
        start_phoenix(python=fake, working_dir=workdir, startup_timeout=30)
    assert (workdir / "phoenix.log").exists()  # a given working dir is kept


def test_start_timeout_kills_a_server_that_ignores_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_ui, "STOP_TIMEOUT", 0.5)
    pidfile = tmp_path / "pid"
    fake = _fake_python(tmp_path, f"trap '' TERM; echo $$ > {pidfile}; exec sleep 60")
    started = time.monotonic()
    with pytest.raises(TraceUIError, match="did not answer"):
        start_phoenix(python=fake, startup_timeout=1.0)
    assert time.monotonic() - started < 10
    pid = int(pidfile.read_text())
    assert not _alive(pid)


def test_missing_phoenix_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_ui, "find_phoenix", lambda extra=(): None)
    with pytest.raises(TraceUIError, match="pip install arize-phoenix"):
        start_phoenix()


if __name__ == "__main__" and sys.argv[1:2] == ["emit"]:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _emit(int(sys.argv[2]))
