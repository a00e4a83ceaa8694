"""A minimal actor host for cross-process tests.

Usage: python tests/_host.py module:Class url namespace key replicas [ack_wait]

With ``ack_wait`` (seconds), durable queues use it and short retries, so a test
that kills this process sees the in-flight message come back quickly
(``ACTORBUS_TEST_READER_LEASE``, seconds, shortens a lazily hosted type's reader
lease too). ``ACTORBUS_TEST_PLACEMENT_TTL`` (seconds) shortens the life of its
keyed actors' placement records.

Spawns ``replicas`` instances of the class at ``type/key`` (key ``*``: hosts the
type lazily with ``register()``), prints "ready" and serves until SIGTERM (or
SIGINT), then closes the system gracefully.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys

from actorbus import ActorSystem
from actorbus.bus.jetstream import DurableSettings


async def main(
    target: str, url: str, namespace: str, key: str, replicas: int, ack_wait: float | None
) -> None:
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    durable = None
    if ack_wait is not None:
        # A lazily hosted type's reader lease: how soon a killed host's reader is
        # replaced (ACTORBUS_TEST_READER_LEASE: shorter for tests that kill hosts).
        lease = float(os.environ.get("ACTORBUS_TEST_READER_LEASE", "3.0"))
        durable = DurableSettings(
            ack_wait=ack_wait, backoff=(0.1, 0.2, 0.4), reader_lease_ttl=lease
        )
    placement_ttl = float(os.environ.get("ACTORBUS_TEST_PLACEMENT_TTL", "3600"))
    system = await ActorSystem.connect(
        url,
        namespace=namespace,
        durable=durable,
        activation_ttl=1.5,
        placement_ttl=placement_ttl,
    )
    try:
        if key == "*":
            await system.register(cls)
        else:
            await system.spawn(cls, key, replicas=replicas)
        print("ready", flush=True)
        await stop.wait()
    finally:
        await system.close(timeout=3.0)


if __name__ == "__main__":
    target, url, namespace, key, replicas = sys.argv[1:6]
    ack_wait = float(sys.argv[6]) if len(sys.argv) > 6 else None
    asyncio.run(main(target, url, namespace, key, int(replicas), ack_wait))
