"""OpenTelemetry spans on every hop: send, receive and process, one trace across
actors, the messaging conventions' attributes, no content unless asked, links for
redeliveries, and nothing at all when tracing is off."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from actorbus import Actor, RemoteError, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.telemetry import configure


class Question(BaseModel):
    text: str


class Echo(Actor):
    @handler
    async def echo(self, q: Question) -> dict[str, str]:
        if q.text == "fail":
            raise ValueError("no")
        return {"text": q.text, "trace": self.envelope.context.trace_id or ""}


class Front(Actor):
    """Asks Echo: its spans are the parent of Echo's."""

    @handler
    async def relay(self, q: Question) -> dict[str, str]:
        answer: dict[str, str] = await self.ask("echo/1", q)
        return answer


def hop(name: str) -> str:
    """A span's name without the intent: ``process echo/1 (Question)`` is the hop
    ``process echo/1``."""
    return name.split(" (")[0]


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """The finished spans by hop (see :func:`hop`)."""
    return {hop(s.name): s for s in exporter.get_finished_spans()}


def ids(span: ReadableSpan) -> tuple[int, int]:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id, ctx.span_id


async def test_an_ask_is_one_trace_of_send_receive_and_process(make_system, spans: Any) -> None:
    host = await make_system()
    await host.spawn(Echo, "1")
    caller = await make_system()
    answer = await caller.ask("echo/1", Question(text="hi"), session_id="s-1")
    got = by_name(spans)
    send, receive, process = got["ask echo/1"], got["receive echo/1"], got["process echo/1"]
    # the intent in the names of the send and the handler's run: the tree says what
    assert (send.name, receive.name) == ("ask echo/1 (Question)", "receive echo/1")
    assert process.name == "process echo/1 (Question)"
    trace_id, send_id = ids(send)
    assert answer["trace"] == format(trace_id, "032x")  # the envelope carries the same id
    assert receive.parent is not None
    assert receive.parent.span_id == send_id
    assert process.parent is not None
    assert process.parent.span_id == ids(receive)[1]
    assert {ids(s)[0] for s in (send, receive, process)} == {trace_id}
    assert send.kind == trace.SpanKind.CLIENT
    assert process.kind == trace.SpanKind.SERVER
    attrs = dict(process.attributes or {})
    assert attrs["messaging.system"] == "nats"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.destination.name"].endswith(".a.echo.1")
    assert attrs["messaging.message.conversation_id"] == "s-1"
    assert attrs["actorbus.intent"] == "Question"
    assert attrs["actorbus.source"] == caller.client_address
    # the kind Phoenix shows beside a span (it reads "unknown" without one)
    assert attrs["openinference.span.kind"] == "AGENT"
    assert dict(send.attributes or {})["openinference.span.kind"] == "CHAIN"
    assert attrs["actorbus.destination"] == "echo/1"
    assert attrs["actorbus.delivery"] == "core"
    sent = dict(send.attributes or {})
    assert sent["messaging.message.id"] == attrs["messaging.message.id"]
    assert sent["messaging.message.body.size"] > 0
    assert len(sent["actorbus.content.sha256"]) == 32


async def test_calls_made_by_a_handler_are_children_of_its_span(make_system, spans: Any) -> None:
    host = await make_system()
    await host.spawn(Echo, "1")
    await host.spawn(Front, "f")
    caller = await make_system()
    await caller.ask("front/f", Question(text="hi"))
    got = by_name(spans)
    assert len({ids(s)[0] for s in got.values()}) == 1  # one trace
    assert got["ask echo/1"].parent is not None
    assert got["ask echo/1"].parent.span_id == ids(got["process front/f"])[1]
    assert dict(got["receive echo/1"].attributes or {})["actorbus.source"] == "front/f"


async def test_content_stays_out_of_spans_unless_a_preview_is_asked(
    make_system, spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = await make_system()
    await host.spawn(Echo, "1")
    secret = "mail bob@example.com card 4111111111111111 password: hunter2"
    await host.ask("echo/1", Question(text=secret))
    everything = repr([dict(s.attributes or {}) for s in spans.get_finished_spans()])
    assert "bob@example.com" not in everything
    assert "hunter2" not in everything
    spans.clear()
    monkeypatch.setenv("ACTORBUS_TRACE_PREVIEW", "200")
    assert configure(True).preview == 200  # chosen when a system opens
    previewing = await make_system()
    await previewing.spawn(Echo, "2")
    await previewing.ask("echo/2", Question(text=secret))
    preview = dict(by_name(spans)["process echo/2"].attributes or {})["actorbus.content.preview"]
    assert "<email>" in preview
    assert "<number>" in preview
    assert "hunter2" not in preview


async def test_a_failed_handler_marks_its_span(make_system, spans: Any) -> None:
    host = await make_system()
    await host.spawn(Echo, "1")
    with pytest.raises(RemoteError):
        await host.ask("echo/1", Question(text="fail"))
    got = by_name(spans)
    assert got["process echo/1"].status.status_code == trace.StatusCode.ERROR
    assert got["ask echo/1"].status.status_code == trace.StatusCode.ERROR
    # the handler's own exception, with its traceback, where the agent runs
    [raised] = [e for e in got["process echo/1"].events if e.name == "exception"]
    attributes = dict(raised.attributes or {})
    assert attributes["exception.type"] == "ValueError"
    assert "Traceback (most recent call last)" in str(attributes["exception.stacktrace"])


class Flaky(Actor):
    durable = True
    failures = 1

    @handler
    async def work(self, q: Question) -> None:
        if Flaky.failures:
            Flaky.failures -= 1
            raise RuntimeError("once")


async def test_a_redelivery_is_linked_to_the_original_send(make_system, spans: Any) -> None:
    host = await make_system(durable=DurableSettings(backoff=(0.05,)))
    await host.spawn(Flaky, "1")
    await host.tell("flaky/1", Question(text="x"))

    def received() -> list[ReadableSpan]:
        return [s for s in spans.get_finished_spans() if hop(s.name) == "process flaky/1"]

    async def two() -> None:
        while True:
            if len(received()) >= 2:
                return
            await asyncio.sleep(0.02)  # a bounded poll of the exporter

    await asyncio.wait_for(two(), 5)
    receives = [s for s in spans.get_finished_spans() if hop(s.name) == "receive flaky/1"]
    send = by_name(spans)["tell flaky/1"]
    assert [dict(s.attributes or {})["actorbus.attempt"] for s in receives] == [1, 2]
    assert all(dict(s.attributes or {})["actorbus.delivery"] == "durable" for s in receives)
    assert receives[1].links
    assert receives[1].links[0].context.span_id == ids(send)[1]
    assert {ids(s)[0] for s in receives} == {ids(send)[0]}


async def test_no_spans_when_tracing_is_off(
    make_system, span_exporter: InMemorySpanExporter
) -> None:
    span_exporter.clear()
    host = await make_system()
    assert not host.telemetry.tracing
    await host.spawn(Echo, "1")
    await host.ask("echo/1", Question(text="hi"))
    assert span_exporter.get_finished_spans() == ()


async def test_a_flow_across_three_processes_is_one_recorded_trace(
    nats_server: Any, ns: str, tmp_path: Any, capsys: Any
) -> None:
    """caller process -> forward/f (process B) -> whoami/w (process C), each recording
    its spans in one directory; `actorbus trace` puts the tree back together."""
    import json
    import sys

    from _util import TESTS_DIR, child_env, run_host

    from actorbus.cli import main
    from actorbus.telemetry.recorder import build_tree, read_trace

    env = {"ACTORBUS_TRACE_DIR": str(tmp_path), "OTEL_SERVICE_NAME": "host"}
    async with (
        run_host("_actors:Whoami", nats_server.url, ns, "w", env=env),
        run_host("_actors:Forward", nats_server.url, ns, "f", env=env),
    ):
        caller = await asyncio.create_subprocess_exec(
            sys.executable,
            str(TESTS_DIR / "_ask.py"),
            nats_server.url,
            ns,
            "forward/f",
            "7",
            stdout=asyncio.subprocess.PIPE,
            env={**child_env(), **env, "OTEL_SERVICE_NAME": "caller"},
        )
        out, _ = await asyncio.wait_for(caller.communicate(), 30)
    assert caller.returncode == 0
    assert json.loads(out)["tracing"] is True
    trace_id = json.loads(out)["trace_id"]  # of the caller's root span "flow"
    records = read_trace(tmp_path, trace_id)  # the hosts flushed on their way out
    [root] = build_tree(records)
    assert root.record["service"] == "caller"

    def shape(node: Any) -> list[Any]:
        return [hop(node.record["name"]), [shape(c) for c in node.children]]

    hops = ["ask forward/f", "receive forward/f", "process forward/f"]
    hops += ["ask whoami/w", "receive whoami/w", "process whoami/w"]
    expected: list[Any] = [hops[-1], []]
    for name in reversed(hops[:-1]):
        expected = [name, [expected]]
    assert shape(root) == ["flow", [expected]]
    assert len({r["service"] for r in records}) == 2  # caller and the hosts

    assert await asyncio.to_thread(main, ["trace", trace_id[:12], "--dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "process whoami/w" in printed
    assert trace_id in printed


async def test_a_replay_is_linked_to_the_original_send(make_system, spans: Any) -> None:
    system = await make_system()
    await system.tell("ledger/v1", Question(text="a"), durable=True)
    original = by_name(spans)["tell ledger/v1"]
    spans.clear()
    assert await system.rerun(system.history(address="ledger/v1"), "ledger/v2") == 1
    replay = by_name(spans)["tell ledger/v2"]
    [link] = replay.links
    assert link.context.span_id == ids(original)[1]
    assert dict(link.attributes or {})["actorbus.link"] == "replay"


class Slow(Actor):
    @handler
    async def count(self, n: dict[str, int]) -> AsyncIterator[dict[str, int]]:
        for i in range(n["upto"]):
            await asyncio.sleep(0.05)
            yield {"i": i}


async def test_a_stream_span_lasts_as_long_as_the_stream(make_system, spans: Any) -> None:
    """The caller's `stream` span ends with the stream (it ended at once, 0 ms,
    while the stream ran on), also when the caller leaves early."""
    host = await make_system()
    await host.spawn(Slow, "1")
    caller = await make_system()
    started = time.monotonic()
    items = [x async for x in caller.stream("slow/1", {"upto": 4})]
    took = time.monotonic() - started
    assert len(items) == 4
    span = by_name(spans)["stream slow/1"]
    assert span.end_time is not None
    assert span.start_time is not None
    lasted = (span.end_time - span.start_time) / 1e9
    assert 0.15 <= lasted <= took + 0.01, (lasted, took)
    spans.clear()
    async with contextlib.aclosing(caller.stream("slow/1", {"upto": 4})) as stream:
        async for _ in stream:
            break  # leaving early (the stream closed) ends the span too
    assert "stream slow/1" in by_name(spans)


async def test_state_load_and_save_are_spans_of_their_turns(make_system, spans: Any) -> None:
    from _actors import Counted

    host = await make_system()
    await host.spawn(Counted, "s")  # activation: a load, and the claim (a save)
    spans.clear()
    assert await host.ask("counted/s", "x", intent="bump") == 1
    finished = {s.name: s for s in spans.get_finished_spans()}
    save, process = finished["state save counted/s"], finished["process counted/s (bump)"]
    assert save.parent is not None
    assert save.parent.span_id == ids(process)[1]  # inside the turn that saved it
    assert dict(save.attributes or {})["actorbus.state.size"] > 0
    await host.stop_actor("counted/s")
    spans.clear()
    await host.spawn(Counted, "s")
    names = [s.name for s in spans.get_finished_spans()]
    assert "state load counted/s" in names
