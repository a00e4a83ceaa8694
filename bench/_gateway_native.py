"""Native side of ``bench/gateway.py``: an a2a-sdk server with an echo agent, run by it
as a separate OS process.

A Starlette app with the a2a-sdk's JSON-RPC routes (A2A 1.0, and 0.3 through the
SDK's compat layer) and card routes, a ``DefaultRequestHandler`` over an
``InMemoryTaskStore``, served by uvicorn on a loopback socket. The agent
(:class:`EchoExecutor`) answers ``SendMessage`` the way the gateway does by
default, with the same task events (submitted, working, one artifact,
completed): a completed Task whose artifact ``reply`` holds the text sent and
whose history is [user message, agent message with that text].

Prints ``url <base URL> loop <event loop> http <uvicorn http>`` and then
``ready``; runs until SIGTERM (uvicorn's own handler) or until its stdin is
closed. SIGINT is ignored: the parent stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
from typing import Any

import uvicorn
from _child import READY, stop_when_stdin_closes
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers.proto_helpers import (
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import Role
from starlette.applications import Starlette


class EchoExecutor(AgentExecutor):
    """Echoes the user's text: a completed task, shaped like the gateway's answer."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        assert context.message is not None
        if context.current_task is None:  # a new task: the SDK wants the Task first
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        task_id, context_id = context.task_id, context.context_id
        assert task_id is not None
        assert context_id is not None
        updater = TaskUpdater(event_queue, task_id, context_id)
        # The agent message rides on the working status; the next status change moves
        # it into the history, as the gateway's history holds [user, agent].
        reply = new_text_message(text, context_id=context_id, task_id=task_id, role=Role.ROLE_AGENT)
        await updater.start_work(reply)
        await updater.add_artifact([new_text_part(text)], name="reply")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(base: str) -> Any:
    """A union card (1.0 interfaces and 0.3 fields), like the gateway's."""
    return parse_agent_card(
        {
            "name": "echo",
            "description": "an a2a-sdk echo agent",
            "version": "1.0.0",
            "supportedInterfaces": [
                {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            ],
            "url": base,
            "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC",
            "capabilities": {"streaming": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "echo", "description": "echo", "tags": ["echo"]}],
        }
    )


async def serve(http_impl: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # loopback only
    sock.listen(256)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    agent_card = card(base)
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    app = Starlette(
        routes=[
            *create_agent_card_routes(agent_card),
            *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        ]
    )
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,  # aiohttp's (the gateway's) default; uvicorn's is 5 s
        lifespan="off",
        http=http_impl,
    )
    server = uvicorn.Server(config)
    stop = asyncio.Event()
    stop_when_stdin_closes(asyncio.get_running_loop(), stop)

    async def on_stop() -> None:
        await stop.wait()
        server.should_exit = True

    watcher = asyncio.create_task(on_stop())
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.01)
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    http_name = getattr(config, "http_protocol_class", type(None)).__name__
    print(f"url {base} loop {loop_name} http {http_name}", flush=True)
    print(READY, flush=True)
    try:
        await serving
    finally:
        watcher.cancel()
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--loop", default="auto", choices=["auto", "asyncio", "uvloop"], help="event loop"
    )
    parser.add_argument(
        "--http", default="auto", help="uvicorn --http (auto: httptools if installed)"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_uvloop = args.loop == "uvloop"
    if args.loop == "auto":  # what uvicorn.run does: uvloop when it is installed
        try:
            import uvloop
        except ImportError:
            pass
        else:
            use_uvloop = True
    if use_uvloop:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(args.http))
        return
    asyncio.run(serve(args.http))


if __name__ == "__main__":
    main()
