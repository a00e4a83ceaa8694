"""Interop with the A2A JavaScript SDK (``@a2a-js/sdk``, run by Node): card, send,
stream, get, list, cancel, subscribe and an input-required turn against the
gateway, driven by ``tests/js/a2a_client.mjs``. (``make test`` installs the SDK
into ``tests/js/node_modules`` from its lock file.)"""

from __future__ import annotations

import asyncio

import pytest
from _gateway import GatewayUnderTest, Probe
from _js import needs_js, run_js
from _util import WAIT
from test_gateway_push import Webhook

from actorbus.services.gateway import GatewayService

pytestmark = needs_js("@a2a-js/sdk")

GATEWAY = GatewayUnderTest(ask_timeout=None, settings=(("push_urls", "any"),))

# the JSON-RPC binding and the HTTP+JSON (REST) one, both from the same card
TRANSPORTS = ["JSONRPC", "HTTP+JSON"]
ERRORS = {"JSONRPC": "JsonRpc", "HTTP+JSON": "Rest"}  # the SDK's error classes, by binding


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_js_card_send_get_list(transport: str, gw: GatewayService) -> None:
    seen = await run_js("a2a_client.mjs", "send", gw.http_url, A2A_TRANSPORT=transport)
    assert "gw-echo" in seen["rootCard"]["skills"]
    assert "/a2a/gw-echo" in seen["wrong"]["message"]  # it says where the agents are
    sent = seen["sent"]
    assert sent["state"] == "TASK_STATE_COMPLETED"
    assert sent["artifacts"] == ["HELLO FROM JS"]
    assert seen["got"] == sent
    assert seen["listed"] == [sent["id"]]  # filtered by its context
    assert seen["unknown"] is not None
    assert seen["unknown"] == {
        "name": f"{ERRORS[transport]}TaskNotFoundError",
        "message": "task 'no-such-task' not found",
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_js_stream(transport: str, gw: GatewayService) -> None:
    seen = await run_js("a2a_client.mjs", "stream", gw.http_url, A2A_TRANSPORT=transport)
    events = seen["events"]
    assert events[0]["kind"] == "task"
    chunks = [t for e in events if e["kind"] == "artifact" for t in e["texts"]]
    assert chunks == ["ALPHA", "BETA", "GAMMA"]
    assert events[-1] == {
        "kind": "status",
        "taskId": events[0]["id"],
        "state": "TASK_STATE_COMPLETED",
    }
    assert seen["got"]["artifacts"] == ["ALPHABETAGAMMA"]  # in the task: one text


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_js_subscribe_and_cancel(transport: str, gw: GatewayService, probe: Probe) -> None:
    seen = await run_js("a2a_client.mjs", "cancel", gw.http_url, A2A_TRANSPORT=transport)
    task_id = seen["first"]["id"]
    assert seen["firstSeen"]["kind"] == "task"
    assert seen["firstSeen"]["id"] == task_id
    assert seen["canceled"]["state"] == "TASK_STATE_CANCELED"
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)  # reached the actor
    assert seen["tail"][-1]["state"] == "TASK_STATE_CANCELED"
    assert seen["followed"][-1]["state"] == "TASK_STATE_CANCELED"
    assert seen["again"]["name"] == f"{ERRORS[transport]}TaskNotCancelableError"  # it has finished
    # subscribing to a finished task: the stream's one error event, as the SDK reads it
    assert seen["late"] == []
    assert "no run is in progress" in seen["lateError"]["message"]
    if transport == "JSONRPC":  # the stream's one error event
        assert "(Code: -32004)" in seen["lateError"]["message"]
    else:  # an HTTP status before any stream
        assert seen["lateError"]["name"] == "RestUnsupportedOperationError"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_js_input_required_turn(transport: str, gw: GatewayService) -> None:
    seen = await run_js("a2a_client.mjs", "turns", gw.http_url, "ada", A2A_TRANSPORT=transport)
    assert seen["first"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert seen["first"]["statusText"] == ["what is your name?"]
    assert seen["done"]["id"] == seen["first"]["id"]
    assert seen["done"]["state"] == "TASK_STATE_COMPLETED"
    assert seen["done"]["artifacts"] == ["HELLO ADA"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_js_push_notifications(transport: str, gw: GatewayService) -> None:
    hook = Webhook()
    await hook.up()
    try:
        seen = await run_js(
            "a2a_client.mjs", "push", gw.http_url, hook.url, A2A_TRANSPORT=transport
        )
        bodies = await hook.bodies(3)  # working, the reply's artifact, completed
    finally:
        await hook.down()
    task_id = seen["task"]["id"]
    assert seen["task"]["state"] == "TASK_STATE_COMPLETED"
    assert bodies[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert {body[next(iter(body))]["taskId"] for body in bodies} == {task_id}
    assert hook.taken[0][0]["X-A2A-Notification-Token"] == "js-token"
    assert seen["made"] == {
        "id": "js-config",
        "taskId": task_id,
        "url": hook.url,
        "auth": {"scheme": "Bearer", "credentials": "js-secret"},
    }
    assert len(seen["listed"]) == 2
    assert "js-config" in seen["listed"]
    assert seen["got"] == {"id": "js-config", "url": hook.url}
    assert "js-config" not in seen["after"]
    assert len(seen["after"]) == 1
