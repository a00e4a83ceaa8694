"""An actor behind the HTTP gateway, asked by an A2A client; it keeps the task
open (Working) and finishes it later through GatewayTask."""

import asyncio
import tempfile
from pathlib import Path

import aiohttp

from actorbus import Actor, ActorSystem, handler
from actorbus.services.gateway import GatewayService, GatewaySettings, GatewayTask, Working


class Reports(Actor):
    """Writes reports, which takes a while."""

    def __init__(self) -> None:
        self.jobs: asyncio.Queue[tuple[GatewayTask, str]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    async def on_start(self) -> None:
        self.worker = asyncio.create_task(self.work())

    async def on_stop(self) -> None:
        if self.worker is not None:
            self.worker.cancel()

    @handler
    async def report(self, topic: str) -> Working:
        await self.jobs.put((GatewayTask.of(self), topic))  # finished by the worker loop
        return Working(message="queued")

    async def work(self) -> None:
        while True:
            task, topic = await self.jobs.get()
            await task.working("half way")
            await task.complete(f"a report on {topic}")


async def main() -> None:
    settings = GatewaySettings(
        http_port=0,  # any free port
        db_path=Path(tempfile.mkdtemp()) / "gateway.sqlite3",
        open_agents=("reports",),  # asked without a token (the operator's explicit choice)
        tls="off",  # plain HTTP on loopback for this example
    )
    async with ActorSystem.start() as system:
        await system.spawn(Reports, "1")
        async with GatewayService(system=system, settings=settings) as gateway:
            send = {  # A2A 0.3 JSON-RPC, as any A2A client sends it
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {
                    "message": {
                        "kind": "message",
                        "messageId": "m-1",
                        "role": "user",
                        "parts": [{"kind": "text", "text": "NATS"}],
                    }
                },
            }
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"{gateway.http_url}/a2a/reports", json=send) as response,
            ):
                task = (await response.json())["result"]
            print(task["status"]["state"])
            print(task["artifacts"][0]["parts"][0]["text"])


if __name__ == "__main__":
    asyncio.run(main())
