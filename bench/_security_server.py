"""Server side of ``bench/security.py``; run by it as a separate OS process.

Two actorbus systems on the NATS server given as the first argument, each
hosting the ``Echo`` actor of ``bench/ask.py``: one in namespace ``plain``
without security, one in namespace ``secure`` with it (identities under the
home directory given as the second argument). A CPU probe on
:data:`CPU_SUBJECT` answers with this process's CPU seconds. Prints ``ready``,
then runs until SIGTERM or until its stdin is closed.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import nats
from _ask_server import Echo
from _child import READY, stop_when_stdin_closes
from nats.aio.msg import Msg

from actorbus import ActorSystem, SecuritySettings

CPU_SUBJECT = "bench.security.cpu"
PLAIN, SECURE = "plain", "secure"


async def serve(url: str, home: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)
    nc = await nats.connect(url, name="bench-security-probe")

    async def cpu(msg: Msg) -> None:
        await msg.respond(repr(time.process_time()).encode())

    plain = await ActorSystem.connect(url, namespace=PLAIN, name="bench-plain")
    secure = await ActorSystem.connect(
        url, namespace=SECURE, name="bench-secure", security=SecuritySettings(home=home)
    )
    try:
        await nc.subscribe(CPU_SUBJECT, cb=cpu)
        for system in (plain, secure):
            await system.spawn(Echo, "1")
            await system.nc.flush()
        await nc.flush()
        print(READY, flush=True)
        await stop.wait()
    finally:
        for system in (plain, secure):
            await system.close(timeout=2.0)
        await nc.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(serve(sys.argv[1], Path(sys.argv[2])))


if __name__ == "__main__":
    main()
