"""Interop with the official A2A SDK (``a2a-sdk``) client, in A2A 1.0 and 0.3 modes:
send, stream, get, list (1.0), cancel, subscribe and input-required turns against
the gateway."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip(
    "a2a.client",
    reason="a2a-sdk is not installed (pip install 'a2a-sdk[http-server]' for these tests)",
)

import httpx
from _gateway import GatewayUnderTest, Probe
from _util import WAIT
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers.proto_helpers import new_data_message, new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from actorbus.services.gateway import GatewayService

VERSIONS = ["1.0", "0.3", "1.0-rest"]  # 1.0-rest: A2A 1.0 over the HTTP+JSON binding


GATEWAY = GatewayUnderTest(ask_timeout=None)


async def client_for(gw: GatewayService, agent: str, version: str, *, streaming: bool) -> Any:
    """An SDK client of ``agent``: 1.0 from the card as served (JSON-RPC, or the
    HTTP+JSON binding for ``1.0-rest``); 0.3 from the same card without its 1.0
    interfaces (what a 0.3-only card looks like to the SDK)."""
    base = f"{gw.http_url}/a2a/{agent}"
    config = ClientConfig(streaming=streaming)
    if version == "1.0-rest":
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=["HTTP+JSON"])
        client = await create_client(base, client_config=config)
        transport = type(getattr(client, "_transport", None)).__name__
        assert transport == "RestTransport", transport
        return client
    if version == "1.0":
        client = await create_client(base, client_config=config)
        assert type(getattr(client, "_transport", None)).__name__ == "JsonRpcTransport"
        return client
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{base}/.well-known/agent-card.json")).json()
    card.pop("supportedInterfaces")
    client = await create_client(parse_agent_card(card), client_config=config)
    transport = type(getattr(client, "_transport", None)).__name__
    assert transport == "CompatJsonRpcTransport", transport  # really speaking 0.3
    return client


def user_text(text: str, **kw: Any) -> Any:
    return new_text_message(text, role=Role.ROLE_USER, **kw)


def artifact_texts(task: Any) -> list[str]:
    return [p.text for a in task.artifacts for p in a.parts]


@pytest.mark.parametrize("version", VERSIONS)
async def test_sdk_send_get_list(gw: GatewayService, version: str) -> None:
    client = await client_for(gw, "gw-echo", version, streaming=False)
    try:
        events = [
            e async for e in client.send_message(SendMessageRequest(message=user_text("hello sdk")))
        ]
        assert len(events) == 1
        task = events[0].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert artifact_texts(task) == ["HELLO SDK"]
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.id == task.id
        assert got.context_id == task.context_id
        assert artifact_texts(got) == ["HELLO SDK"]
        # the same conversation, data this time
        msg = new_data_message({"n": 1}, context_id=task.context_id)
        msg.role = Role.ROLE_USER
        replies = [e async for e in client.send_message(SendMessageRequest(message=msg))]
        assert len(replies) == 1
        second = replies[0].task
        assert second.context_id == task.context_id
        data = MessageToDict(second.artifacts[0].parts[0])["data"]
        assert data == {"echo": {"n": 1}, "session": task.context_id}
        if version == "1.0":
            listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
            assert {t.id for t in listed.tasks} == {task.id, second.id}
            assert listed.total_size == 2
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
    finally:
        await client.close()


@pytest.mark.parametrize("version", VERSIONS)
async def test_sdk_stream(gw: GatewayService, version: str) -> None:
    client = await client_for(gw, "gw-streamer", version, streaming=True)
    try:
        events = [
            e
            async for e in client.send_message(
                SendMessageRequest(message=user_text("alpha beta gamma"))
            )
        ]
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[0] == "task"
        assert kinds.count("artifact_update") == 3
        chunks = [
            e.artifact_update.artifact.parts[0].text
            for e in events
            if e.HasField("artifact_update")
        ]
        assert chunks == ["ALPHA", "BETA", "GAMMA"]
        last = events[-1].status_update
        assert last.status.state == TaskState.TASK_STATE_COMPLETED
        got = await client.get_task(GetTaskRequest(id=events[0].task.id))
        assert artifact_texts(got) == ["ALPHABETAGAMMA"]  # the text items, one text
    finally:
        await client.close()


@pytest.mark.parametrize("version", VERSIONS)
async def test_sdk_subscribe_and_cancel(gw: GatewayService, probe: Probe, version: str) -> None:
    client = await client_for(gw, "gw-streamer", version, streaming=True)
    watcher = await client_for(gw, "gw-streamer", version, streaming=True)
    try:
        stream = client.send_message(SendMessageRequest(message=user_text("forever")))
        first = await asyncio.wait_for(anext(stream), WAIT)
        task_id = first.task.id
        seen: list[Any] = []
        following = watcher.subscribe(SubscribeToTaskRequest(id=task_id))
        seen.append(await asyncio.wait_for(anext(following), WAIT))
        assert seen[0].task.id == task_id
        assert seen[0].task.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
        )
        canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(probe.cancelled.wait(), 3 * WAIT)  # reached the actor (a busy CI)

        async def rest(it: Any) -> list[Any]:
            return [e async for e in it]

        tail = await asyncio.wait_for(rest(stream), WAIT)
        assert tail[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
        seen += await asyncio.wait_for(rest(following), WAIT)
        assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
        got = await client.get_task(GetTaskRequest(id=task_id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
    finally:
        await client.close()
        await watcher.close()


@pytest.mark.parametrize("version", VERSIONS)
async def test_sdk_input_required_multi_turn(gw: GatewayService, version: str) -> None:
    client = await client_for(gw, "gw-echo", version, streaming=False)
    try:
        first = [
            e async for e in client.send_message(SendMessageRequest(message=user_text("ask me")))
        ]
        task = first[0].task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "what is your name?"
        answer = user_text("grace", task_id=task.id, context_id=task.context_id)
        second = [e async for e in client.send_message(SendMessageRequest(message=answer))]
        done = second[0].task
        assert done.id == task.id
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert artifact_texts(done) == ["HELLO GRACE"]
    finally:
        await client.close()
