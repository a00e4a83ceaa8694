"""Child processes of ``bench/tracing.py``, one configuration each.

- ``server URL --ns NS --tracing KIND``: the ``Echo`` actor of ``bench/ask.py`` at
  ``echo/1`` in actorbus namespace ``NS`` (each configuration has its own, so the
  pairs share one nats-server without seeing each other's messages), and a
  probe on :func:`probe_subject` (a plain nats-py connection) that answers
  ``info`` (which actorbus, tracing state) and ``cpu`` (spans flushed first,
  then this process's CPU seconds and its span counters), so the client can
  charge server CPU and spans to each measured phase;
- ``client URL --ns NS --tracing KIND``: asks that actor the ``Question`` of
  ``bench/ask.py`` and answers one JSON line per command read from stdin:
  ``info``, ``lat N`` (sequential latency after a warm-up, with the samples),
  ``tput N INFLIGHT`` (throughput after a warm-up burst);
- ``sink PORT``: a tiny aiohttp OTLP/HTTP receiver on 127.0.0.1 that accepts
  ``POST /v1/traces`` with 200 and counts requests and bytes (``GET /stats``).

``--tracing`` is ``none`` (nothing installed: actorbus decides, so with no
``OTEL_*`` variables tracing stays off), ``discard`` (an SDK ``TracerProvider``
with a ``BatchSpanProcessor`` into an exporter that drops the spans) or
``otlp`` (the same with ``OTLPSpanExporter`` to ``--otlp-endpoint``). The
provider is installed before ``ActorSystem.connect``, which makes actorbus trace
into it.

Which ``actorbus`` is imported is up to ``PYTHONPATH`` (``bench/tracing.py``
points it at a git worktree for the "before" configuration); this file only uses
what existed before telemetry did. Each child prints ``ready`` once it can be
used, then runs until SIGTERM or until its stdin is closed; SIGINT is ignored
(the parent stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import nats
from _ask_server import ECHO_ADDRESS, Answer, Echo
from _child import READY, stop_when_stdin_closes
from _harness import percentile
from ask import make_payloads
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import actorbus
from actorbus import ActorSystem

TRACING_KINDS = ("none", "discard", "otlp")
WARMUP = 200  # sequential asks before each latency phase
TIMEOUT = 5.0  # per ask, seconds

Call = Callable[[], Awaitable[None]]


async def quiet(_: Exception) -> None:
    """Error callback of the probe connections: no tracebacks when the run ends."""


def probe_subject(namespace: str) -> str:
    return f"bench.tracing.{namespace}.probe"


# -- tracing set-up ------------------------------------------------------------
class CountingExporter(SpanExporter):
    """Counts the spans it is given, then drops them (``inner`` None) or passes
    them on to ``inner`` (counting those it failed to export)."""

    def __init__(self, inner: SpanExporter | None = None) -> None:
        self.inner = inner
        self.spans = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.inner is None:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.spans += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        if self.inner is not None:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True if self.inner is None else self.inner.force_flush(timeout_millis)


class DropCounter(logging.Filter):
    """Counts (and silences) the SDK's per-span "Queue full, dropping" warnings."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Queue full"):
            self.dropped += 1
            return False
        return True


class Tracing:
    """The SDK tracer provider this process installed, if any, and its counters."""

    def __init__(self, kind: str, service: str, otlp_endpoint: str | None) -> None:
        self.kind = kind
        self.provider: TracerProvider | None = None
        self.drops = DropCounter()
        self.exporter: CountingExporter | None = None
        if kind == "none":
            return
        if kind == "discard":
            exporter = CountingExporter()
        elif kind == "otlp":
            if not otlp_endpoint:
                raise SystemExit("--tracing otlp needs --otlp-endpoint")
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = CountingExporter(OTLPSpanExporter(endpoint=otlp_endpoint, timeout=10))
        else:
            raise SystemExit(f"unknown --tracing {kind!r}")
        self.exporter = exporter
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        logging.getLogger("opentelemetry.sdk._shared_internal").addFilter(self.drops)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        self.provider = provider

    def flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def counters(self) -> dict[str, int]:
        exporter = self.exporter
        return {
            "spans": 0 if exporter is None else exporter.spans,
            "dropped": self.drops.dropped,
            "export_failed": 0 if exporter is None else exporter.failed,
        }

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def describe(tracing: Tracing, system: ActorSystem | None) -> dict[str, Any]:
    """Which actorbus this process runs and what its system's telemetry records.

    ``foreign_modules`` lists ``actorbus.*`` modules loaded from outside the
    imported package's directory (the editable install's finder would supply a
    module the package lacks): it should be empty.
    """
    root = Path(actorbus.__file__).resolve().parent
    foreign = sorted(
        name
        for name, module in list(sys.modules.items())
        if name.startswith("actorbus.")
        and getattr(module, "__file__", None)
        and not Path(module.__file__ or "").resolve().is_relative_to(root)
    )
    telemetry: dict[str, Any] = {"available": False, "tracing": None, "metrics": None}
    if (root / "telemetry").is_dir() and system is not None:  # the code before it had none
        chosen = system.runtime.telemetry
        telemetry = {"available": True, "tracing": chosen.tracing, "metrics": chosen.metrics}
    return {
        "pid": os.getpid(),
        "actorbus_file": actorbus.__file__,
        "actorbus_modules": sum(1 for name in sys.modules if name.startswith("actorbus.")),
        "foreign_modules": foreign,
        "tracing_kind": tracing.kind,
        "provider": type(trace.get_tracer_provider()).__name__,
        **telemetry,
    }


# -- server --------------------------------------------------------------------
async def serve(url: str, namespace: str, tracing: Tracing) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)

    nc = await nats.connect(url, name=f"bench-tracing-probe-{namespace}", error_cb=quiet)
    system: ActorSystem | None = None

    async def probe(msg: Msg) -> None:
        if msg.data == b"info":
            body: dict[str, Any] = describe(tracing, system)
        else:
            tracing.flush()  # charge the export of this phase's spans to it
            body = {"cpu": time.process_time(), **tracing.counters()}
        await msg.respond(json.dumps(body).encode())

    try:
        await nc.subscribe(probe_subject(namespace), cb=probe)
        system = await ActorSystem.connect(
            url, name=f"bench-tracing-server-{namespace}", namespace=namespace
        )
        await system.spawn(Echo, key=ECHO_ADDRESS.split("/", 1)[1])
        await nc.flush()
        await system.nc.flush()
        print(READY, flush=True)
        await stop.wait()
    finally:
        if system is not None:
            await system.close(timeout=2.0)
        await nc.close()
        tracing.shutdown()


# -- client --------------------------------------------------------------------
class Client:
    def __init__(
        self, nc: NatsClient, system: ActorSystem, namespace: str, tracing: Tracing
    ) -> None:
        self.nc = nc
        self.system = system
        self.subject = probe_subject(namespace)
        self.tracing = tracing
        _, self.question, _ = make_payloads()
        question = self.question

        async def call() -> None:
            await system.ask(ECHO_ADDRESS, question, timeout=TIMEOUT, returns=Answer)

        self.call: Call = call

    async def verify(self) -> None:
        answer = await self.system.ask(ECHO_ADDRESS, self.question, timeout=TIMEOUT)
        if not isinstance(answer, Answer) or answer.text != self.question.text:
            raise RuntimeError(f"Echo actor answered {answer!r}, expected an Answer echo")

    async def server(self, what: bytes) -> dict[str, Any]:
        msg = await self.nc.request(self.subject, what, timeout=30.0)
        body: dict[str, Any] = json.loads(msg.data)
        return body

    async def info(self) -> dict[str, Any]:
        return {
            "client": describe(self.tracing, self.system),
            "server": await self.server(b"info"),
            "question_text_chars": len(self.question.text),
        }

    async def _mark(self) -> tuple[float, dict[str, Any], dict[str, int]]:
        """Flush the spans so far, then read server and client CPU and counters."""
        server = await self.server(b"cpu")
        self.tracing.flush()
        return time.process_time(), server, self.tracing.counters()

    def _costs(
        self,
        n: int,
        start: tuple[float, dict[str, Any], dict[str, int]],
        end: tuple[float, dict[str, Any], dict[str, int]],
    ) -> dict[str, float]:
        (c0, s0, k0), (c1, s1, k1) = start, end
        return {
            "client_cpu_us_per_req": (c1 - c0) / n * 1e6,
            "server_cpu_us_per_req": (s1["cpu"] - s0["cpu"]) / n * 1e6,
            "client_spans_per_req": (k1["spans"] - k0["spans"]) / n,
            "server_spans_per_req": (s1["spans"] - s0["spans"]) / n,
            "client_dropped": k1["dropped"] - k0["dropped"],
            "server_dropped": s1["dropped"] - s0["dropped"],
            "export_failed": k1["export_failed"]
            - k0["export_failed"]
            + s1["export_failed"]
            - s0["export_failed"],
        }

    async def latency(self, n: int) -> dict[str, Any]:
        call = self.call
        for _ in range(WARMUP):
            await call()
        samples = [0] * n
        clock = time.perf_counter_ns
        gc.collect()
        start = await self._mark()
        for i in range(n):
            t0 = clock()
            await call()
            samples[i] = clock() - t0
        end = await self._mark()
        us = sorted(s / 1000 for s in samples)
        return {
            "n": n,
            "p50_us": percentile(us, 0.50),
            "p95_us": percentile(us, 0.95),
            "p99_us": percentile(us, 0.99),
            "mean_us": statistics.fmean(us),
            "min_us": us[0],
            "max_us": us[-1],
            **self._costs(n, start, end),
            "samples_us": [round(x, 2) for x in us],  # the parent pools blocks
        }

    async def _pool(self, n: int, inflight: int) -> None:
        """A fixed pool of ``inflight`` workers sharing ``n`` asks."""
        remaining = n
        call = self.call

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await call()

        await asyncio.gather(*(worker() for _ in range(min(inflight, n))))

    async def throughput(self, n: int, inflight: int) -> dict[str, Any]:
        await self._pool(max(inflight, min(n // 10, 1000)), inflight)
        gc.collect()
        start = await self._mark()
        t0 = time.perf_counter()
        await self._pool(n, inflight)
        end = await self._mark()  # the spans' export is part of the work: flushed in time
        elapsed = time.perf_counter() - t0
        return {
            "n": n,
            "inflight": inflight,
            "seconds": elapsed,
            "rps": n / elapsed,
            **self._costs(n, start, end),
        }

    async def command(self, words: list[str]) -> dict[str, Any]:
        match words:
            case ["info"]:
                return await self.info()
            case ["lat", n]:
                return await self.latency(int(n))
            case ["tput", n, inflight]:
                return await self.throughput(int(n), int(inflight))
        raise ValueError(f"unknown command {' '.join(words)!r}")


async def run_client(url: str, namespace: str, tracing: Tracing) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    nc = await nats.connect(url, name=f"bench-tracing-probe-client-{namespace}", error_cb=quiet)
    system: ActorSystem | None = None
    try:
        system = await ActorSystem.connect(
            url, name=f"bench-tracing-client-{namespace}", namespace=namespace
        )
        client = Client(nc, system, namespace, tracing)
        await client.verify()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print(READY, flush=True)
        while not stop.is_set():
            read = asyncio.ensure_future(reader.readline())
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not read.done():
                read.cancel()
                break
            line = read.result()
            if not line:  # the parent closed our stdin
                break
            try:
                reply = await client.command(line.decode().split())
            except Exception as exc:
                reply = {"error": repr(exc)}
            print(json.dumps(reply), flush=True)
    finally:
        if system is not None:
            await system.close(timeout=2.0)
        await nc.close()
        tracing.shutdown()


# -- OTLP sink -----------------------------------------------------------------
async def run_sink(port: int) -> None:
    from aiohttp import web

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)
    stats = {"requests": 0, "bytes": 0}

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        stats["requests"] += 1
        stats["bytes"] += len(body)
        # An empty ExportTraceServiceResponse is an empty protobuf message.
        return web.Response(status=200, body=b"", content_type="application/x-protobuf")

    async def show(_: web.Request) -> web.Response:
        return web.json_response(stats)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/stats", show)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(READY, flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


# -- entry point -----------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("role", choices=("server", "client", "sink"))
    parser.add_argument("target", help="NATS server URL (server, client) or port (sink)")
    parser.add_argument("--ns", default="ab", help="actorbus namespace of this configuration")
    parser.add_argument("--tracing", choices=TRACING_KINDS, default="none")
    parser.add_argument("--otlp-endpoint", help="OTLP/HTTP traces URL for --tracing otlp")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.role == "sink":
        asyncio.run(run_sink(int(args.target)))
        return
    # Before ActorSystem.connect: actorbus finds this provider and traces into it.
    tracing = Tracing(args.tracing, f"bench-tracing-{args.role}", args.otlp_endpoint)
    if args.role == "server":
        asyncio.run(serve(args.target, args.ns, tracing))
    else:
        asyncio.run(run_client(args.target, args.ns, tracing))


if __name__ == "__main__":
    main()
