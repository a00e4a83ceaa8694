"""Worker side of ``bench/streaming_queue.py``; run by it as a separate OS process.

Hosts the ``sq-worker`` actor type lazily on the NATS server given as the first
argument: a worker is activated by its first message (``Start``), then pulls
questions from the coordinator until it says it is done (work stealing: a
worker asks for the next question only when it is free). Each question takes a
fixed, deterministic service time. With a protocol named in ``Start``, every
question and answer crosses the edge as that protocol's JSON: the codec's encode
and decode are paid at both ends, as a protocol adapter would.

A probe on :data:`CPU_SUBJECT` answers with this process's CPU time. Prints
``ready``, then runs until its stdin is closed or SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import Any

from _child import READY, stop_when_stdin_closes
from _edges import from_edge, to_edge
from nats.aio.msg import Msg
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler

WORKER = "sq-worker"
CPU_SUBJECT = "sq.bench.cpu"  # answers with this process's CPU seconds


class Start(BaseModel):
    coordinator: str
    protocol: str  # "native" or a codec's name
    service_ms: float


class Pull(BaseModel):
    worker: str
    question: int | None = None  # the question answered (None: the first pull)
    answer: Any = None  # the answer, native or the protocol's JSON


class SqWorker(Actor):
    type_name = WORKER

    @handler
    async def start(self, start: Start) -> None:
        p, wait = start.protocol, start.service_ms / 1000
        pull = Pull(worker=self.address)
        while True:
            job = await self.system.ask(start.coordinator, pull, timeout=60)
            if job is None:
                return
            n, question = job["n"], from_edge(p, job["q"])
            await asyncio.sleep(wait)  # the fixed service time
            answer = to_edge(p, f"answer to: {question}", self.address, start.coordinator, n)
            pull = Pull(worker=self.address, question=n, answer=answer)


async def serve(url: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)
    system = await ActorSystem.connect(url, namespace="sq", name="sq-workers", registry=False)

    async def cpu(msg: Msg) -> None:
        await msg.respond(repr(time.process_time()).encode())

    try:
        await system.register(SqWorker)
        await system.nc.subscribe(CPU_SUBJECT, cb=cpu)
        await system.nc.flush()
        print(READY, flush=True)
        await stop.wait()
    finally:
        await system.close(timeout=2.0)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(serve(sys.argv[1]))


if __name__ == "__main__":
    main()
