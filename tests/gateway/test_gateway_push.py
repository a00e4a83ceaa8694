"""A2A push notifications: configs made with a send or by the config methods (1.0,
0.3 and REST), every change of the task POSTed to a webhook on loopback in order,
retried from the durable queue while the webhook fails or is down (also across a
gateway restart), dead-lettered when the webhook refuses for good, and webhook
URLs held to public https by default."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import Probe, host_agents, message, rpc, running_gateway
from aiohttp import web

from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService
from actorbus.testing import eventually

FAST = (0.1, 0.2, 0.4, 0.8, 1.6)  # the gateway's push_backoff in these tests


class Webhook:
    """A client's webhook on loopback: records what it takes; can fail on demand
    (``fail`` answers with that status ``failures`` times) or not listen at all."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.taken: list[tuple[dict[str, str], Any]] = []
        self.refused = 0
        self.fail = 503
        self.failures = 0
        self.arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def up(self) -> None:
        async def hook(request: web.Request) -> web.Response:
            if self.failures > 0:
                self.failures -= 1
                self.refused += 1
                return web.Response(status=self.fail)
            self.taken.append((dict(request.headers), await request.json()))
            self.arrived.set()
            return web.Response(status=200)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def down(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def bodies(self, count: int) -> list[Any]:
        await eventually(lambda: len(self.taken) >= count, what=f"{count} notifications")
        return [body for _, body in self.taken]


@pytest.fixture
async def webhook() -> AsyncIterator[Webhook]:
    hook = Webhook()
    await hook.up()
    yield hook
    await hook.down()


@contextlib.asynccontextmanager
async def push_gateway(
    nats_server: EmbeddedServer, ns: str, db: Path, **overrides: Any
) -> AsyncIterator[GatewayService]:
    overrides.setdefault("push_urls", "any")  # the webhook is on loopback
    overrides.setdefault("push_backoff", FAST)
    async with running_gateway(nats_server.url, ns, db, "gw-echo", "gw-streamer", **overrides) as g:
        yield g


@pytest.fixture
async def gw(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> AsyncIterator[GatewayService]:
    await host_agents(await make_system(), Probe())
    async with push_gateway(nats_server, ns, tmp_path / "gw.db") as g:
        yield g


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def send_with_push(text: str, url: str, **config: Any) -> dict[str, Any]:
    return {
        "message": message(text),
        "configuration": {"taskPushNotificationConfig": {"url": url, **config}},
    }


def kinds(bodies: list[Any]) -> list[str]:
    out = []
    for body in bodies:
        [kind] = body.keys()
        state = body[kind].get("status", {}).get("state", "")
        out.append(f"{kind}:{state}" if state else kind)
    return out


async def test_a_send_with_a_config_hears_every_change_in_order(
    gw: GatewayService, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    url = f"{gw.http_url}/a2a/gw-streamer"
    sent = await rpc(http, url, "SendMessage", send_with_push("a b c", webhook.url, token="tk-1"))
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    bodies = await webhook.bodies(5)
    assert kinds(bodies) == [
        "statusUpdate:TASK_STATE_WORKING",
        "artifactUpdate",
        "artifactUpdate",
        "artifactUpdate",
        "statusUpdate:TASK_STATE_COMPLETED",
    ]
    assert {b[next(iter(b))]["taskId"] for b in bodies} == {task["id"]}
    chunks = [b["artifactUpdate"]["artifact"]["parts"][0]["text"] for b in bodies[1:4]]
    assert chunks == ["A", "B", "C"]
    headers = webhook.taken[0][0]
    assert headers["X-A2A-Notification-Token"] == "tk-1"
    assert headers["Content-Type"] == "application/a2a+json"


async def test_config_methods_in_1_0_0_3_and_rest(
    gw: GatewayService, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    url = f"{gw.http_url}/a2a/gw-echo"
    done = await rpc(http, url, "SendMessage", {"message": message("x")})
    task_id = done["result"]["task"]["id"]
    made = await rpc(
        http,
        url,
        "CreateTaskPushNotificationConfig",
        {
            "taskId": task_id,
            "url": webhook.url,
            "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
        },
    )
    config = made["result"]
    assert config["taskId"] == task_id
    assert config["authentication"] == {"scheme": "Bearer", "credentials": "s3cret"}
    got = await rpc(
        http, url, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config["id"]}
    )
    assert got["result"] == config
    # 0.3 names: the same config in 0.3's nested shape, and a second one made there
    old = await rpc(
        http,
        url,
        "tasks/pushNotificationConfig/set",
        {"taskId": task_id, "pushNotificationConfig": {"id": "mine", "url": webhook.url}},
        version=None,
    )
    assert old["result"] == {
        "taskId": task_id,
        "pushNotificationConfig": {"id": "mine", "url": webhook.url},
    }
    listed = await rpc(
        http, url, "tasks/pushNotificationConfig/list", {"id": task_id}, version=None
    )
    assert [c["pushNotificationConfig"]["id"] for c in listed["result"]] == [config["id"], "mine"]
    # REST: the same configs under the task's resource
    rest = f"{url}/tasks/{task_id}/pushNotificationConfigs"
    async with http.get(rest) as resp:
        page = await resp.json()
    assert [c["id"] for c in page["configs"]] == [config["id"], "mine"]
    async with http.delete(f"{rest}/mine") as resp:
        assert resp.status == 200
    async with http.post(rest, json={"url": webhook.url, "token": "t"}) as resp:
        third = await resp.json()
    assert third["taskId"] == task_id
    assert third["token"] == "t"
    gone = await rpc(
        http, url, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config["id"]}
    )
    assert gone["result"] == {}
    left = await rpc(http, url, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert [c["id"] for c in left["result"]["configs"]] == [third["id"]]
    missing = await rpc(
        http, url, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config["id"]}
    )
    assert missing["error"]["code"] == -32602
    nobody = await rpc(http, url, "ListTaskPushNotificationConfigs", {"taskId": "nope"})
    assert nobody["error"]["code"] == -32001


async def test_a_0_3_config_is_sent_the_whole_task(
    gw: GatewayService, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    url = f"{gw.http_url}/a2a/gw-echo"
    params = {
        "message": message("old", version="0.3"),
        "configuration": {"pushNotificationConfig": {"url": webhook.url, "token": "t03"}},
    }
    sent = await rpc(http, url, "message/send", params, version=None)
    bodies = await webhook.bodies(3)  # working, the reply's artifact, completed
    assert [b["kind"] for b in bodies] == ["task", "task", "task"]
    assert [b["status"]["state"] for b in bodies] == ["working", "working", "completed"]
    assert bodies[-1]["id"] == sent["result"]["id"]
    assert bodies[-1]["artifacts"][0]["parts"][0]["text"] == "OLD"


async def test_a_failing_or_absent_webhook_gets_every_notice_once_in_order(
    gw: GatewayService, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    webhook.failures = 3  # 503 three times, then it takes them
    url = f"{gw.http_url}/a2a/gw-streamer"
    await rpc(http, url, "SendMessage", send_with_push("a b", webhook.url))
    bodies = await webhook.bodies(4)
    assert kinds(bodies) == [
        "statusUpdate:TASK_STATE_WORKING",
        "artifactUpdate",
        "artifactUpdate",
        "statusUpdate:TASK_STATE_COMPLETED",
    ]
    assert webhook.refused == 3
    # the webhook is down while the task runs, and comes up later
    await webhook.down()
    webhook.taken.clear()
    await rpc(http, url, "SendMessage", send_with_push("c", webhook.url))
    system = gw.system
    assert system is not None

    async def waiting() -> bool:  # nothing listens: a notice is in hand, awaiting its retry
        return (await system.queue_stats("gateway-push")).in_flight >= 1

    await eventually(waiting, what="a notice waiting for its retry")
    assert webhook.taken == []
    await webhook.up()
    assert kinds(await webhook.bodies(3))[-1] == "statusUpdate:TASK_STATE_COMPLETED"

    async def settled() -> bool:
        stats = await system.queue_stats("gateway-push")
        return stats.pending == 0 and stats.in_flight == 0

    await eventually(settled, what="every notice acked")
    assert len(webhook.taken) == 3  # each once


async def test_notices_wait_in_the_queue_for_the_next_gateway(
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
    webhook: Webhook,
) -> None:
    await host_agents(await make_system(), Probe())
    await webhook.down()
    slow = (30.0,)  # the first gateway would wait 30 s before its retry: it is gone by then
    async with push_gateway(nats_server, ns, tmp_path / "gw.db", push_backoff=slow) as first:
        url = f"{first.http_url}/a2a/gw-echo"
        await rpc(http, url, "SendMessage", send_with_push("kept", webhook.url))
    await webhook.up()
    async with push_gateway(nats_server, ns, tmp_path / "gw.db"):
        bodies = await webhook.bodies(3)
    assert kinds(bodies) == [
        "statusUpdate:TASK_STATE_WORKING",
        "artifactUpdate",
        "statusUpdate:TASK_STATE_COMPLETED",
    ]


async def test_a_webhook_that_refuses_for_good_is_dead_lettered_at_once(
    gw: GatewayService, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    webhook.fail, webhook.failures = 410, 1_000  # Gone
    url = f"{gw.http_url}/a2a/gw-echo"
    sent = await rpc(http, url, "SendMessage", send_with_push("x", webhook.url))
    task_id = sent["result"]["task"]["id"]
    system = gw.system
    assert system is not None
    letters = await eventually(
        lambda: system.dead_letters(f"gateway-push/{task_id}"), what="dead letters"
    )
    assert "answered 410" in letters[0].reason
    assert letters[0].attempts == 1
    assert webhook.taken == []


async def test_webhook_urls_must_be_public_https_by_default(
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    await host_agents(await make_system(), Probe())
    async with push_gateway(nats_server, ns, tmp_path / "gw.db", push_urls="public") as gw:
        url = f"{gw.http_url}/a2a/gw-echo"
        for hook, why in (
            ("http://example.com/hook", "must be https"),
            ("https://127.0.0.1:9/hook", "not a public address"),
            ("https://localhost/hook", "not a public address"),
            ("ftp://example.com/x", "http(s) URL"),
        ):
            refused = await rpc(http, url, "SendMessage", send_with_push("x", hook))
            assert refused["error"]["code"] == -32602, refused
            assert why in refused["error"]["message"]
        # nothing was run for a refused send
        listed = await rpc(http, url, "ListTasks", {})
        assert listed["result"]["tasks"] == []


async def test_without_push_notifications_the_methods_say_so(
    make_system: Any,
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    await host_agents(await make_system(), Probe())
    async with push_gateway(nats_server, ns, tmp_path / "gw.db", push_notifications=False) as gw:
        url = f"{gw.http_url}/a2a/gw-echo"
        async with http.get(f"{url}/.well-known/agent-card.json") as resp:
            assert (await resp.json())["capabilities"]["pushNotifications"] is False
        out = await rpc(http, url, "SendMessage", send_with_push("x", "http://127.0.0.1:9/"))
        assert out["error"]["code"] == -32003
