"""Actor side of ``bench/gateway.py``; run by it as a separate OS process.

Hosts one ``Echo`` actor (actor type :data:`AGENT`, so the gateway serves it as
the A2A agent ``/a2a/echo``) on the NATS server and namespace given, whose only
handler returns the text it was sent. Prints ``ready`` once the actor is
spawned, then runs until SIGTERM or until its stdin is closed (so it never
outlives the benchmark). SIGINT is ignored: on Ctrl-C the parent stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from _child import READY, stop_when_stdin_closes

from actorbus import Actor, ActorSystem, handler

AGENT = "echo"


class Echo(Actor):
    type_name = AGENT
    skills = ("echo",)

    @handler
    async def echo(self, text: str) -> str:
        return text


async def serve(url: str, namespace: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stop_when_stdin_closes(loop, stop)
    system = await ActorSystem.connect(url, namespace=namespace, name="bench-gateway-actor")
    try:
        await system.spawn(Echo, "1")
        await system.nc.flush()
        print(READY, flush=True)
        await stop.wait()
    finally:
        await system.close(timeout=2.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="NATS server URL")
    parser.add_argument("namespace", help="actorbus namespace (the gateway's)")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(serve(args.url, args.namespace))


if __name__ == "__main__":
    main()
