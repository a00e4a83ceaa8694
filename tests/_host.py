"""A minimal actor host for cross-process tests.

Usage: python tests/_host.py module:Class url namespace key replicas

Spawns ``replicas`` instances of the class at ``type/key``, prints "ready" and
serves until SIGTERM (or SIGINT), then closes the system gracefully.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys

from actorbus import ActorSystem


async def main(target: str, url: str, namespace: str, key: str, replicas: int) -> None:
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    system = await ActorSystem.connect(url, namespace=namespace)
    try:
        await system.spawn(cls, key, replicas=replicas)
        print("ready", flush=True)
        await stop.wait()
    finally:
        await system.close(timeout=3.0)


if __name__ == "__main__":
    target, url, namespace, key, replicas = sys.argv[1:6]
    asyncio.run(main(target, url, namespace, key, int(replicas)))
