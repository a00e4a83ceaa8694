"""Server side of ``bench/ask.py``; run by it as a separate OS process.

It hosts, on the NATS server given as the first argument:

- a raw nats-py responder on :data:`RAW_SUBJECT` (a plain ``nats.connect``
  connection, ``await msg.respond(msg.data)``) for the "raw" variant;
- on the same connection, a responder on :data:`RAW_HDR_SUBJECT` for the
  "raw+headers" variant that replies with ``nc.publish(msg.reply, msg.data)``:
  ``msg.respond`` would echo the request's headers back, while an actorbus reply
  carries none, so this keeps the header cost to the request, as in actorbus;
- an ``Echo`` actor at :data:`ECHO_ADDRESS` on its own actorbus connection,
  whose handler answers a :class:`Question` with a same-size :class:`Answer`
  (and echoes raw ``bytes`` with a second handler);
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
import signal
import sys
import time
from collections.abc import Coroutine
from typing import Any

import nats
from _child import stop_when_stdin_closes
from nats.aio.msg import Msg
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler

RAW_SUBJECT = "bench.raw.echo"
RAW_HDR_SUBJECT = "bench.rawhdr.echo"
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

    @handler
    async def echo_bytes(self, data: bytes) -> bytes:
        """The same actor with raw bytes: the framework's cost without pydantic models."""
        return data


async def serve(url: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)

    nc = await nats.connect(url, name="bench-raw-responder")

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    async def echo_no_headers(msg: Msg) -> None:
        await nc.publish(msg.reply, msg.data)

    async def cpu(msg: Msg) -> None:
        await msg.respond(repr(time.process_time()).encode())

    system: ActorSystem | None = None
    try:
        await nc.subscribe(RAW_SUBJECT, cb=echo)
        await nc.subscribe(RAW_HDR_SUBJECT, cb=echo_no_headers)
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
