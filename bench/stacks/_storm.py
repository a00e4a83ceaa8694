"""Fail-Storm on any stack (ProtocolBench D.4; ``bench/fail_storm.py`` is actorbus's
own, with its supervisor): a Shard-QA ring of ``--shards`` processes, each
holding part of a seeded question set and asking the next shard for the rest;
client tasks query at ``--rate``; every cycle ``--kill`` shard processes get
SIGKILL and are started again ``--restart-delay`` seconds later, as new
processes (a cold start, the same for every stack).

A stack says how to serve a shard and how to call one (``serve_shard``,
``shard_client``; ``storm_infra`` for what the ring needs besides a broker, such
as AutoGen's host or the A2A servers' ports). A call to a shard that has no
server raises :class:`Unreachable`, and the ring skips it, as in the paper.

Only the standard library here: this file runs under both interpreters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any

from _child import READY

ShardCall = Callable[[int, str, float], Awaitable[str]]  # (shard, query JSON, timeout) -> reply
Handle = Callable[[str], Awaitable[str]]
SEED = 20260601
PROBE_TIMEOUT = 0.5
READY_TIMEOUT = 60.0


class Unreachable(Exception):
    """No process serves that shard now (it is dead): the ring skips it."""


def dataset(questions: int, seed: int = SEED) -> dict[str, str]:
    rng = random.Random(seed)
    return {f"q{i}": f"a{i}-{rng.getrandbits(32):08x}" for i in range(questions)}


def holder(question: str, shards: int) -> int:
    return int(question[1:]) % shards


def shard_handler(index: int, shards: int, questions: int, call: ShardCall) -> Handle:
    """The shard's logic, the same on every stack: answer what it holds, else ask
    the next live shard in the ring (at most ``shards`` hops, within the deadline)."""
    mine = {q: a for q, a in dataset(questions).items() if holder(q, shards) == index}

    async def handle(text: str) -> str:
        query = json.loads(text)
        answer = mine.get(query["q"])
        if answer is not None:
            return json.dumps({"a": answer, "hops": query["hops"], "shard": index})
        hops = query["hops"] + 1
        while hops < shards:
            remaining = query["deadline"] - time.time()
            if remaining <= 0:
                break
            nxt = (index + hops - query["hops"]) % shards
            onward = {"q": query["q"], "hops": hops, "deadline": query["deadline"]}
            try:
                return await call(nxt, json.dumps(onward), remaining)
            except Unreachable:
                hops += 1
        return json.dumps({"a": None, "hops": hops, "shard": index})

    return handle


# -- the shard process --------------------------------------------------------------
async def serve(stack: ModuleType, args: argparse.Namespace, stop: asyncio.Event) -> None:
    """(A ring's process) serve shard ``--index``, or with ``--role docqa`` that
    agent of the document QA scenario (``_docqa.py``), until ``stop``."""
    call, close_client = await stack.shard_client(args)
    if args.role == "docqa":
        from _docqa import handler  # it builds on this module

        handle = handler(args.index, args.readers, call)
    else:
        handle = shard_handler(args.index, args.shards, args.questions, call)
    close_server = await stack.serve_shard(args, handle)
    print(READY, flush=True)
    try:
        await stop.wait()
    finally:
        await close_server()
        await close_client()


# -- the storm -----------------------------------------------------------------------
class Ring:
    """The shard processes, by index."""

    def __init__(self, stack: ModuleType, args: argparse.Namespace, extra: list[str]) -> None:
        self.stack = stack
        self.args = args
        self.extra = extra
        self.procs: dict[int, asyncio.subprocess.Process] = {}

    async def start(self, index: int) -> None:
        a = self.args
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            self.stack.__file__ or "",
            *("serve-shard", "--index", str(index), "--shards", str(a.shards)),
            *("--questions", str(a.questions), "--nats", a.nats, *self.extra),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self.procs[index] = proc
        assert proc.stdout is not None
        async with asyncio.timeout(READY_TIMEOUT):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"shard {index} ended before it was ready")
                if line.decode().strip() == READY:
                    return

    async def kill(self, index: int) -> None:
        proc = self.procs.pop(index)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()

    async def stop_all(self) -> None:
        procs, self.procs = list(self.procs.values()), {}
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()  # the shard stops when its stdin closes
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


class Storm:
    def __init__(self, args: argparse.Namespace, call: ShardCall) -> None:
        self.args = args
        self.call = call
        self.data = dataset(args.questions)
        self.questions = list(self.data)
        self.samples: list[tuple[float, bool, float]] = []  # (start, ok, latency s)
        self.t0 = time.monotonic()
        self.stop = asyncio.Event()

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def query(self, rng: random.Random) -> None:
        question = rng.choice(self.questions)
        start = rng.randrange(self.args.shards)
        t, begin = self.now(), time.perf_counter()
        ok = False
        deadline = time.time() + self.args.query_timeout
        with contextlib.suppress(Exception):
            text = json.dumps({"q": question, "hops": 0, "deadline": deadline})
            reply = json.loads(await self.call(start, text, self.args.query_timeout + 0.25))
            ok = reply["a"] == self.data[question]
        self.samples.append((t, ok, time.perf_counter() - begin))

    async def client(self, n: int) -> None:
        rng = random.Random(self.args.seed * 1000 + n)
        period = self.args.clients / self.args.rate
        await asyncio.sleep(period * n / self.args.clients)
        while not self.stop.is_set():
            begin = time.monotonic()
            await self.query(rng)
            await asyncio.sleep(max(0.0, period - (time.monotonic() - begin)))

    async def probe(self, index: int) -> None:
        """Ask shard ``index`` a question it holds until it answers it."""
        shards = self.args.shards
        question = next(q for q in self.questions if holder(q, shards) == index)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            text = json.dumps({"q": question, "hops": 0, "deadline": time.time() + PROBE_TIMEOUT})
            with contextlib.suppress(Exception):
                reply = json.loads(await self.call(index, text, PROBE_TIMEOUT))
                if reply["a"] == self.data[question] and reply["shard"] == index:
                    return
            await asyncio.sleep(0.01)
        raise RuntimeError(f"shard {index} did not answer within {READY_TIMEOUT:g}s")

    def window(self, start: float, end: float) -> dict[str, Any]:
        inside = [s for s in self.samples if start <= s[0] < end]
        ok = sorted(s[2] * 1000 for s in inside if s[1])
        return {
            "queries": len(inside),
            "rate": len(ok) / len(inside) if inside else None,
            "p50_ms": statistics.median(ok) if ok else None,
        }


@contextlib.asynccontextmanager
async def running(
    stack: ModuleType, args: argparse.Namespace, role: list[str]
) -> AsyncIterator[tuple[Ring, ShardCall]]:
    """``args.shards`` processes serving their index (``role``: what they are), what
    the stack needs besides a broker, and a caller; all stopped on the way out."""
    infra = getattr(stack, "storm_infra", None)
    extra, close_infra = await infra(args) if infra else ([], None)
    ring = Ring(stack, args, [*extra, *role])
    try:
        await asyncio.gather(*(ring.start(i) for i in range(args.shards)))
        call, close_client = await stack.shard_client(parse_more(args, extra))
        try:
            yield ring, call
        finally:
            await close_client()
    finally:
        await ring.stop_all()
        if close_infra is not None:
            await close_infra()


async def storm_run(stack: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    async with running(stack, args, []) as (ring, call):
        storm = Storm(args, call)
        for i in range(args.shards):
            await storm.probe(i)
        storm.t0 = time.monotonic()
        clients = [asyncio.ensure_future(storm.client(n)) for n in range(args.clients)]
        rng = random.Random(args.seed)
        cycles: list[dict[str, Any]] = []
        await asyncio.sleep(args.window)
        for c in range(args.cycles):
            victims = sorted(rng.sample(range(args.shards), args.kill))
            kill_t = storm.now()
            await asyncio.gather(*(ring.kill(v) for v in victims))
            await asyncio.sleep(args.restart_delay)
            restart_t = storm.now()

            async def back(v: int, storm: Storm = storm) -> None:
                await ring.start(v)
                await storm.probe(v)

            await asyncio.gather(*(back(v) for v in victims))
            recovery_t = storm.now()
            await asyncio.sleep(args.window)
            cycles.append(
                {
                    "index": c + 1,
                    "victims": victims,
                    "recovery_s": recovery_t - kill_t,
                    "restart_to_serving_s": recovery_t - restart_t,
                    "pre": storm.window(kill_t - args.window, kill_t),
                    "fault": storm.window(kill_t, recovery_t),
                    "post": storm.window(recovery_t, recovery_t + args.window),
                }
            )
        storm.stop.set()
        await asyncio.gather(*clients)
        return {"cycles": cycles, "queries": len(storm.samples)}


def parse_more(args: argparse.Namespace, extra: list[str]) -> argparse.Namespace:
    """``args`` with the options ``storm_infra`` added (the same the shards get)."""
    more = argparse.Namespace(**vars(args))
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        setattr(more, flag.lstrip("-").replace("-", "_"), value)
    return more
