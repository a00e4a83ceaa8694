"""A mesh of A2A servers over HTTP, on the official a2a-sdk: the echo is an
``AgentExecutor`` behind the SDK's JSON-RPC routes (Starlette on uvicorn, the
SDK's ``DefaultRequestHandler`` and in-memory task store), answering each
``SendMessage`` with a message; callers use the SDK's client (``create_client``,
no streaming) over one pooled httpx client. The Streaming Queue's coordinator is
such a server too, and each pull is a ``SendMessage`` whose text is the pull.
It runs on uvloop with httptools, as ``uvicorn.run`` does where ``uvicorn[standard]``
is installed (the way A2A servers are deployed; on asyncio's own loop a2a-sdk's
answer takes about 45 ms longer). See ``_driver.py``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import uvicorn
from _driver import Close, EchoCall, PullCall, handled, main
from _storm import Handle, ShardCall, Unreachable
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers.proto_helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import Role, SendMessageRequest
from starlette.applications import Starlette

Answer = Callable[[str], Awaitable[str]]
LOOP = "uvloop"


class Executor(AgentExecutor):
    """Answers each message's text with ``answer(text)``, as a message (no task)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        reply = await self.answer(context.get_user_input())
        await event_queue.enqueue_event(new_text_message(reply, role=Role.ROLE_AGENT))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("nothing to cancel")


def _card(base: str, name: str) -> Any:
    return parse_agent_card(
        {
            "name": name,
            "description": f"protocolbench {name}",
            "version": "1.0.0",
            "supportedInterfaces": [
                {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": False},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": name, "name": name, "description": name, "tags": [name]}],
        }
    )


async def _serve(
    name: str, answer: Answer, advertise: str = "", port: int = 0
) -> tuple[str, Close]:
    """Serve ``answer`` as an A2A agent on ``port`` (0: any); its card names
    ``advertise`` as its URL when given (a relay in front of it), else its own."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted shard's port
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = _card(advertise or base, name)
    handler = DefaultRequestHandler(
        agent_executor=Executor(answer), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=75
    )
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started and not serving.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.01)

    async def close() -> None:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, 10)
        sock.close()

    return base, close


async def _client(base: str, connections: int) -> tuple[Callable[[str], Awaitable[str]], Close]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    http = httpx.AsyncClient(limits=limits, timeout=60.0)
    config = ClientConfig(streaming=False, httpx_client=http)
    client = await create_client(base, client_config=config)

    async def send(text: str) -> str:
        request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
        replies = [event async for event in client.send_message(request)]
        return "".join(part.text for part in replies[-1].message.parts)

    async def close() -> None:
        with contextlib.suppress(Exception):
            await client.close()
        await http.aclose()

    return send, close


async def serve_echo(args: argparse.Namespace) -> tuple[str, Close]:
    async def echo(text: str) -> str:
        handled(text)
        return text

    return await _serve("echo", echo, args.advertise)


async def echo_client(args: argparse.Namespace) -> tuple[EchoCall, Close]:
    return await _client(args.address, max(args.inflight, 1))


async def serve_pull(args: argparse.Namespace, pull: PullCall) -> tuple[str, Close]:
    async def on_pull(text: str) -> str:
        body = json.loads(text)
        return json.dumps(await pull(body["worker"], body["question"], body["answer"]))

    return await _serve("coordinator", on_pull)


async def pull_client(args: argparse.Namespace) -> tuple[PullCall, Close]:
    send, close = await _client(args.address, max(args.workers, 1))

    async def call(worker: int, question: int | None, answer: str | None) -> int | None:
        body = {"worker": worker, "question": question, "answer": answer}
        result: int | None = json.loads(await send(json.dumps(body)))
        return result

    return call, close


# -- Fail-Storm (_storm.py) ---------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def storm_infra(args: argparse.Namespace) -> tuple[list[str], None]:
    """A port for each shard's server, known to every shard (a mesh has its URLs)."""
    return ["--ports", ",".join(str(_free_port()) for _ in range(args.shards))], None


def _port(args: argparse.Namespace, index: int) -> int:
    return int(args.ports.split(",")[index])


async def serve_shard(args: argparse.Namespace, handle: Handle) -> Close:
    _, close = await _serve(f"shard{args.index}", handle, port=_port(args, args.index))
    return close


def _refused(exc: BaseException) -> bool:
    """Whether the call failed because nothing listens there (a dead shard)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, httpx.ConnectError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def shard_client(args: argparse.Namespace) -> tuple[ShardCall, Close]:
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=64), timeout=60.0)
    config = ClientConfig(streaming=False, httpx_client=http)
    clients = [
        await create_client(_card(f"http://127.0.0.1:{_port(args, i)}", f"shard{i}"), config)
        for i in range(args.shards)
    ]

    async def call(index: int, text: str, timeout: float) -> str:
        request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
        try:
            async with asyncio.timeout(timeout):
                replies = [event async for event in clients[index].send_message(request)]
        except Exception as exc:
            if _refused(exc):
                raise Unreachable(index) from None
            raise
        return "".join(part.text for part in replies[-1].message.parts)

    return call, http.aclose


if __name__ == "__main__":
    main(sys.modules[__name__])
