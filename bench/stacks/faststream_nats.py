"""FastStream on NATS: a ``NatsBroker`` subscriber taking and returning pydantic
models, called with ``broker.request`` (FastStream's request/reply). The
Streaming Queue's coordinator subscribes with ``max_workers`` so its pulls run
concurrently, as every stack's do. No per-message logging (``logger=None``; it is
on by default), as a deployment runs it. See ``_driver.py``."""

from __future__ import annotations

import argparse
import sys

from _driver import Close, EchoCall, PullCall, handled, main
from _messages import Answer, Next, Pull, Question
from _storm import Handle, ShardCall, Unreachable
from faststream.nats import NatsBroker
from nats.errors import NoRespondersError

ECHO = "pb.faststream.echo"
PULL = "pb.faststream.pull"


async def serve_echo(args: argparse.Namespace) -> tuple[str, Close]:
    broker = NatsBroker(args.nats, logger=None)

    @broker.subscriber(ECHO)
    async def echo(q: Question) -> Answer:
        handled(q.text)
        return Answer(text=q.text)

    await broker.start()
    return ECHO, broker.stop


async def echo_client(args: argparse.Namespace) -> tuple[EchoCall, Close]:
    broker = NatsBroker(args.nats, logger=None)
    await broker.connect()

    async def call(text: str) -> str:
        reply = await broker.request(Question(text=text), subject=args.address, timeout=10)
        return Answer.model_validate(await reply.decode()).text

    return call, broker.stop


async def serve_pull(args: argparse.Namespace, pull: PullCall) -> tuple[str, Close]:
    broker = NatsBroker(args.nats, logger=None)

    @broker.subscriber(PULL, max_workers=max(args.workers * 2, 2))
    async def on_pull(p: Pull) -> Next:
        return Next(question=await pull(p.worker, p.question, p.answer))

    await broker.start()
    return PULL, broker.stop


async def pull_client(args: argparse.Namespace) -> tuple[PullCall, Close]:
    broker = NatsBroker(args.nats, logger=None)
    await broker.connect()

    async def call(worker: int, question: int | None, answer: str | None) -> int | None:
        pull = Pull(worker=worker, question=question, answer=answer)
        reply = await broker.request(pull, subject=args.address, timeout=60)
        return Next.model_validate(await reply.decode()).question

    return call, broker.stop


# -- Fail-Storm (_storm.py) ---------------------------------------------------------
def _shard(index: int) -> str:
    return f"pb.faststream.shard.{index}"


async def serve_shard(args: argparse.Namespace, handle: Handle) -> Close:
    broker = NatsBroker(args.nats, logger=None)

    # handlers run side by side: forwarding awaits the ring
    @broker.subscriber(_shard(args.index), max_workers=256)
    async def on_query(q: Question) -> Answer:
        return Answer(text=await handle(q.text))

    await broker.start()
    return broker.stop


async def shard_client(args: argparse.Namespace) -> tuple[ShardCall, Close]:
    broker = NatsBroker(args.nats, logger=None)
    await broker.connect()

    async def call(index: int, text: str, timeout: float) -> str:
        try:
            reply = await broker.request(
                Question(text=text), subject=_shard(index), timeout=timeout
            )
        except NoRespondersError:
            raise Unreachable(index) from None
        return Answer.model_validate(await reply.decode()).text

    return call, broker.stop


if __name__ == "__main__":
    main(sys.modules[__name__])
