"""What every stack of ``bench/protocolbench.py`` runs: the same loops and the same
clock for all, so the stacks differ only in how a call crosses the wire.

A stack is one module of this directory (``nats_raw``, ``actorbus_native``,
``faststream_nats``, ``autogen_grpc``, ``a2a_http``) that says how to

- serve an echo and call it (``serve_echo``, ``echo_client``);
- serve the Streaming Queue's pull (``serve_pull``: the coordinator's side, in
  the measuring process) and call it (``pull_client``: a worker's side);
- serve a Fail-Storm shard and call one (``serve_shard``, ``shard_client``; see
  ``_storm.py``).

It runs as a script in the interpreter that has its packages (the peers live in
``.venv-peers``, apart from actorbus's own), with one command:

    python bench/stacks/<stack>.py serve-echo --nats URL        # prints "ready ADDRESS"
    python bench/stacks/<stack>.py echo --address A ...         # prints "result {JSON}"
    python bench/stacks/<stack>.py sq --nats URL --workers N .. # the same; + a workers process
    python bench/stacks/<stack>.py sq-workers --address A ...   # (started by sq)
    python bench/stacks/<stack>.py storm --nats URL ...         # Fail-Storm (_storm.py)
    python bench/stacks/<stack>.py serve-shard --index I ...    # (started by storm, docqa)
    python bench/stacks/<stack>.py docqa --nats URL ...         # document QA (_docqa.py)

Only the standard library here (and ``bench/_child.py``, which has only it too):
this file runs under both interpreters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import string
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from _child import READY, stop_when_stdin_closes
from _docqa import docqa_run
from _storm import serve as serve_shard_until, storm_run

# serve-echo's line is "ready ADDRESS"
RESULT = "result"  # echo's and sq's line: "result {JSON}" (a stack's own logs may come first)
Close = Callable[[], Awaitable[None]]
EchoCall = Callable[[str], Awaitable[str]]
# a worker's pull: (worker, the question it answered or None, its answer) -> next question
PullCall = Callable[[int, "int | None", "str | None"], Awaitable["int | None"]]


def payload(size: int, seed: int = 20261127) -> str:
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size))


def answer_of(question: int) -> str:
    return f"answer-{question}"


# -- the safety probes' marks (bench/_pb_safety.py) --------------------------------
MARK = "PII:card=4111-1111-1111-1111"  # what an eavesdropper looks for
TAMPERED = "PII:card=4000-0000-0000-0002"  # what a tamperer puts in its place (same length)
_watching = False


def handled(text: str) -> None:
    """(An echo server, under ``serve-echo --watch``) say on stdout which text the
    agent handled: the marked one, the tampered one, or another. A safety probe
    counts these lines to tell whether a replayed or altered request got through."""
    if _watching:
        kind = "mark" if MARK in text else "tampered" if TAMPERED in text else "other"
        print("handled", kind, flush=True)


# -- echo ------------------------------------------------------------------------
async def echo_run(call: EchoCall, args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up, ``--sequential`` calls one at a time (latency), then ``--concurrent``
    calls from ``--inflight`` workers (throughput)."""
    text = args.text or payload(args.size)
    for _ in range(args.warmup):
        if await call(text) != text:
            raise RuntimeError("the echo came back different")
    latencies = []
    for _ in range(args.sequential):
        start = time.perf_counter()
        await call(text)
        latencies.append((time.perf_counter() - start) * 1e6)
    left = args.concurrent
    errors = 0

    async def worker() -> None:
        nonlocal left, errors
        while left > 0:
            left -= 1
            try:
                await call(text)
            except Exception:
                errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.inflight)))
    elapsed = time.perf_counter() - start
    return {
        "latencies_us": [round(x, 1) for x in latencies],
        "throughput": args.concurrent / elapsed,
        "errors": errors,
    }


# -- Streaming Queue ---------------------------------------------------------------
@dataclass
class Queue:
    """The coordinator's state: questions handed out one per pull, answers checked,
    and a barrier so that every worker starts at once."""

    questions: int
    workers: int

    def __post_init__(self) -> None:
        self.next = 0
        self.sent: dict[int, float] = {}
        self.latencies: dict[int, float] = {}
        self.wrong = 0
        self.per_worker: dict[int, int] = {}
        self.joined: set[int] = set()
        self.all_joined = asyncio.Event()
        self.done = asyncio.Event()
        self.start = self.end = 0.0
        self.cpu_start = self.cpu_end = 0.0  # this (the coordinator's) process's CPU

    async def pull(self, worker: int, question: int | None, answer: str | None) -> int | None:
        now = time.perf_counter()
        if question is not None:
            self.latencies[question] = (now - self.sent.pop(question)) * 1e3
            self.per_worker[worker] = self.per_worker.get(worker, 0) + 1
            if answer != answer_of(question):
                self.wrong += 1
            if len(self.latencies) == self.questions:
                self.end, self.cpu_end = now, time.process_time()
                self.done.set()
        else:
            self.joined.add(worker)
            if len(self.joined) == self.workers:
                self.start, self.cpu_start = time.perf_counter(), time.process_time()
                self.all_joined.set()
            await self.all_joined.wait()
        if self.next >= self.questions:
            return None
        self.next += 1
        self.sent[self.next - 1] = time.perf_counter()
        return self.next - 1

    def result(self) -> dict[str, Any]:
        return {
            "duration_s": self.end - self.start,
            "coordinator_cpu_s": self.cpu_end - self.cpu_start,
            "latencies_ms": [round(self.latencies[q], 3) for q in sorted(self.latencies)],
            "answered": len(self.latencies),
            "wrong": self.wrong,
            "per_worker": [self.per_worker.get(w, 0) for w in range(self.workers)],
        }


async def workers_run(pull: PullCall, args: argparse.Namespace) -> float:
    """``--workers`` workers: pull, spend ``--service-ms`` on the question, answer
    it with the next pull, until the queue is empty. Returns this process's CPU
    seconds from the first question to the last."""
    started: list[float] = []

    async def worker(n: int) -> None:
        question = await pull(n, None, None)
        if not started:
            started.append(time.process_time())
        while question is not None:
            await asyncio.sleep(args.service_ms / 1000)
            question = await pull(n, question, answer_of(question))

    await asyncio.gather(*(worker(n) for n in range(args.workers)))
    return time.process_time() - (started[0] if started else time.process_time())


async def sq_run(stack: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    queue = Queue(args.questions, args.workers)
    address, close = await stack.serve_pull(args, queue.pull)
    workers = await asyncio.create_subprocess_exec(
        sys.executable,
        stack.__file__ or "",
        "sq-workers",
        *("--address", address, "--workers", str(args.workers)),
        *("--service-ms", str(args.service_ms)),
        *(["--nats", args.nats] if args.nats else []),
        *("--codec", args.codec),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(args.timeout):
            await queue.done.wait()
            assert workers.stdout is not None
            said = (await workers.stdout.readline()).decode().split()  # "cpu SECONDS"
        result = queue.result()
        result["workers_cpu_s"] = float(said[1]) if said[:1] == ["cpu"] else None
        return result
    finally:
        if workers.stdin is not None:
            workers.stdin.close()
        try:
            await asyncio.wait_for(workers.wait(), 10)
        except TimeoutError:
            workers.kill()
            await workers.wait()
        await close()


# -- the command line --------------------------------------------------------------
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "command",
        choices=("serve-echo", "echo", "sq", "sq-workers", "storm", "serve-shard", "docqa"),
    )
    parser.add_argument("--nats", default="", help="the NATS server's URL (NATS stacks)")
    parser.add_argument("--address", default="", help="what serve-echo / serve_pull printed")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=10000)
    parser.add_argument("--inflight", type=int, default=100)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--service-ms", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--codec", default="native", help="(actorbus) a codec at the edges")
    parser.add_argument("--text", default="", help="(echo) this text instead of --size bytes")
    parser.add_argument("--watch", action="store_true", help="(serve-echo) say what it handled")
    parser.add_argument("--advertise", default="", help="(serve-echo, HTTP) the URL to publish")
    storm = parser.add_argument_group("Fail-Storm (storm, serve-shard)")
    storm.add_argument("--index", type=int, default=0, help="(serve-shard) this shard")
    storm.add_argument("--shards", type=int, default=8)
    storm.add_argument("--kill", type=int, default=3, help="shards killed per cycle")
    storm.add_argument("--cycles", type=int, default=2)
    storm.add_argument("--window", type=float, default=10.0, help="seconds before/after")
    storm.add_argument("--restart-delay", type=float, default=2.0)
    storm.add_argument("--rate", type=float, default=40.0, help="queries/s, all clients")
    storm.add_argument("--clients", type=int, default=4)
    storm.add_argument("--query-timeout", type=float, default=1.0)
    storm.add_argument("--seed", type=int, default=7)
    storm.add_argument("--ports", default="", help="(A2A) each shard's port")
    storm.add_argument("--role", default="shard", choices=("shard", "docqa"))
    docqa = parser.add_argument_group("document QA (docqa)")
    docqa.add_argument("--readers", type=int, default=4)
    docqa.add_argument("--repeat", type=int, default=5, help="times each question is asked")
    return parser.parse_args(argv)


async def _main(stack: ModuleType, args: argparse.Namespace) -> None:
    if args.command == "echo":
        call, close = await stack.echo_client(args)
        try:
            print(RESULT, json.dumps(await echo_run(call, args)), flush=True)
        finally:
            await close()
        return
    if args.command == "sq":
        print(RESULT, json.dumps(await sq_run(stack, args)), flush=True)
        return
    if args.command == "storm":
        print(RESULT, json.dumps(await storm_run(stack, args)), flush=True)
        return
    if args.command == "docqa":
        print(RESULT, json.dumps(await docqa_run(stack, args)), flush=True)
        return
    stop = asyncio.Event()
    stop_when_stdin_closes(asyncio.get_running_loop(), stop)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if args.command == "serve-shard":
        await serve_shard_until(stack, args, stop)
        return
    if args.command == "serve-echo":
        global _watching
        _watching = args.watch
        address, close = await stack.serve_echo(args)
        print(f"{READY} {address}", flush=True)
        try:
            await stop.wait()
        finally:
            await close()
        return
    pull, close = await stack.pull_client(args)  # sq-workers
    try:
        runner = asyncio.ensure_future(workers_run(pull, args))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({runner, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if runner.done() and not runner.cancelled() and runner.exception() is None:
            print("cpu", runner.result(), flush=True)
        for task in (runner, stopped):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    finally:
        await close()


def event_loop(stack: ModuleType) -> str:
    """The event loop a stack runs on as its users run it: asyncio's, unless the
    stack says otherwise (``LOOP = "uvloop"``: uvicorn.run picks uvloop when it is
    installed, as with ``uvicorn[standard]``)."""
    if getattr(stack, "LOOP", "asyncio") == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "asyncio"
        return "uvloop"
    return "asyncio"


def main(stack: ModuleType) -> None:
    """A stack module's entry point (``if __name__ == "__main__": main(sys.modules[__name__])``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the orchestrator stops its children
    args = parse()
    if event_loop(stack) == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_main(stack, args))
        return
    asyncio.run(_main(stack, args))
