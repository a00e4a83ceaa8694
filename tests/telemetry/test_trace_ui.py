"""Spans from three OS processes reach a real Arize Phoenix as one tree, and its UI shows it.

Phoenix is found by :func:`actorbus.services.trace_ui.find_phoenix` (this venv,
``$ACTORBUS_PHOENIX_PYTHON``, or ``.venv-trace`` made by ``ensure_phoenix_venv``);
the Phoenix tests skip without it, the screenshot test without Chromium.

The flow is real actorbus: a caller process asks ``forward/f`` in a host
process, which asks ``whoami/w`` in a third; each exports over OTLP/HTTP with the
environment Phoenix gives it.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import pid_alive
from _screenshots import capture_page, find_chromium

from actorbus.services.trace_ui import (
    DEFAULT_PROJECT,
    PhoenixServer,
    TraceUIError,
    find_phoenix,
    format_tree,
    otel_env,
    server as trace_ui_server,
    start_phoenix,
    trace_url,
)

REPO = Path(__file__).resolve().parents[2]
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


# -- the flow: three actorbus processes, one trace -----------------------------------

SERVICES = ("caller", "forwarder", "whoami")
SPAN_NAMES = (
    "flow",
    "ask forward/f (WhoAsk)",
    "receive forward/f",
    "process forward/f (WhoAsk)",
    "ask whoami/w (WhoAsk)",
    "receive whoami/w",
    "process whoami/w (WhoAsk)",
)


async def ask_from_a_process(url: str, ns: str, env: dict[str, str], *args: str) -> str:
    """tests/_ask.py as the caller (``args``: the address, n, a prompt for an agent),
    exporting with ``env``; the trace id it printed."""
    import asyncio
    import json

    from _util import TESTS_DIR

    caller = await asyncio.create_subprocess_exec(
        sys.executable,
        str(TESTS_DIR / "_ask.py"),
        url,
        ns,
        *args,
        stdout=asyncio.subprocess.PIPE,
        env={**env, "PYTHONPATH": str(TESTS_DIR)},
    )
    out, _ = await asyncio.wait_for(caller.communicate(), 60)
    assert caller.returncode == 0
    trace_id: str = json.loads(out)["trace_id"]
    return trace_id


def run_three_process_flow(url: str, ns: str, env_for: Callable[[str], dict[str, str]]) -> str:
    """caller (tests/_ask.py) -> forward/f (a host process) -> whoami/w (another),
    each exporting its spans over OTLP/HTTP with ``env_for(service)``; the trace id."""
    import asyncio

    from _util import run_host

    async def flow() -> str:
        async with (
            run_host("_actors:Whoami", url, ns, "w", env=env_for("whoami")),
            run_host("_actors:Forward", url, ns, "f", env=env_for("forwarder")),
        ):
            return await ask_from_a_process(url, ns, env_for("caller"), "forward/f", "1")

    return asyncio.run(flow())


# -- with a real Phoenix -------------------------------------------------------------


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
        assert not pid_alive(server.pid), "Phoenix outlived stop()"
        assert not _listening(server.port)
        assert not server.working_dir.exists()


@pytest.fixture(scope="module")
def flow_trace(phoenix: PhoenixServer, nats_server: Any) -> str:
    return run_three_process_flow(nats_server.url, f"ui{os.getpid()}", phoenix.otel_env)


@needs_phoenix
@pytest.mark.timeout(240)
def test_spans_from_three_processes_form_one_tree(phoenix: PhoenixServer, flow_trace: str) -> None:
    spans = phoenix.client().wait_for_spans(flow_trace, len(SPAN_NAMES), timeout=30)

    assert sorted(span.name for span in spans) == sorted(SPAN_NAMES), spans
    by_name = {span.name: span for span in spans}
    chain = [by_name[name] for name in SPAN_NAMES]  # each the parent of the next
    assert chain[0].parent_id is None
    for parent, child in itertools.pairwise(chain):
        assert child.parent_id == parent.span_id, (parent.name, child.name)
    services = [span.service for span in chain]
    assert services == [
        "caller",
        "caller",
        "forwarder",
        "forwarder",
        "forwarder",
        "whoami",
        "whoami",
    ]
    assert {span.trace_id for span in spans} == {flow_trace}
    assert {span.project for span in spans} == {DEFAULT_PROJECT}
    assert by_name["process whoami/w (WhoAsk)"].attributes["messaging.system"] == "nats"
    hops = [span for span in spans if span.name.split()[0] in ("ask", "receive", "process")]
    kinds = {span.name.split()[0]: span.kind for span in hops}  # no "unknown" in the UI
    assert kinds == {"ask": "CHAIN", "receive": "CHAIN", "process": "AGENT"}
    assert format_tree(spans).splitlines()[-1].strip() == "process whoami/w (WhoAsk) [whoami]"
    assert phoenix.client().latest_trace_id() == flow_trace


def run_agent_flow(url: str, ns: str, env_for: Callable[[str], dict[str, str]]) -> str:
    """caller -> researcher (an agent in a host process, its model the scripted
    server) -> calculator (a tool actor in another), each exporting over OTLP;
    the trace id."""
    import asyncio

    from _util import run_host

    from actorbus.testing.scripted_model import ScriptedModel, call, say

    async def flow() -> str:
        async with ScriptedModel() as model:
            model.script(call("calculator_add", a=1, b=2), say("It is 3."))
            llm = {
                "OPENAI_BASE_URL": model.openai_url,
                "OPENAI_API_KEY": "test",
                "OPENAI_MODEL": "scripted-1",
            }
            agent_env = {**env_for("agent"), **llm}
            async with (
                run_host("_agent_actors:Calculator", url, ns, "*", env=env_for("calculator")),
                run_host("_agent_actors:Researcher", url, ns, "*", env=agent_env),
            ):
                caller = env_for("caller")
                return await ask_from_a_process(url, ns, caller, "researcher/p", "0", "add 1 and 2")

    return asyncio.run(flow())


@pytest.fixture(scope="module")
def agent_trace(phoenix: PhoenixServer, nats_server: Any) -> str:
    return run_agent_flow(nats_server.url, f"ag{os.getpid()}", phoenix.otel_env)


AGENT_SPANS = {"invoke_agent researcher", "chat scripted-1", "execute_tool calculator_add"}


@needs_phoenix
@pytest.mark.timeout(240)
def test_an_agents_tree_in_phoenix(phoenix: PhoenixServer, agent_trace: str) -> None:
    """The agent's run, its model calls and its tool call, across three processes,
    with the GenAI attributes and the kinds Phoenix shows (AGENT, LLM, TOOL)."""
    trace_id = agent_trace
    wanted = AGENT_SPANS

    def arrived() -> list[Any]:
        spans = phoenix.client().wait_for_spans(trace_id, 8, timeout=30)
        names = {span.name for span in spans}
        calculator = any(s.service == "calculator" for s in spans)
        return spans if wanted <= names and calculator else []

    spans = arrived() or arrived()  # the last exports may come a moment later
    by_name: dict[str, Any] = {}
    for span in spans:
        by_name.setdefault(span.name, span)
    agent, tool = by_name["invoke_agent researcher"], by_name["execute_tool calculator_add"]
    chats = [span for span in spans if span.name == "chat scripted-1"]
    assert (agent.kind, tool.kind, {c.kind for c in chats}) == ("AGENT", "TOOL", {"LLM"})
    assert len(chats) == 2
    assert chats[0].attributes["gen_ai.provider.name"] == "openai"
    assert {c.parent_id for c in chats} | {tool.parent_id} == {agent.span_id}
    assert agent.service == "agent"
    tool_side = [s for s in spans if s.service == "calculator"]
    assert tool_side, "the tool actor's spans are in the agent's trace"


@needs_phoenix
@needs_chromium
@pytest.mark.timeout(240)
def test_trace_page_renders_the_tree(
    phoenix: PhoenixServer, flow_trace: str, tmp_path: Path
) -> None:
    phoenix.client().wait_for_spans(flow_trace, len(SPAN_NAMES), timeout=30)
    url = phoenix.trace_url(flow_trace)

    # ACTORBUS_TRACE_SCREENSHOT=path/to/trace.png keeps the picture where you want it.
    target = os.environ.get("ACTORBUS_TRACE_SCREENSHOT") or tmp_path / "trace.png"
    png, dom = capture_page(url, target, window_size=(1400, 900), showing=tuple(SPAN_NAMES))
    for name in SPAN_NAMES:
        assert name in dom, f"{name} not on {url}"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") == 1400  # IHDR width
    assert len(data) > 20_000, f"suspiciously small screenshot: {len(data)} bytes"
    print(f"trace page screenshot: {png}")


@needs_phoenix
@needs_chromium
@pytest.mark.timeout(240)
def test_the_agents_trace_page_shows_its_steps(
    phoenix: PhoenixServer, agent_trace: str, tmp_path: Path
) -> None:
    """What a person sees: Phoenix's page of the agent's trace names the run, its
    model calls and its tool call."""
    phoenix.client().wait_for_spans(agent_trace, 8, timeout=30)
    url = phoenix.trace_url(agent_trace)
    png, dom = capture_page(url, tmp_path / "agent.png", showing=tuple(AGENT_SPANS))
    for name in AGENT_SPANS:
        assert name in dom, f"{name} not on the agent's trace page"
    assert png.stat().st_size > 20_000


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
    monkeypatch.setattr(trace_ui_server, "STOP_TIMEOUT", 0.5)  # where start_phoenix reads it
    pidfile = tmp_path / "pid"
    fake = _fake_python(tmp_path, f"trap '' TERM; echo $$ > {pidfile}; exec sleep 60")
    started = time.monotonic()
    with pytest.raises(TraceUIError, match="did not answer"):
        start_phoenix(python=fake, startup_timeout=1.0)
    assert time.monotonic() - started < 10
    pid = int(pidfile.read_text())
    assert not pid_alive(pid)


def test_missing_phoenix_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_ui_server, "find_phoenix", lambda extra=(): None)
    with pytest.raises(TraceUIError, match="pip install arize-phoenix"):
        start_phoenix()


@needs_phoenix
@pytest.mark.timeout(240)
async def test_demo_trace_prints_the_whole_flow_and_sigterm_stops_phoenix(
    tmp_path: Path,
) -> None:
    """`actorbus demo --trace` prints every span Phoenix holds of the flow (it
    printed the first batch: 26 of 31), and SIGTERM stops Phoenix with it
    (which was left running, orphaned)."""
    import asyncio
    import signal

    from actorbus.services.trace_ui import PhoenixClient

    env = {**os.environ, "ACTORBUS_HOME": str(tmp_path / "home")}
    env["ACTORBUS_PHOENIX_PYTHON"] = str(PHOENIX_PYTHON)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "actorbus",
        "demo",
        "--trace",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(180):
            while not (lines and lines[-1].startswith("phoenix: ")):
                line = (await proc.stdout.readline()).decode()
                assert line, "demo --trace ended:\n" + "".join(lines)
                lines.append(line.rstrip("\n"))
        root = next(i for i, line in enumerate(lines) if line.startswith("actorbus demo"))
        end = next(i for i, line in enumerate(lines) if line.startswith("trace: "))
        printed = lines[root:end]
        trace_id = lines[end].rsplit("/", 1)[1].strip()
        base = lines[-1].split()[1]
        held = PhoenixClient(base).spans(trace_id)
        assert len(printed) == len(held), (printed, [s.name for s in held])
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await proc.wait()
        port = int(base.rsplit(":", 1)[1].strip("/"))
        with pytest.raises(ConnectionRefusedError):  # nothing listens there any more
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
