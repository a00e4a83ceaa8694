"""examples/a2a_tck_agent.py, the agent the A2A conformance kit is run against
(docs/protocols.md), as the kit finds it: its root card is its agent card, and a
task stays open, taking follow-ups, until the client cancels it."""

from __future__ import annotations

import asyncio
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from _util import child_env, terminate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "a2a_tck_agent.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def send(text: str, task_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if task_id is not None:
        message["taskId"] = task_id
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def test_the_tck_agent_keeps_tasks_open_until_canceled(tmp_path: Path) -> None:
    port = free_port()
    env = {**child_env(), "ACTORBUS_HOME": str(tmp_path / "home")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), str(port), stdout=asyncio.subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            line = await proc.stdout.readline()
        assert b"A2A TCK agent: http://127.0.0.1:" in line, line
        base = f"http://127.0.0.1:{port}"
        headers = {"A2A-Version": "1.0"}
        async with aiohttp.ClientSession(headers=headers) as http:

            async def rpc(body: dict[str, Any]) -> dict[str, Any]:
                async with http.post(f"{base}/a2a/tck-core", json=body) as r:
                    answer: dict[str, Any] = await r.json()
                    return answer["result"]

            async with http.get(f"{base}/.well-known/agent-card.json") as r:
                root = await r.json()
            async with http.get(f"{base}/a2a/tck-core/.well-known/agent-card.json") as r:
                card = await r.json()
            assert root == card  # the root card and the agent's agree (push included)
            assert card["url"].startswith(f"http://localhost:{port}/")

            task = (await rpc(send("hello")))["task"]
            assert task["status"]["state"] == "TASK_STATE_WORKING"
            again = (await rpc(send("more", task["id"])))["task"]
            assert (again["id"], again["status"]["state"]) == (task["id"], "TASK_STATE_WORKING")
            get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
            history = (await rpc(get))["history"]
            assert [m["role"] for m in history] == ["ROLE_USER", "ROLE_AGENT"] * 2
            cancel = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "CancelTask",
                "params": {"id": task["id"]},
            }
            assert (await rpc(cancel))["status"]["state"] == "TASK_STATE_CANCELED"
    finally:
        await terminate(proc)
