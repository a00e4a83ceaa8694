"""AutoGen Core's gRPC worker runtime (``autogen-ext[grpc]``): a host process
(``GrpcWorkerAgentRuntimeHost``) between worker runtimes; the echo is a
``RoutedAgent`` in one worker runtime, called with ``send_message`` from another;
the Streaming Queue's coordinator is an agent too. Messages are pydantic models
(AutoGen's JSON serializer). See ``_driver.py``.

    python bench/stacks/autogen_grpc.py host --port P   # run by serve-echo and sq
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys

from _driver import READY, Close, EchoCall, PullCall, handled, main
from _messages import Answer, Next, Pull, Question
from _storm import Handle, ShardCall
from autogen_core import (
    AgentId,
    MessageContext,
    RoutedAgent,
    message_handler,
    try_get_known_serializers_for_type,
)
from autogen_ext.runtimes.grpc import GrpcWorkerAgentRuntime, GrpcWorkerAgentRuntimeHost

ECHO = AgentId("pb_echo", "default")
COORDINATOR = AgentId("pb_coordinator", "default")


MESSAGES = (Question, Answer, Pull, Next)


class EchoAgent(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("echo")

    @message_handler
    async def on_question(self, message: Question, ctx: MessageContext) -> Answer:
        handled(message.text)
        return Answer(text=message.text)


class CoordinatorAgent(RoutedAgent):
    def __init__(self, pull: PullCall) -> None:
        super().__init__("coordinator")
        self.pull = pull

    @message_handler
    async def on_pull(self, message: Pull, ctx: MessageContext) -> Next:
        return Next(question=await self.pull(message.worker, message.question, message.answer))


# -- the host, in a process of its own ----------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run_host(port: int) -> None:
    host = GrpcWorkerAgentRuntimeHost(address=f"127.0.0.1:{port}")
    host.start()
    print(READY, flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)  # the parent closed our stdin
    await stop.wait()
    await host.stop(grace=1)


async def _host() -> tuple[str, asyncio.subprocess.Process]:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        *("host", "--port", str(port)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = (await proc.stdout.readline()).decode()
    if line.strip() != READY:
        raise RuntimeError(f"the AutoGen host did not start: {line!r}")
    return f"127.0.0.1:{port}", proc


async def _stop_host(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def _runtime(address: str) -> GrpcWorkerAgentRuntime:
    runtime = GrpcWorkerAgentRuntime(host_address=address)
    for message in MESSAGES:
        runtime.add_message_serializer(try_get_known_serializers_for_type(message))
    await runtime.start()
    return runtime


# -- the stack ------------------------------------------------------------------------
async def serve_echo(args: argparse.Namespace) -> tuple[str, Close]:
    address, host = await _host()
    runtime = await _runtime(address)
    await EchoAgent.register(runtime, ECHO.type, EchoAgent)

    async def close() -> None:
        await runtime.stop()
        await _stop_host(host)

    return address, close


async def echo_client(args: argparse.Namespace) -> tuple[EchoCall, Close]:
    runtime = await _runtime(args.address)

    async def call(text: str) -> str:
        answer = await runtime.send_message(Question(text=text), ECHO)
        return str(answer.text)

    return call, runtime.stop


async def serve_pull(args: argparse.Namespace, pull: PullCall) -> tuple[str, Close]:
    address, host = await _host()
    runtime = await _runtime(address)
    await CoordinatorAgent.register(runtime, COORDINATOR.type, lambda: CoordinatorAgent(pull))

    async def close() -> None:
        await runtime.stop()
        await _stop_host(host)

    return address, close


async def pull_client(args: argparse.Namespace) -> tuple[PullCall, Close]:
    runtime = await _runtime(args.address)

    async def call(worker: int, question: int | None, answer: str | None) -> int | None:
        pull = Pull(worker=worker, question=question, answer=answer)
        reply = await runtime.send_message(pull, COORDINATOR)
        return reply.question  # type: ignore[no-any-return]

    return call, runtime.stop


# -- Fail-Storm (_storm.py) ---------------------------------------------------------
class ShardAgent(RoutedAgent):
    def __init__(self, handle: Handle) -> None:
        super().__init__("shard")
        self.handle = handle

    @message_handler
    async def on_query(self, message: Question, ctx: MessageContext) -> Answer:
        return Answer(text=await self.handle(message.text))


async def storm_infra(args: argparse.Namespace) -> tuple[list[str], Close]:
    """The host process the shards' worker runtimes connect to (as a broker)."""
    address, host = await _host()

    async def close() -> None:
        await _stop_host(host)

    return ["--address", address], close


async def serve_shard(args: argparse.Namespace, handle: Handle) -> Close:
    runtime = await _runtime(args.address)
    await ShardAgent.register(runtime, f"pb_shard{args.index}", lambda: ShardAgent(handle))
    return runtime.stop


async def shard_client(args: argparse.Namespace) -> tuple[ShardCall, Close]:
    runtime = await _runtime(args.address)

    async def call(index: int, text: str, timeout: float) -> str:
        # the host drops a request for an agent type no worker serves (it logs it): the
        # caller learns nothing until its timeout, so a dead shard is never skipped
        async with asyncio.timeout(timeout):
            answer = await runtime.send_message(
                Question(text=text), AgentId(f"pb_shard{index}", "default")
            )
        return str(answer.text)

    return call, runtime.stop


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        port = int(sys.argv[sys.argv.index("--port") + 1])
        asyncio.run(_run_host(port))
    else:
        main(sys.modules[__name__])
