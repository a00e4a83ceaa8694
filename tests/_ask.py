"""Ask one actor from a process of its own and print the reply's trace as JSON.

Usage: python tests/_ask.py url namespace address n

Used to start a traced flow from a third process (tracing follows the
environment: ACTORBUS_TRACE_DIR, OTEL_*).
"""

from __future__ import annotations

import asyncio
import json
import sys

from _actors import WhoAsk

from actorbus import ActorSystem
from actorbus.telemetry import STATE


async def main(url: str, namespace: str, address: str, n: int) -> None:
    async with await ActorSystem.connect(url, namespace=namespace) as system:
        reply = await system.ask(address, WhoAsk(n=n), timeout=10)
    print(json.dumps({"tracing": STATE.tracing, "reply": reply}, default=str), flush=True)


if __name__ == "__main__":
    url, namespace, address, n = sys.argv[1:5]
    asyncio.run(main(url, namespace, address, int(n)))
