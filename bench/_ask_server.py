"""Server side of ``bench/ask.py``; run by it as a separate OS process.

It hosts, on the NATS server given as the first argument:

- a raw nats-py responder on :data:`RAW_SUBJECT` (a plain ``nats.connect``
  connection, ``await msg.respond(msg.data)``), which serves both the "raw" and
  the "raw+headers" variants;
- an ``Echo`` actor at :data:`ECHO_ADDRESS` on its own actorbus connection,
  whose handler answers a :class:`Question` with a same-size :class:`Answer`;
- a CPU probe on :data:`CPU_SUBJECT` that replies with this process's CPU time
  in seconds, so the client can charge server CPU to each measured phase.

It prints ``ready`` once every subscription is known to the server, then runs
until SIGTERM or until its stdin is closed (so it never outlives the client).
SIGINT is ignored: on Ctrl-C the client stops it.

The message models and names live here so that both processes share them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from typing import Any

import nats
from nats.aio.msg import Msg
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler

RAW_SUBJECT = "bench.raw.echo"
CPU_SUBJECT = "bench.cpu"
ECHO_ADDRESS = "echo/1"
READY = "ready"


class Question(BaseModel):
    text: str


class Answer(BaseModel):
    text: str


class Echo(Actor):
    @handler
    async def answer(self, q: Question) -> Answer:
        return Answer(text=q.text)


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Block until the client closes our stdin (or dies), then ask the loop to stop."""
    with contextlib.suppress(Exception):
        sys.stdin.buffer.read()
    with contextlib.suppress(RuntimeError):  # the loop may already be closed
        loop.call_soon_threadsafe(stop.set)


async def serve(url: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    threading.Thread(target=_watch_stdin, args=(loop, stop), daemon=True).start()

    nc = await nats.connect(url, name="bench-raw-responder")

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    async def cpu(msg: Msg) -> None:
        await msg.respond(repr(time.process_time()).encode())

    system: ActorSystem | None = None
    try:
        await nc.subscribe(RAW_SUBJECT, cb=echo)
        await nc.subscribe(CPU_SUBJECT, cb=cpu)
        system = await ActorSystem.connect(url, name="bench-ask-server")
        await system.spawn(Echo, key=ECHO_ADDRESS.split("/", 1)[1])
        await nc.flush()
        await system.nc.flush()
        print(READY, flush=True)
        await stop.wait()
    finally:
        if system is not None:
            await system.close(timeout=2.0)
        await nc.close()


def run(coro: Coroutine[Any, Any, None], use_uvloop: bool) -> None:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            print("uvloop is not installed; using asyncio's default loop", file=sys.stderr)
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(coro)
            return
    asyncio.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="NATS server URL")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop if installed")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run(serve(args.url), args.uvloop)


if __name__ == "__main__":
    main()
