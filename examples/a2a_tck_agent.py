"""An agent for the A2A conformance kit (a2aproject/a2a-tck): the kit's reference
agent written as an actor, behind the gateway, on port 9999.

It keeps each task open (``Working``, with its answer so far) until the client
cancels it, as the kit's tests expect: they send follow-ups to a task, list
tasks in the order they were last changed, and cancel them. The gateway serves
it as the default agent: the kit reads the card at the site root and its REST
client posts to the root.

    python examples/a2a_tck_agent.py &
    # in a checkout of github.com/a2aproject/a2a-tck, in its own venv:
    ./run_tck.py --sut-url http://localhost:9999/a2a/tck-core --category mandatory
    ./run_tck.py --sut-url http://localhost:9999/a2a/tck-core --category mandatory \\
        --transports rest

With ``--secured`` the gateway wants OAuth tokens (the cards say so, and the
kit's authentication tests run); it prints the client's id and secret, and the
kit is given a token in ``A2A_AUTH_TOKEN`` (``A2A_AUTH_TYPE=bearer``).

docs/protocols.md has the figures and the few failures that are the kit's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import tempfile
from pathlib import Path

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService, GatewaySettings, Working


class TckCore(Actor):
    """Answers like the kit's reference agent, and keeps each task open (working)
    until the client cancels it: follow-ups to the task run again on it."""

    type_name = "tck-core"
    concurrency = 64  # the kit sends several at once

    @handler
    async def answer(self, text: str) -> Working:
        return Working(message=reply(text))


def reply(text: str) -> str:
    q = text.lower()
    if "hello" in q or "hi" in q:
        return "Hello World! Nice to meet you!"
    return f"Hello World! You said: '{text}'. Thanks for your message!"


async def main(port: int = 9999, secured: bool = False) -> None:
    secret = secrets.token_urlsafe(16)
    with EmbeddedServer() as server, tempfile.TemporaryDirectory() as state:
        system = await ActorSystem.connect(server.url, namespace="tck")
        await system.spawn(TckCore, "1")
        settings = GatewaySettings(
            http_port=port,
            # the cards name "localhost": the kit reads 127.0.0.1 in a card as a leak
            # of an internal address (and allows localhost)
            public_url=f"http://localhost:{port}",
            db_path=Path(state) / "gateway.sqlite3",
            default_agent="tck-core",
            # a blocking send answers a task still open after 0.3 s as it is: the
            # kit's tests expect a working task back from SendMessage
            ask_timeout=0.3,
            push_urls="any",  # the kit's webhook listens on loopback
            auth="required" if secured else "open",
            rate_limits=(100_000, 100_000, 100_000),  # the kit sends hundreds a minute
            token_secrets={"tck": secret},
            issuer_key=Path(state) / "issuer.key",
        )
        async with GatewayService(nats_url=server.url, namespace="tck", settings=settings) as gw:
            print(f"A2A TCK agent: {gw.http_url}/a2a/tck-core (Ctrl-C stops it)", flush=True)
            if secured:
                print(f"OAuth client: tck, secret {secret}, token at {gw.http_url}/oauth/token")
            try:
                await asyncio.Event().wait()
            finally:
                await system.close()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        args = [a for a in sys.argv[1:] if a != "--secured"]
        asyncio.run(main(int(args[0]) if args else 9999, "--secured" in sys.argv))
