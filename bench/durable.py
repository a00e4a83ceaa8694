"""Durable delivery throughput: actorbus vs raw nats-py JetStream, in one run.

Both sides do the same work on one embedded nats-server (file storage,
``sync_interval: always``): publish N messages one after another, each waiting
for its publish-ack; then read them back in order through a durable pull
consumer with one message in flight, acking each one. actorbus adds the
envelope, the actor dispatch and a pydantic model per message.

    python bench/durable.py [--n 5000] [--rounds 3] [--out bench/results]

Prints messages/s for both and the ratios; writes durable.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.jetstream import DurableSettings
from actorbus.bus.server import EmbeddedServer


class Entry(BaseModel):
    n: int
    text: str


class Sink(Actor):
    durable = True

    def __init__(self, want: int, done: asyncio.Event) -> None:
        self.want = want
        self.done = done
        self.count = 0

    @handler
    async def take(self, e: Entry) -> None:
        self.count += 1
        if self.count >= self.want:
            self.done.set()


async def raw_round(url: str, n: int, tag: str) -> tuple[float, float]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        stream, subject = f"raw-{tag}", f"raw.{tag}"
        await js.add_stream(name=stream, subjects=[subject], storage=StorageType.FILE)
        payload = b"x" * 200
        t = time.perf_counter()
        for i in range(n):
            await js.publish(subject, payload, headers={"Nats-Msg-Id": f"{tag}-{i}"})
        send = n / (time.perf_counter() - t)
        psub = await js.pull_subscribe(
            subject,
            durable=f"c-{tag}",
            stream=stream,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=1),
        )
        t = time.perf_counter()
        got = 0
        while got < n:
            for msg in await psub.fetch(1, timeout=5):
                await msg.ack()
                got += 1
        handle = n / (time.perf_counter() - t)
        await js.delete_stream(stream)
        return send, handle
    finally:
        await nc.close()


async def actorbus_round(url: str, n: int, tag: str) -> tuple[float, float]:
    system = await ActorSystem.connect(url, namespace=f"bench-{tag}", durable=DurableSettings())
    try:
        entry = Entry(n=0, text="x" * 190)
        t = time.perf_counter()
        for i in range(n):
            entry.n = i
            await system.tell("sink/1", entry, durable=True)
        send = n / (time.perf_counter() - t)
        done = asyncio.Event()
        t = time.perf_counter()
        await system.spawn(Sink, "1", want=n, done=done)
        await asyncio.wait_for(done.wait(), 600)
        handle = n / (time.perf_counter() - t)
        return send, handle
    finally:
        await system.close()


async def main_async(n: int, rounds: int) -> dict[str, Any]:
    results: dict[str, list[tuple[float, float]]] = {"raw": [], "actorbus": []}
    async with EmbeddedServer() as server:
        for r in range(rounds):
            order = ["raw", "actorbus"] if r % 2 == 0 else ["actorbus", "raw"]
            for variant in order:
                run = raw_round if variant == "raw" else actorbus_round
                send, handle = await run(server.url, n, f"r{r}")
                results[variant].append((send, handle))
                print(
                    f"round {r + 1}/{rounds} {variant:<9} send {send:7.0f}/s  "
                    f"handle {handle:7.0f}/s",
                    flush=True,
                )
    med = {
        v: {
            "send_per_s": statistics.median(x[0] for x in rs),
            "handle_per_s": statistics.median(x[1] for x in rs),
        }
        for v, rs in results.items()
    }
    summary = {
        "n": n,
        "rounds": rounds,
        "medians": med,
        "ratios": {
            "send": med["actorbus"]["send_per_s"] / med["raw"]["send_per_s"],
            "handle": med["actorbus"]["handle_per_s"] / med["raw"]["handle_per_s"],
        },
        "per_round": results,
    }
    print(
        f"medians: raw send {med['raw']['send_per_s']:.0f}/s handle "
        f"{med['raw']['handle_per_s']:.0f}/s; actorbus send {med['actorbus']['send_per_s']:.0f}/s "
        f"handle {med['actorbus']['handle_per_s']:.0f}/s; ratios send "
        f"{summary['ratios']['send']:.2f}, handle {summary['ratios']['handle']:.2f}"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    summary = asyncio.run(main_async(args.n, args.rounds))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "durable.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
