"""actorbus on an open bus: an actor answering pydantic models, called with
``system.ask`` (the coordinator of the Streaming Queue is an actor too). With
``--codec NAME`` every question and answer also crosses the edge as that
protocol's JSON (the codec's encode at the sender, decode at the receiver), as a
protocol adapter at each agent would. See ``_driver.py``."""

from __future__ import annotations

import argparse
import itertools
import sys

from _driver import Close, EchoCall, PullCall, handled, main  # first: it puts bench/ on the path
from _edges import from_edge, to_edge
from _messages import Answer, Next, Pull, Question
from _storm import Handle, ShardCall, Unreachable

from actorbus import Actor, ActorSystem, handler
from actorbus.codecs.errors import NoRespondersError

NAMESPACE = "pb"  # one echo per codec variant, each at its own key: pb-echo/<codec>


_ids = itertools.count()


def crossing(codec: str, text: str, src: str, dst: str) -> str:
    """``text`` as it crosses an edge (``_edges.to_edge``), numbered in turn."""
    return str(to_edge(codec, text, src, dst, next(_ids)))


class Echo(Actor):
    type_name = "pb-echo"

    def __init__(self, codec: str) -> None:
        super().__init__()
        self.codec = codec

    @handler
    async def echo(self, q: Question) -> Answer:
        text = from_edge(self.codec, q.text)
        handled(text)
        return Answer(text=crossing(self.codec, text, self.address, "client/bench"))


class Coordinator(Actor):
    type_name = "pb-coordinator"
    concurrency = 1024  # the first pulls wait at the barrier together

    def __init__(self, pull: PullCall, codec: str) -> None:
        super().__init__()
        self.pull = pull
        self.codec = codec

    @handler
    async def on_pull(self, p: Pull) -> Next:
        answer = None if p.answer is None else from_edge(self.codec, p.answer)
        question = await self.pull(p.worker, p.question, answer)
        if question is None:
            return Next()
        text = crossing(self.codec, f"question {question}", self.address, "pb-worker/w")
        return Next(question=question, text=text)


async def _open(args: argparse.Namespace) -> ActorSystem:
    return await ActorSystem.connect(args.nats, namespace=NAMESPACE, registry=False)


async def serve_echo(args: argparse.Namespace) -> tuple[str, Close]:
    system = await _open(args)
    await system.spawn(Echo, args.codec, codec=args.codec)
    return f"pb-echo/{args.codec}", system.close


async def echo_client(args: argparse.Namespace) -> tuple[EchoCall, Close]:
    system = await _open(args)

    async def call(text: str) -> str:
        question = Question(text=crossing(args.codec, text, "client/bench", args.address))
        answer = await system.ask(args.address, question, returns=Answer, timeout=10)
        return str(from_edge(args.codec, answer.text))

    return call, system.close


async def serve_pull(args: argparse.Namespace, pull: PullCall) -> tuple[str, Close]:
    system = await _open(args)
    await system.spawn(Coordinator, args.codec, pull=pull, codec=args.codec)
    return f"pb-coordinator/{args.codec}", system.close


async def pull_client(args: argparse.Namespace) -> tuple[PullCall, Close]:
    system = await _open(args)

    async def call(worker: int, question: int | None, answer: str | None) -> int | None:
        wire = None if answer is None else crossing(args.codec, answer, "pb-worker/w", args.address)
        pull = Pull(worker=worker, question=question, answer=wire)
        job = await system.ask(args.address, pull, returns=Next, timeout=60)
        if job.text is not None:
            from_edge(args.codec, job.text)  # what the worker would read
        return job.question

    return call, system.close


# -- Fail-Storm (_storm.py) ---------------------------------------------------------
class Shard(Actor):
    type_name = "pb-shard"
    concurrency = 256  # forwarding awaits the ring: one at a time would deadlock it

    def __init__(self, handle: Handle) -> None:
        super().__init__()
        self.handle = handle

    @handler
    async def query(self, q: Question) -> Answer:
        return Answer(text=await self.handle(q.text))


async def serve_shard(args: argparse.Namespace, handle: Handle) -> Close:
    system = await _open(args)
    await system.spawn(Shard, str(args.index), handle=handle)
    await system.nc.flush()
    return system.close


async def shard_client(args: argparse.Namespace) -> tuple[ShardCall, Close]:
    system = await _open(args)

    async def call(index: int, text: str, timeout: float) -> str:
        try:
            answer = await system.ask(
                f"pb-shard/{index}", Question(text=text), returns=Answer, timeout=timeout
            )
        except NoRespondersError:
            raise Unreachable(index) from None
        return answer.text

    return call, system.close


if __name__ == "__main__":
    main(sys.modules[__name__])
