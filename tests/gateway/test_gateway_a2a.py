"""The gateway's A2A edge over raw HTTP: every method in 1.0 and 0.3, errors,
SSE framing, agent cards, persistence across restarts, cancellation, the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import (
    GatewayUnderTest,
    Probe,
    host_agents,
    message,
    rpc,
    running_gateway,
    settings as gateway_settings,
    sse,
    wait_agents,
)
from _util import WAIT, child_env, terminate
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService

AGENTS = ("gw-echo", "gw-streamer")


GATEWAY = GatewayUnderTest(agents=AGENTS)


def url(gw: GatewayService, agent: str = "gw-echo") -> str:
    return f"{gw.http_url}/a2a/{agent}"


def result_task(resp: dict[str, Any], version: str) -> dict[str, Any]:
    assert "error" not in resp, resp
    result: dict[str, Any] = resp["result"]
    if version == "1.0":
        task: dict[str, Any] = result["task"]
        return task
    assert result["kind"] == "task"
    return result


def state(task: dict[str, Any], version: str) -> str:
    s: str = task["status"]["state"]
    return s.removeprefix("TASK_STATE_").lower().replace("_", "-") if version == "1.0" else s


def first_text(task: dict[str, Any]) -> Any:
    part = task["artifacts"][0]["parts"][0]
    return part.get("text", part.get("data"))


SEND = {"1.0": "SendMessage", "0.3": "message/send"}
STREAM = {"1.0": "SendStreamingMessage", "0.3": "message/stream"}
GET = {"1.0": "GetTask", "0.3": "tasks/get"}
CANCEL = {"1.0": "CancelTask", "0.3": "tasks/cancel"}
SUBSCRIBE = {"1.0": "SubscribeToTask", "0.3": "tasks/resubscribe"}
VERSIONS = ["1.0", "0.3"]


# -- health and cards ----------------------------------------------------------------


async def test_healthz_and_agent_cards(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{gw.http_url}/healthz") as resp:
        assert resp.status == 200
        assert await resp.json() == {"ok": True, "agents": 2}
    for path in ("agent-card.json", "agent.json"):
        async with http.get(f"{url(gw)}/.well-known/{path}") as resp:
            assert resp.status == 200
            card = await resp.json()
        assert card["name"] == "gw-echo"
        assert card["description"].startswith("Echoes text")
        assert {"url": url(gw), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"} in card[
            "supportedInterfaces"
        ]
        assert card["url"] == url(gw)  # 0.3
        assert card["protocolVersion"].startswith("0.3")
        assert card["preferredTransport"] == "JSONRPC"
        assert card["capabilities"]["streaming"] is True
        assert card["capabilities"]["pushNotifications"] is True
        assert [s["id"] for s in card["skills"]] == ["echo"]
        assert all(isinstance(s["tags"], list) for s in card["skills"])
        assert card["defaultInputModes"]
        assert card["defaultOutputModes"]
        assert card["version"]
    async with http.get(f"{gw.http_url}/a2a/nobody/.well-known/agent-card.json") as resp:
        assert resp.status == 404
        assert (await resp.json())["error"] == "not_found"
    async with http.get(f"{gw.http_url}/a2a") as resp:
        names = [a["name"] for a in (await resp.json())["agents"]]
    assert set(AGENTS) <= set(names)


# -- send, get, list -------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_send_and_get(gw: GatewayService, http: aiohttp.ClientSession, version: str) -> None:
    header = version if version == "1.0" else None  # 0.3: no header at all
    resp = await rpc(
        http,
        url(gw),
        SEND[version],
        {"message": message("hi there", version=version)},
        version=header,
    )
    task = result_task(resp, version)
    assert state(task, version) == "completed"
    assert first_text(task) == "HI THERE"
    assert task["contextId"]
    if version == "0.3":
        assert task["artifacts"][0]["parts"][0]["kind"] == "text"
    roles = [m["role"] for m in task["history"]]
    assert roles == (["ROLE_USER", "ROLE_AGENT"] if version == "1.0" else ["user", "agent"])

    got = await rpc(http, url(gw), GET[version], {"id": task["id"]}, version=header)
    assert got["result"]["id"] == task["id"]
    assert state(got["result"], version) == "completed"
    assert first_text(got["result"]) == "HI THERE"
    one = await rpc(
        http, url(gw), GET[version], {"id": task["id"], "historyLength": 1}, version=header
    )
    assert len(one["result"]["history"]) == 1
    # tasks belong to their agent
    other = await rpc(
        http, url(gw, "gw-streamer"), GET[version], {"id": task["id"]}, version=header
    )
    assert other["error"]["code"] == -32001


async def test_data_parts_and_multi_turn_context(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    first = result_task(
        await rpc(http, url(gw), "SendMessage", {"message": message(data={"n": 1})}), "1.0"
    )
    ctx = first["contextId"]
    assert first_text(first) == {"echo": {"n": 1}, "session": ctx}
    second = result_task(
        await rpc(
            http, url(gw), "SendMessage", {"message": message(data={"n": 2}, context_id=ctx)}
        ),
        "1.0",
    )
    assert second["contextId"] == ctx
    assert second["id"] != first["id"]
    assert first_text(second) == {"echo": {"n": 2}, "session": ctx}
    assert gw.store is not None
    conv = await gw.store.get_conversation(ctx, "gw-echo")
    assert conv is not None
    assert conv.turns == 2
    # 0.3 data parts too
    third = result_task(
        await rpc(
            http,
            url(gw),
            "message/send",
            {"message": message(data={"n": 3}, version="0.3", context_id=ctx)},
            version=None,
        ),
        "0.3",
    )
    assert first_text(third) == {"echo": {"n": 3}, "session": ctx}


async def test_list_tasks(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    ctx = "ctx-list"
    ids = []
    for word in ("a", "b", "c"):
        resp = await rpc(http, url(gw), "SendMessage", {"message": message(word, context_id=ctx)})
        ids.append(result_task(resp, "1.0")["id"])
    await rpc(http, url(gw), "SendMessage", {"message": message("other")})
    page = (await rpc(http, url(gw), "ListTasks", {"contextId": ctx, "pageSize": 2}))["result"]
    assert page["totalSize"] == 3
    assert page["pageSize"] == 2
    assert len(page["tasks"]) == 2
    assert page["nextPageToken"]
    assert "artifacts" not in page["tasks"][0]  # includeArtifacts defaults to false
    rest = (
        await rpc(
            http,
            url(gw),
            "ListTasks",
            {
                "contextId": ctx,
                "pageSize": 2,
                "pageToken": page["nextPageToken"],
                "includeArtifacts": True,
            },
        )
    )["result"]
    assert len(rest["tasks"]) == 1
    assert rest["pageSize"] == 1  # what the page holds (the A2A TCK's reading)
    assert rest["nextPageToken"] == ""
    assert {t["id"] for t in page["tasks"] + rest["tasks"]} == set(ids)
    assert first_text(rest["tasks"][0]) in {"A", "B", "C"}
    done = (await rpc(http, url(gw), "ListTasks", {"status": "TASK_STATE_COMPLETED"}))["result"]
    assert done["totalSize"] == 4
    empty = (await rpc(http, url(gw), "ListTasks", {"status": "TASK_STATE_FAILED"}))["result"]
    assert empty["totalSize"] == 0
    assert empty["tasks"] == []
    assert empty["pageSize"] == 0
    # ListTasks is 1.0 only, and unambiguous: without the header it is answered in 1.0
    old = await rpc(http, url(gw), "ListTasks", {}, version=None)
    assert old["result"]["totalSize"] >= 4


# -- errors --------------------------------------------------------------------------


async def post_raw(
    http: aiohttp.ClientSession, target: str, body: bytes, hdrs: dict[str, str] | None = None
) -> dict[str, Any]:
    async with http.post(
        target, data=body, headers=hdrs or {}, skip_auto_headers=["Content-Type"]
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "application/json"
        data: dict[str, Any] = await resp.json()
        return data


async def test_errors_have_the_protocols_shape(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    target = url(gw)
    # malformed JSON, with and without a version
    for hdrs, shape in (({"A2A-Version": "1.0"}, list), ({}, dict)):
        bad = await post_raw(http, target, b"{not json", hdrs)
        assert bad["jsonrpc"] == "2.0"
        assert bad["id"] is None
        assert bad["error"]["code"] == -32700
        assert isinstance(bad["error"]["data"], shape)
    v10 = await post_raw(http, target, b"{not json", {"A2A-Version": "1.0"})
    assert v10["error"]["data"][0]["@type"].endswith("google.rpc.ErrorInfo")
    # not a JSON-RPC request
    assert (await post_raw(http, target, b"[1, 2]"))["error"]["code"] == -32600
    assert (await post_raw(http, target, b'{"id": 3, "method": "x"}'))["error"]["code"] == -32600
    # unknown method keeps the id
    unknown = await rpc(http, target, "tasks/explode", {}, version=None, rid=7)
    assert unknown["id"] == 7
    assert unknown["error"]["code"] == -32601
    assert (await rpc(http, target, "Explode", {}))["error"]["code"] == -32601
    # a 1.0 method without the header is 1.0 (here: no such task); a 0.3 method with it
    assert (await rpc(http, target, "GetTask", {"id": "x"}, version=None))["error"][
        "code"
    ] == -32001
    assert (await rpc(http, target, "tasks/get", {"id": "x"}))["error"]["code"] == -32009
    # a version nobody speaks
    assert (await rpc(http, target, "GetTask", {"id": "x"}, version="2.0"))["error"][
        "code"
    ] == -32009
    # unknown task, both versions
    for method, version in (
        ("GetTask", "1.0"),
        ("tasks/get", None),
        ("CancelTask", "1.0"),
        ("tasks/cancel", None),
    ):
        nf = await rpc(http, target, method, {"id": "no-such-task"}, version=version)
        assert nf["error"]["code"] == -32001, nf
    nf10 = await rpc(http, target, "GetTask", {"id": "no-such-task"})
    assert nf10["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    # invalid params
    bad_params = await rpc(http, target, "SendMessage", {"message": {"role": "ROLE_USER"}})
    assert bad_params["error"]["code"] == -32602
    assert "messageId" in bad_params["error"]["message"]
    # a push notification config for a task that is not there; no extended card
    push = await rpc(http, target, "CreateTaskPushNotificationConfig", {"taskId": "x"})
    assert push["error"]["code"] == -32001
    assert (await rpc(http, target, "GetExtendedAgentCard"))["error"]["code"] == -32007
    # an agent the registry does not know
    async with http.post(
        f"{gw.http_url}/a2a/nobody",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
        headers={"A2A-Version": "1.0"},
    ) as resp:
        assert resp.status == 404
        assert (await resp.json())["error"]["code"] == -32004


async def test_oversized_bodies_and_reserved_intents(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    big = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "'
        + b"x" * (3 * 1024 * 1024)
        + b'"}}'
    )
    async with http.post(url(gw), data=big, headers={"A2A-Version": "1.0"}) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == -32600
    sneaky = message("hi")
    sneaky["metadata"] = {"actorbus": {"intent": "$cancel"}}
    resp2 = await rpc(http, url(gw), "SendMessage", {"message": sneaky})
    assert resp2["error"]["code"] == -32602


async def test_input_required_continues_the_task(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    asked = result_task(
        await rpc(http, url(gw), "SendMessage", {"message": message("ask me")}), "1.0"
    )
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert asked["status"]["message"]["parts"][0]["text"] == "what is your name?"
    # 0.3 client answers the same task
    answer = message("ada", version="0.3", task_id=asked["id"], context_id=asked["contextId"])
    done = result_task(
        await rpc(http, url(gw), "message/send", {"message": answer}, version=None), "0.3"
    )
    assert done["id"] == asked["id"]
    assert done["status"]["state"] == "completed"
    assert first_text(done) == "HELLO ADA"
    assert [m["role"] for m in done["history"]] == ["user", "agent", "user", "agent"]
    assert gw.store is not None
    runs = await gw.store.runs_of(asked["id"])
    assert [r.state for r in runs] == ["completed", "completed"]
    # a finished task takes no more messages
    late = message("again", task_id=asked["id"])
    assert (await rpc(http, url(gw), "SendMessage", {"message": late}))["error"]["code"] == -32004
    unknown = message("who?", task_id="no-such-task")
    assert (await rpc(http, url(gw), "SendMessage", {"message": unknown}))["error"][
        "code"
    ] == -32001


async def test_message_replies_setting(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path, probe: Probe
) -> None:
    async with (
        running_gateway(
            nats_server.url, ns, tmp_path / "m.db", "gw-echo", a2a_message_replies=True
        ) as gw,
        aiohttp.ClientSession() as http,
    ):
        for version, method in (("1.0", "SendMessage"), (None, "message/send")):
            msg = message("plain", version=version or "0.3")
            resp = await rpc(http, url(gw), method, {"message": msg}, version=version)
            reply = resp["result"]["message"] if version else resp["result"]
            assert reply["parts"][0]["text"] == "PLAIN"
            assert reply["role"] in ("ROLE_AGENT", "agent")
            assert reply["taskId"]


async def test_json_without_content_type_is_accepted(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "x1",
        "method": "message/send",
        "params": {"message": message("quiet", version="0.3")},
    }
    resp = await post_raw(http, url(gw), json.dumps(body).encode())
    assert resp["id"] == "x1"
    assert first_text(result_task(resp, "0.3")) == "QUIET"


async def test_actor_errors_map_to_task_states(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    failed = result_task(
        await rpc(http, url(gw), "SendMessage", {"message": message("fail")}), "1.0"
    )
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert failed["status"]["message"]["parts"][0]["text"] == "E_HANDLER: asked to fail"
    assert failed["metadata"]["gateway"]["error"]["type"] == "ValueError"
    timed_out = result_task(
        await rpc(
            http, url(gw), "message/send", {"message": message("hang", version="0.3")}, version=None
        ),
        "0.3",
    )
    assert timed_out["status"]["state"] == "failed"
    assert timed_out["metadata"]["gateway"]["error"]["code"] == "E_TIMEOUT"
    # a finished task cannot be canceled
    again = await rpc(http, url(gw), "CancelTask", {"id": failed["id"]})
    assert again["error"]["code"] == -32002


class Booking(BaseModel):
    nights: int


class Hotel(Actor):
    """Takes a Booking only: anything else fails validation."""

    @handler
    async def book(self, b: Booking) -> str:
        return f"{b.nights} nights"


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
async def test_input_the_actor_cannot_take_rejects_the_task(
    gw: GatewayService, http: aiohttp.ClientSession, make_system: Any, method: str
) -> None:
    """E_VALIDATION is `rejected`, as the docs say, also once the task was working."""
    await (await make_system()).spawn(Hotel, "1")
    await wait_agents(gw, "hotel")
    body = {"message": message(data={"nights": "many"})}
    if method == "SendMessage":
        status = result_task(await rpc(http, url(gw, "hotel"), method, body), "1.0")["status"]
    else:
        events, _ = await sse(http, url(gw, "hotel"), method, body)
        last = events[-1]["result"]
        status = (last.get("statusUpdate") or last.get("task"))["status"]
    assert status["state"] == "TASK_STATE_REJECTED"
    assert status["message"]["parts"][0]["text"].startswith("E_VALIDATION: ")


# -- streaming -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_stream_frames(gw: GatewayService, http: aiohttp.ClientSession, version: str) -> None:
    header = version if version == "1.0" else None
    events, raw = await sse(
        http,
        url(gw, "gw-streamer"),
        STREAM[version],
        {"message": message("one two three", version=version)},
        version=header,
    )
    assert raw.endswith(b"\n\n")
    assert raw.count(b"data: ") == len(events) == raw.count(b"\n\n")
    results = [e["result"] for e in events]
    assert all(e["id"] == "s1" for e in events)
    if version == "1.0":
        kinds = [next(iter(r)) for r in results]
        assert kinds == [
            "task",
            "statusUpdate",
            "artifactUpdate",
            "artifactUpdate",
            "artifactUpdate",
            "statusUpdate",
        ]
        assert results[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        assert results[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
        chunks = [r["artifactUpdate"] for r in results[2:5]]
        assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        task_id = results[0]["task"]["id"]
    else:
        kinds = [r["kind"] for r in results]
        assert kinds == [
            "task",
            "status-update",
            "artifact-update",
            "artifact-update",
            "artifact-update",
            "status-update",
        ]
        assert [r.get("final") for r in results if r["kind"] == "status-update"] == [False, True]
        assert results[-1]["status"]["state"] == "completed"
        chunks = results[2:5]
        task_id = results[0]["id"]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["ONE", "TWO", "THREE"]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert [c.get("append", False) for c in chunks] == [False, True, True]
    got = await rpc(http, url(gw, "gw-streamer"), GET[version], {"id": task_id}, version=header)
    # in the task, the stream's text items are one text
    assert [p["text"] for p in got["result"]["artifacts"][0]["parts"]] == ["ONETWOTHREE"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_cancel_reaches_streaming_actor(
    gw: GatewayService, http: aiohttp.ClientSession, probe: Probe, version: str
) -> None:
    header = version if version == "1.0" else None
    target = url(gw, "gw-streamer")
    canceled: dict[str, Any] = {}
    resubscribed: list[dict[str, Any]] = []
    sub_task: list[asyncio.Task[Any]] = []

    async def on_event(event: dict[str, Any]) -> None:
        r = event["result"]
        is_chunk = "artifactUpdate" in r if version == "1.0" else r.get("kind") == "artifact-update"
        if not is_chunk or canceled:
            return
        task_id = r["artifactUpdate"]["taskId"] if version == "1.0" else r["taskId"]
        canceled["id"] = task_id
        # a second client subscribes to the running task, then the first cancels it
        ready = asyncio.Event()

        async def follow(ev: dict[str, Any]) -> None:
            resubscribed.append(ev)
            ready.set()

        sub_task.append(
            asyncio.create_task(
                sse(
                    http,
                    target,
                    SUBSCRIBE[version],
                    {"id": task_id},
                    version=header,
                    on_event=follow,
                )
            )
        )
        await asyncio.wait_for(ready.wait(), WAIT)
        canceled["resp"] = await rpc(http, target, CANCEL[version], {"id": task_id}, version=header)

    events, raw = await asyncio.wait_for(
        sse(
            http,
            target,
            STREAM[version],
            {"message": message("forever", version=version)},
            version=header,
            on_event=on_event,
        ),
        WAIT,
    )
    assert raw.endswith(b"\n\n")
    assert state(canceled["resp"]["result"], version) == "canceled"
    last = events[-1]["result"]
    last_state = (
        last["statusUpdate"]["status"]["state"] if version == "1.0" else last["status"]["state"]
    )
    assert last_state in ("TASK_STATE_CANCELED", "canceled")
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)  # the actor's generator was cancelled
    sub_events, _ = await asyncio.wait_for(sub_task[0], WAIT)
    first = sub_events[0]["result"]
    assert (first["task"]["id"] if version == "1.0" else first["id"]) == canceled["id"]
    assert sub_events[-1] == events[-1] | {"id": "s1"}
    got = await rpc(http, target, GET[version], {"id": canceled["id"]}, version=header)
    assert state(got["result"], version) == "canceled"
    # nothing more will happen to it: no subscribing (said as the stream's one
    # event, in the content type the client asked for), no canceling
    [refused], _ = await sse(
        http, target, SUBSCRIBE[version], {"id": canceled["id"]}, version=header
    )
    assert refused["error"]["code"] == -32004
    again = await rpc(http, target, CANCEL[version], {"id": canceled["id"]}, version=header)
    assert again["error"]["code"] == -32002


# -- persistence -------------------------------------------------------------------------


async def test_tasks_survive_a_gateway_restart(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path, probe: Probe
) -> None:
    db = tmp_path / "restart.db"
    async with aiohttp.ClientSession() as http:
        async with running_gateway(nats_server.url, ns, db, *AGENTS) as gw1:
            done = result_task(
                await rpc(http, url(gw1), "SendMessage", {"message": message("keep me")}), "1.0"
            )
            pending = result_task(
                await rpc(
                    http,
                    url(gw1),
                    "SendMessage",
                    {"message": message("hang"), "configuration": {"returnImmediately": True}},
                ),
                "1.0",
            )
            assert pending["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        async with running_gateway(nats_server.url, ns, db, *AGENTS) as gw2:
            assert gw2.http_url != ""
            assert gw2.store is not None
            got = (await rpc(http, url(gw2), "GetTask", {"id": done["id"]}))["result"]
            assert got["status"]["state"] == "TASK_STATE_COMPLETED"
            assert first_text(got) == "KEEP ME"
            assert got["contextId"] == done["contextId"]
            old = await rpc(http, url(gw2), "tasks/get", {"id": pending["id"]}, version=None)
            assert old["result"]["status"]["state"] == "failed"  # its run died with gateway 1
            assert "restarted" in old["result"]["status"]["message"]["parts"][0]["text"]
            runs = await gw2.store.runs_of(done["id"])
            assert [(r.kind, r.state) for r in runs] == [("ask", "completed")]
            listed = (await rpc(http, url(gw2), "ListTasks", {}))["result"]
            assert listed["totalSize"] == 2


# -- the command line ---------------------------------------------------------------------


async def test_command_line_gateway(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path, probe: Probe
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "actorbus.services.gateway",
        "--nats",
        nats_server.url,
        "--namespace",
        ns,
        "--http",
        "127.0.0.1:0",
        "--db",
        str(tmp_path / "cli.db"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode().split()
        assert first[0] == "gateway", first
        assert first[2:] == ["namespace", ns], first
        base = first[1]
        assert (await asyncio.wait_for(proc.stdout.readline(), 5)).decode().strip() == "ready"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            # the agents appear in its registry mirror shortly: its card says when
            deadline = time.monotonic() + WAIT
            while True:
                async with http.get(f"{base}/a2a/gw-echo/.well-known/agent-card.json") as resp:
                    if resp.status == 200:
                        break
                assert time.monotonic() < deadline, "the gateway never saw gw-echo"
                await asyncio.sleep(0.05)  # polling the child's HTTP face: no event to wait on
            resp_json = await rpc(
                http, f"{base}/a2a/gw-echo", "SendMessage", {"message": message("cli")}
            )
            assert first_text(result_task(resp_json, "1.0")) == "CLI"
            # SIGTERM while a client holds an endless stream open: still a clean, quick exit
            streaming = asyncio.Event()
            started = 0.0

            async def on_event(event: dict[str, Any]) -> None:
                nonlocal started
                if "artifactUpdate" in event["result"] and not streaming.is_set():
                    streaming.set()
                    started = time.monotonic()
                    proc.send_signal(signal.SIGTERM)

            with contextlib.suppress(aiohttp.ClientError):
                await asyncio.wait_for(
                    sse(
                        http,
                        f"{base}/a2a/gw-streamer",
                        "SendStreamingMessage",
                        {"message": message("forever")},
                        on_event=on_event,
                    ),
                    10,
                )
        assert streaming.is_set()
        code = await asyncio.wait_for(proc.wait(), 5)
        assert code == 0, (await proc.stderr.read()).decode() if proc.stderr else code
        assert time.monotonic() - started < 5
        await asyncio.wait_for(probe.cancelled.wait(), WAIT)  # the actor's stream was stopped
    finally:
        await terminate(proc)


# -- tracing ---------------------------------------------------------------------------


async def test_requests_are_server_spans_continuing_the_callers_trace(
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    probe: Probe,
    http: aiohttp.ClientSession,
    spans: Any,  # tracing on before the gateway's system opens: it chooses its senders then
) -> None:
    async with running_gateway(nats_server.url, ns, tmp_path / "traced.db", *AGENTS) as gw:
        await traced_request(gw, http, spans)


async def traced_request(gw: GatewayService, http: aiohttp.ClientSession, exporter: Any) -> None:
    from opentelemetry.trace import SpanKind

    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with http.post(
        url(gw),
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": message("traced")},
        },
        headers={"A2A-Version": "1.0", "traceparent": f"00-{trace_id}-{parent_id}-01"},
    ) as resp:
        assert first_text(result_task(await resp.json(), "1.0")) == "TRACED"
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.context is not None and format(s.context.trace_id, "032x") == trace_id
    ]
    server = next(s for s in spans if s.name == "POST /a2a/{agent}")
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == parent_id
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["actorbus.gateway.agent"] == "gw-echo"
    ask = next(s for s in spans if s.name.startswith("ask gw-echo ("))  # (its intent)
    assert ask.parent is not None
    assert server.context is not None
    assert ask.parent.span_id == server.context.span_id  # the actor call is its child


async def test_embedded_in_the_system_that_hosts_the_agents(
    make_system: Any, tmp_path: Path
) -> None:
    system: ActorSystem = await make_system()
    p = Probe()
    await host_agents(system, p)
    gw = GatewayService(system=system, settings=gateway_settings(tmp_path / "emb.db"))
    await gw.start()
    try:
        await wait_agents(gw, "gw-echo")
        async with aiohttp.ClientSession() as http:
            resp = await rpc(http, url(gw), "SendMessage", {"message": message("inside")})
            assert first_text(result_task(resp, "1.0")) == "INSIDE"
            async with http.get(f"{gw.http_url}/status") as st:
                status = await st.json()
            assert status["tasks"] == 1
            assert status["edges"] == ["a2a", "acp", "anp", "agora", "mcp"]
    finally:
        await gw.stop()
        p.release.set()
    assert system.nc.is_connected  # the gateway leaves a system it did not open alone


async def test_a_client_hanging_up_does_not_stop_the_task(
    gw: GatewayService, http: aiohttp.ClientSession, probe: Probe
) -> None:
    target = url(gw, "gw-streamer")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message("forever")},
    }
    async with http.post(target, json=body, headers={"A2A-Version": "1.0"}) as resp:
        first = json.loads((await resp.content.readuntil(b"\n\n"))[len(b"data: ") :])
        task_id = first["result"]["task"]["id"]
        await resp.content.readuntil(b"\n\n")  # working
        await resp.content.readuntil(b"\n\n")  # the first chunk
    # the connection is gone; the task and its actor go on
    got = (await rpc(http, target, "GetTask", {"id": task_id}))["result"]
    assert got["status"]["state"] == "TASK_STATE_WORKING"
    events: list[dict[str, Any]] = []

    async def cancel_once(event: dict[str, Any]) -> None:
        events.append(event)
        if len(events) == 2:  # followed again (snapshot + a chunk): now cancel
            canceled = await rpc(http, target, "CancelTask", {"id": task_id})
            assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    await asyncio.wait_for(
        sse(http, target, "SubscribeToTask", {"id": task_id}, on_event=cancel_once), WAIT
    )
    assert events[0]["result"]["task"]["id"] == task_id
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)


# -- as clients find the gateway (issue: A2A interoperability) -----------------------------


async def test_the_site_root_serves_a_card_as_clients_look_for_one(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{gw.http_url}/.well-known/agent-card.json") as resp:
        assert resp.status == 200
        card = await resp.json()
    assert card["name"] == "actorbus-gateway"
    assert {s["id"] for s in card["skills"]} >= set(AGENTS)  # its agents, as skills
    assert card["url"] == f"{gw.http_url}/a2a"
    # a message to the gateway itself says where the agents are
    answer = await rpc(http, f"{gw.http_url}/a2a", "SendMessage", {"message": message("hi")})
    assert "/a2a/gw-echo" in answer["error"]["message"]


async def test_a_default_agent_answers_at_the_site_root(
    probe: Probe, nats_server: EmbeddedServer, ns: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_gateway(
        nats_server.url, ns, tmp_path / "gw.db", "gw-echo", default_agent="gw-echo"
    ) as gw:
        async with http.get(f"{gw.http_url}/.well-known/agent-card.json") as resp:
            card = await resp.json()
        assert card["name"] == "gw-echo"
        assert card["url"] == url(gw)


async def test_a_base_url_with_a_slash_and_a_1_0_method_without_the_header(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    # 1.0 method names are unambiguous: no A2A-Version header, still answered in 1.0
    sent = await rpc(
        http, url(gw) + "/", "SendMessage", {"message": message("slash")}, version=None
    )
    assert state(result_task(sent, "1.0"), "1.0") == "completed"
    # the JavaScript SDK's ListTasks with no filter sends the proto default
    listed = await rpc(http, url(gw), "ListTasks", {"status": "UNRECOGNIZED"})
    assert listed["result"]["tasks"], listed
    # 0.3 method names without the header are still 0.3
    old = await rpc(
        http, url(gw), "message/send", {"message": message("old", version="0.3")}, version=None
    )
    assert result_task(old, "0.3")["kind"] == "task"


async def test_a_body_too_large_is_minus_32600_on_every_json_rpc_edge(
    probe: Probe, nats_server: EmbeddedServer, ns: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_gateway(
        nats_server.url, ns, tmp_path / "gw.db", "gw-echo", max_body=2048
    ) as gw:
        big = b"x" * 10_000
        # (ANP proves the caller before it reads a body: test_gateway_anp has its 413)
        for path in ("/a2a/gw-echo", "/mcp"):
            async with http.post(gw.http_url + path, data=big) as resp:
                assert resp.status == 413, path
                assert (await resp.json())["error"]["code"] == -32600, path
        async with http.post(gw.http_url + "/anp/gw-echo/rpc", data=big) as resp:
            assert resp.status == 401


async def test_the_a2a_ids_reach_the_actor(
    gw: GatewayService, http: aiohttp.ClientSession, probe: Probe
) -> None:
    """An agent can correlate and deduplicate: the conversation is the envelope's
    session, and the idempotency key names the task and the client's message id."""
    sent = message("who am i", context_id="c-42")
    sent["messageId"] = "m-42"
    task = result_task(await rpc(http, url(gw), "SendMessage", {"message": sent}), "1.0")
    context = probe.contexts[-1]
    assert context.session_id == "c-42"
    assert context.idempotency_key == f"a2a:{task['id']}:m-42"


async def test_subscribing_to_an_unknown_task_is_an_error_event_in_a_stream(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    for version, method in (("1.0", "SubscribeToTask"), (None, "tasks/resubscribe")):
        [event], _ = await sse(http, url(gw), method, {"id": "no-such-task"}, version=version)
        assert event["error"]["code"] == -32001, event
        assert event["id"] == "s1"


async def test_a_part_of_a_kind_a2a_does_not_have_is_refused(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    for version, method in (("1.0", "SendMessage"), ("0.3", "message/send")):
        msg = message("x", version=version)
        msg["parts"] = [{"type": "unsupported_type", "text": "guess me"}]
        answer = await rpc(http, url(gw), method, {"message": msg}, version=version)
        assert answer["error"]["code"] == -32602, answer
        assert "unsupported_type" in answer["error"]["message"]
