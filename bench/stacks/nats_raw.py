"""Raw nats-py request/reply: the floor every NATS stack stands on (bytes in, bytes
out, no models, no envelope). See ``_driver.py``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import nats
import nats.errors
from _driver import Close, EchoCall, PullCall, handled, main
from _storm import Handle, ShardCall, Unreachable
from nats.aio.msg import Msg

ECHO = "pb.raw.echo"
PULL = "pb.raw.pull"


async def serve_echo(args: argparse.Namespace) -> tuple[str, Close]:
    nc = await nats.connect(args.nats)

    async def echo(msg: Msg) -> None:
        handled(msg.data.decode(errors="replace"))
        await msg.respond(msg.data)

    await nc.subscribe(ECHO, cb=echo)
    await nc.flush()
    return ECHO, nc.close


async def echo_client(args: argparse.Namespace) -> tuple[EchoCall, Close]:
    nc = await nats.connect(args.nats)

    async def call(text: str) -> str:
        reply = await nc.request(args.address, text.encode(), timeout=10)
        return reply.data.decode()

    return call, nc.close


async def serve_pull(args: argparse.Namespace, pull: PullCall) -> tuple[str, Close]:
    nc = await nats.connect(args.nats)
    running: set[asyncio.Task[None]] = set()

    async def answer(msg: Msg) -> None:
        body: dict[str, Any] = json.loads(msg.data)
        question = await pull(body["worker"], body["question"], body["answer"])
        await msg.respond(json.dumps(question).encode())

    async def on_pull(msg: Msg) -> None:  # each pull its own task: they wait at the barrier
        task = asyncio.ensure_future(answer(msg))
        running.add(task)
        task.add_done_callback(running.discard)

    await nc.subscribe(PULL, cb=on_pull, pending_msgs_limit=-1)
    await nc.flush()
    return PULL, nc.close


async def pull_client(args: argparse.Namespace) -> tuple[PullCall, Close]:
    nc = await nats.connect(args.nats)

    async def call(worker: int, question: int | None, answer: str | None) -> int | None:
        body = {"worker": worker, "question": question, "answer": answer}
        reply = await nc.request(args.address, json.dumps(body).encode(), timeout=60)
        result: int | None = json.loads(reply.data)
        return result

    return call, nc.close


# -- Fail-Storm (_storm.py) ---------------------------------------------------------
def _shard(index: int) -> str:
    return f"pb.raw.shard.{index}"


async def serve_shard(args: argparse.Namespace, handle: Handle) -> Close:
    nc = await nats.connect(args.nats)
    running: set[asyncio.Task[None]] = set()

    async def answer(msg: Msg) -> None:
        await msg.respond((await handle(msg.data.decode())).encode())

    async def on_query(msg: Msg) -> None:  # each its own task: forwarding awaits the ring
        task = asyncio.ensure_future(answer(msg))
        running.add(task)
        task.add_done_callback(running.discard)

    await nc.subscribe(_shard(args.index), cb=on_query, pending_msgs_limit=-1)
    await nc.flush()
    return nc.close


async def shard_client(args: argparse.Namespace) -> tuple[ShardCall, Close]:
    nc = await nats.connect(args.nats)

    async def call(index: int, text: str, timeout: float) -> str:
        try:
            reply = await nc.request(_shard(index), text.encode(), timeout=timeout)
        except nats.errors.NoRespondersError:
            raise Unreachable(index) from None
        return reply.data.decode()

    return call, nc.close


if __name__ == "__main__":
    main(sys.modules[__name__])
