"""One shard agent of ``bench/fail_storm.py``; run by it as a separate OS process.

    python bench/_fail_storm_agent.py INDEX URL NAMESPACE [--shards 8] [--questions 800]
                                      [--seed N] [--no-skip]

It hosts a :class:`Shard` actor at ``shard/INDEX`` in namespace NAMESPACE. The
shard holds the answers of its part of a deterministic question set
(:func:`dataset`). A :class:`Query` it cannot answer goes on to the next shard in
the ring (``hops + 1``, at most ``shards`` hops in all, within the query's
deadline) and its reply is returned. As in the paper (ProtocolBench D.4), a
neighbour with no responders (a killed shard) is skipped, unless ``--no-skip``.

It prints ``ready`` once the actor is subscribed, then runs until SIGTERM (or
until its stdin is closed, so it never outlives the benchmark). SIGINT is
ignored: on Ctrl-C the benchmark stops it.

The same class is hosted by ``actorbus run _fail_storm_agent:Shard --workers 8
--key {worker}`` (the benchmark's default): made without arguments, a shard takes
its index from its key and the rest from ``FAIL_STORM_SETTINGS`` (JSON: shards,
questions, seed, skip).

The message models and the data set live here so that both processes share them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import time

from _child import stop_when_stdin_closes
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.codecs.errors import NoRespondersError

READY = "ready"
TYPE = "shard"
SHARDS = 8
QUESTIONS = 800
SEED = 20260601
SETTINGS_ENV = "FAIL_STORM_SETTINGS"


class Query(BaseModel):
    question: str
    hops: int = 0
    deadline: float = 0.0  # time.time() after which the query is abandoned (0: none)


class Reply(BaseModel):
    answer: str | None = None  # None: not found
    hops: int = 0
    shard: int = -1  # the shard that answered
    skipped: int = 0  # dead shards skipped on the way


def dataset(seed: int = SEED, questions: int = QUESTIONS) -> dict[str, str]:
    """Question -> answer; question ``q{i}`` has answer ``a{i}-{token}``, held by
    shard ``i % shards``. The token comes from the seed, so every process agrees."""
    rng = random.Random(seed)
    return {f"q{i}": f"a{i}-{rng.getrandbits(32):08x}" for i in range(questions)}


def holder(question: str, shards: int = SHARDS) -> int:
    return int(question[1:]) % shards


def answers_of(index: int, shards: int, seed: int, questions: int) -> dict[str, str]:
    """The part of the data set that shard ``index`` holds."""
    return {q: a for q, a in dataset(seed, questions).items() if holder(q, shards) == index}


class Shard(Actor):
    type_name = TYPE
    concurrency = 256  # forwarding awaits the ring: one at a time would deadlock it

    def __init__(
        self,
        index: int = -1,
        shards: int = SHARDS,
        answers: dict[str, str] | None = None,
        skip: bool = True,
    ) -> None:
        super().__init__()
        self.index = index
        self.shards = shards
        self.answers = answers or {}
        self.skip = skip

    async def on_start(self) -> None:
        if self.index >= 0:
            return
        # hosted by `actorbus run --workers`: the key is the index
        settings = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
        self.index = int(self.key)
        self.shards = settings.get("shards", SHARDS)
        self.skip = settings.get("skip", True)
        self.answers = answers_of(
            self.index,
            self.shards,
            settings.get("seed", SEED),
            settings.get("questions", QUESTIONS),
        )

    @handler
    async def query(self, q: Query) -> Reply:
        answer = self.answers.get(q.question)
        if answer is not None:
            return Reply(answer=answer, hops=q.hops, shard=self.index)
        hops = q.hops + 1
        skipped = 0
        while hops < self.shards:
            remaining = q.deadline - time.time() if q.deadline else 5.0
            if remaining <= 0:
                break
            nxt = (self.index + hops - q.hops) % self.shards
            try:
                reply: Reply = await self.ask(
                    f"{TYPE}/{nxt}",
                    Query(question=q.question, hops=hops, deadline=q.deadline),
                    timeout=remaining,
                    returns=Reply,
                )
            except NoRespondersError:
                if not self.skip:
                    break
                skipped += 1
                hops += 1
                continue
            reply.skipped += skipped
            return reply
        return Reply(answer=None, hops=hops, shard=self.index, skipped=skipped)


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)
    mine = answers_of(args.index, args.shards, args.seed, args.questions)
    system = await ActorSystem.connect(
        args.url, name=f"fail-storm-shard-{args.index}", namespace=args.namespace
    )
    try:
        await system.spawn(
            Shard,
            key=str(args.index),
            index=args.index,
            shards=args.shards,
            answers=mine,
            skip=not args.no_skip,
        )
        await system.nc.flush()
        print(READY, flush=True)
        await stop.wait()
    finally:
        await system.close(timeout=2.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=int, help="shard index (0..shards-1)")
    parser.add_argument("url", help="NATS server URL")
    parser.add_argument("namespace", help="actorbus namespace")
    parser.add_argument("--shards", type=int, default=SHARDS)
    parser.add_argument("--questions", type=int, default=QUESTIONS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-skip", action="store_true", help="do not skip dead neighbours")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
