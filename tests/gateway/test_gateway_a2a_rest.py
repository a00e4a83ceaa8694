"""The A2A edge's HTTP+JSON (REST) binding over raw HTTP: the card names it, every
route answers as the JSON-RPC binding does, and every error is an HTTP status
with a ``google.rpc.Status`` body. (The official SDKs drive it too:
test_gateway_a2a_sdk.py's ``1.0-rest`` and test_gateway_js_sdk.py's HTTP+JSON.)"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from _gateway import GatewayUnderTest, Probe, running_gateway

from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService

GATEWAY = GatewayUnderTest(agents=("gw-echo", "gw-streamer"))


def agent_url(gw: GatewayService, agent: str = "gw-echo") -> str:
    return f"{gw.http_url}/a2a/{agent}"


def send_body(text: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }


async def status_error(resp: aiohttp.ClientResponse, status: int, reason: str) -> str:
    """Assert ``resp`` is the binding's error: the status, a google.rpc.Status body,
    and an ErrorInfo with ``reason``; its message."""
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    error = (await resp.json())["error"]
    assert error["code"] == status
    assert isinstance(error["status"], str)
    [info] = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["reason"] == reason, info
    message: str = error["message"]
    return message


async def test_the_card_names_the_rest_binding(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{agent_url(gw)}/.well-known/agent-card.json") as resp:
        card = await resp.json()
    rest = {"url": agent_url(gw), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
    assert rest in card["supportedInterfaces"]
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"  # still preferred


async def test_send_get_list_and_cancel(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    base = agent_url(gw)
    async with http.post(f"{base}/message:send", json=send_body("rest")) as resp:
        assert resp.status == 200
        task = (await resp.json())["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "REST"
    async with http.get(f"{base}/tasks/{task['id']}", params={"historyLength": "1"}) as resp:
        got = await resp.json()
    assert got["id"] == task["id"]
    assert len(got["history"]) == 1
    query = {"contextId": task["contextId"], "includeArtifacts": "true"}
    async with http.get(f"{base}/tasks", params=query) as resp:
        listed = await resp.json()
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert listed["tasks"][0]["artifacts"]
    async with http.post(f"{base}/tasks/{task['id']}:cancel") as resp:
        assert "cannot be canceled" in await status_error(resp, 409, "TASK_NOT_CANCELABLE")


async def test_streams_are_bare_stream_responses(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    base = agent_url(gw, "gw-streamer")
    async with http.post(f"{base}/message:stream", json=send_body("a b")) as resp:
        assert resp.content_type == "text/event-stream"
        raw = (await resp.read()).decode()
    frames = [f for f in raw.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames), frames
    events = [json.loads(f.removeprefix("data: ")) for f in frames]
    assert "task" in events[0]  # no JSON-RPC wrapping
    chunks = [
        e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events if "artifactUpdate" in e
    ]
    assert chunks == ["A", "B"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    task_id = events[0]["task"]["id"]
    # subscribing to a finished task: an HTTP status, before any stream
    async with http.post(f"{base}/tasks/{task_id}:subscribe") as resp:
        assert "no run is in progress" in await status_error(resp, 400, "UNSUPPORTED_OPERATION")


async def test_every_error_is_a_status_with_its_reason(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    base = agent_url(gw)
    async with http.get(f"{base}/tasks/no-such-task") as resp:
        await status_error(resp, 404, "TASK_NOT_FOUND")
    async with http.post(f"{base}/tasks/no-such-task:cancel") as resp:
        await status_error(resp, 404, "TASK_NOT_FOUND")
    for body in (b"{not json", b"\xff\xfe", b"[" * 10_000, b"[]", json.dumps({"x": 1}).encode()):
        async with http.post(f"{base}/message:send", data=body) as resp:
            assert resp.status == 400, (body[:20], await resp.text())
            assert (await resp.json())["error"]["status"] == "INVALID_ARGUMENT"
    async with http.get(f"{base}/tasks", params={"pageSize": "many"}) as resp:
        assert "`pageSize` must be an integer" in await status_error(resp, 400, "INVALID_PARAMS")
    async with http.post(f"{base}/tasks/t1/pushNotificationConfigs", json={}) as resp:
        await status_error(resp, 404, "TASK_NOT_FOUND")
    async with http.get(f"{base}/extendedAgentCard") as resp:
        await status_error(resp, 400, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")
    async with http.post(f"{gw.http_url}/a2a/nobody/message:send", json=send_body("x")) as resp:
        assert resp.status == 404
        assert (await resp.json())["error"]["status"] == "NOT_FOUND"
    big = b'{"message": "' + b"x" * gw.settings.max_body + b'"}'
    async with http.post(f"{base}/message:send", data=big) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["status"] == "RESOURCE_EXHAUSTED"
    # the JSON-RPC binding on the same URL is untouched
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
    async with http.post(base, json=rpc, headers={"A2A-Version": "1.0"}) as resp:
        assert (await resp.json())["error"]["code"] == -32001


async def test_proto_field_names_are_taken_too(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    """Protobuf's JSON mapping lets a parser take the proto names (message_id) as
    well as the JSON ones (messageId); clients built on the proto send them. A
    data part's own JSON keeps its keys as they came."""
    snake = {
        "message": {
            "message_id": uuid.uuid4().hex,
            "context_id": "ctx-snake",
            "role": "ROLE_USER",
            "parts": [{"data": {"user_id": 7}}],
        },
        "configuration": {"return_immediately": False},
    }
    async with http.post(f"{agent_url(gw)}/message:send", json=snake) as resp:
        task = (await resp.json())["task"]
    assert task["contextId"] == "ctx-snake"
    assert task["artifacts"][0]["parts"][0]["data"]["echo"] == {"user_id": 7}
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
    rpc["params"]["history_length"] = 1
    async with http.post(agent_url(gw), json=rpc, headers={"A2A-Version": "1.0"}) as resp:
        got = (await resp.json())["result"]
    assert len(got["history"]) == 1


async def test_the_default_agent_is_served_at_the_site_root(
    probe: Probe, nats_server: EmbeddedServer, ns: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_gateway(
        nats_server.url, ns, tmp_path / "gw.db", "gw-echo", default_agent="gw-echo"
    ) as gw:
        async with http.post(f"{gw.http_url}/message:send", json=send_body("root")) as resp:
            task = (await resp.json())["task"]
        assert task["artifacts"][0]["parts"][0]["text"] == "ROOT"
        async with http.get(f"{gw.http_url}/tasks/{task['id']}") as resp:
            assert (await resp.json())["id"] == task["id"]
        async with http.get(f"{agent_url(gw)}/tasks/{task['id']}") as resp:
            assert resp.status == 200  # the same task under the agent's own URL
