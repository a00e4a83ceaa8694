"""An agent for the A2A conformance kit (a2aproject/a2a-tck): the kit's reference
agent written as an actor, behind the gateway, on port 9999.

It keeps each task open (``Working``) and finishes it about 1.2 s later with
:class:`~actorbus.services.gateway.GatewayTask`, as the kit's own agent does, so
the kit sees tasks working, lists them, continues and cancels them. The gateway
serves it as the default agent: the kit reads the card at the site root and its
REST client posts to the root.

    python examples/a2a_tck_agent.py &
    # in a checkout of github.com/a2aproject/a2a-tck, in its own venv:
    ./run_tck.py --sut-url http://127.0.0.1:9999/a2a/tck-core --category mandatory
    ./run_tck.py --sut-url http://127.0.0.1:9999/a2a/tck-core --category mandatory \\
        --transports rest

docs/protocols.md has the figures and the few failures that are the kit's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService, GatewaySettings, GatewayTask, Working


class TckCore(Actor):
    """Answers like the kit's reference agent, after about 1.2 s of 'work'."""

    type_name = "tck-core"
    concurrency = 64  # the kit sends several at once

    def __init__(self) -> None:
        self.work: set[asyncio.Task[None]] = set()

    @handler
    async def answer(self, text: str) -> Working:
        job = GatewayTask.of(self)
        later = asyncio.ensure_future(self.finish(job, text))
        self.work.add(later)
        later.add_done_callback(self.work.discard)
        return Working()

    async def finish(self, job: GatewayTask, text: str) -> None:
        await asyncio.sleep(1.2)
        q = text.lower()
        if "hello" in q or "hi" in q:
            answer = "Hello World! Nice to meet you!"
        else:
            answer = f"Hello World! You said: '{text}'. Thanks for your message!"
        with contextlib.suppress(Exception):  # canceled by the kit meanwhile: fine
            await job.complete(answer)


async def main(port: int = 9999) -> None:
    with EmbeddedServer() as server, tempfile.TemporaryDirectory() as state:
        system = await ActorSystem.connect(server.url, namespace="tck")
        await system.spawn(TckCore, "1")
        settings = GatewaySettings(
            http_port=port,
            db_path=Path(state) / "gateway.sqlite3",
            default_agent="tck-core",
            # a blocking send answers a task still open after 0.3 s as it is: the
            # kit's tests expect a working task back from SendMessage
            ask_timeout=0.3,
            push_urls="any",  # the kit's webhook listens on loopback
        )
        async with GatewayService(nats_url=server.url, namespace="tck", settings=settings) as gw:
            print(f"A2A TCK agent: {gw.http_url}/a2a/tck-core (Ctrl-C stops it)", flush=True)
            try:
                await asyncio.Event().wait()
            finally:
                await system.close()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9999))
