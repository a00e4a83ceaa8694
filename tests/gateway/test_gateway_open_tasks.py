"""An actor keeps a task open (it replies ``Working``) and finishes it later with
``GatewayTask``: a client returns at once, lists and follows the working task, a
blocking send waits (up to the ask timeout), a question goes to the client and
its answer runs the actor again, a cancel ends it (the actor's next update is
refused), and a restarted gateway still takes the actor's updates."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import message, rpc, running_gateway, sse
from _util import WAIT

from actorbus import Actor, ActorBusError, ActorSystem, handler
from actorbus.bus.server import EmbeddedServer
from actorbus.services.gateway import GatewayService, GatewayTask, Working
from actorbus.testing import eventually


class Reporter(Actor):
    """Takes a report request, keeps its task open, and hands the task to the test
    (which plays the actor's later work); an answer to its question completes it."""

    type_name = "gw-reporter"

    def __init__(self, jobs: asyncio.Queue[GatewayTask]) -> None:
        self.jobs = jobs

    @handler
    async def report(self, text: str) -> Working | str:
        if text.startswith("answer:"):  # the client's answer to the job's question
            return f"report in {text.removeprefix('answer:')}"
        if text.startswith("more:"):  # a follow-up to an open task: kept open again
            return Working(message=f"also {text.removeprefix('more:')}")
        await self.jobs.put(GatewayTask.of(self))
        return Working(message=f"queued {text}")


@pytest.fixture
async def jobs(make_system: Any) -> asyncio.Queue[GatewayTask]:
    queue: asyncio.Queue[GatewayTask] = asyncio.Queue()
    system: ActorSystem = await make_system()
    await system.spawn(Reporter, "1", jobs=queue)
    return queue


@pytest.fixture
async def gw(
    jobs: asyncio.Queue[GatewayTask], nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> Any:
    async with running_gateway(
        nats_server.url, ns, tmp_path / "gw.db", "gw-reporter", ask_timeout=0.5
    ) as g:
        yield g


@pytest.fixture
async def http() -> Any:
    async with aiohttp.ClientSession() as s:
        yield s


def url(gw: GatewayService) -> str:
    return f"{gw.http_url}/a2a/gw-reporter"


async def send_now(http: aiohttp.ClientSession, gw: GatewayService, text: str) -> dict[str, Any]:
    params = {"message": message(text), "configuration": {"returnImmediately": True}}
    return (await rpc(http, url(gw), "SendMessage", params))["result"]["task"]


async def next_job(jobs: asyncio.Queue[GatewayTask]) -> GatewayTask:
    return await asyncio.wait_for(jobs.get(), WAIT)


async def held(http: aiohttp.ClientSession, gw: GatewayService, task_id: str) -> Any:
    """The task once the gateway has the actor's Working reply (its status message)."""

    async def now() -> Any:
        task = await state_of(http, gw, task_id)
        return task if "message" in task["status"] else None

    return await eventually(now, what=f"task {task_id} kept open")


async def state_of(http: aiohttp.ClientSession, gw: GatewayService, task_id: str) -> Any:
    return (await rpc(http, url(gw), "GetTask", {"id": task_id}))["result"]


async def test_a_task_kept_open_is_listed_followed_and_finished_later(
    gw: GatewayService, http: aiohttp.ClientSession, jobs: asyncio.Queue[GatewayTask]
) -> None:
    task = await send_now(http, gw, "q3 sales")
    job = await next_job(jobs)
    assert job.task_id == task["id"]
    got = await held(http, gw, task["id"])
    assert got["status"]["state"] == "TASK_STATE_WORKING"
    assert got["status"]["message"]["parts"][0]["text"] == "queued q3 sales"
    listed = await rpc(http, url(gw), "ListTasks", {"status": "TASK_STATE_WORKING"})
    assert [t["id"] for t in listed["result"]["tasks"]] == [task["id"]]

    first = asyncio.Event()  # the task as it is now comes first

    async def on_event(event: Any) -> None:
        first.set()

    following = asyncio.ensure_future(
        sse(http, url(gw), "SubscribeToTask", {"id": task["id"]}, on_event=on_event)
    )
    await asyncio.wait_for(first.wait(), WAIT)
    assert await job.working("half way", result="part one") == "working"
    assert await job.complete("the whole report") == "completed"
    events, _ = await asyncio.wait_for(following, WAIT)
    results = [e["result"] for e in events]
    assert "task" in results[0]
    assert results[1]["artifactUpdate"]["artifact"]["parts"][0]["text"] == "part one"
    assert results[2]["statusUpdate"]["status"]["message"]["parts"][0]["text"] == "half way"
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    done = await state_of(http, gw, task["id"])
    assert [a["parts"][0]["text"] for a in done["artifacts"]] == ["part one", "the whole report"]
    job.grace = 0.2
    with pytest.raises(ActorBusError):  # finished: nobody listens for it any more
        await job.working("too late")


async def test_a_blocking_send_waits_for_the_end_or_the_ask_timeout(
    gw: GatewayService, http: aiohttp.ClientSession, jobs: asyncio.Queue[GatewayTask]
) -> None:
    sending = asyncio.ensure_future(
        rpc(http, url(gw), "SendMessage", {"message": message("blocking")})
    )
    job = await next_job(jobs)
    await job.complete("done while you waited")
    task = (await asyncio.wait_for(sending, WAIT))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "done while you waited"
    # not finished within the gateway's ask timeout (0.5 s here): answered as it is
    slow = await rpc(http, url(gw), "SendMessage", {"message": message("slow")})
    assert slow["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    await (await next_job(jobs)).fail("gave up")


async def test_a_question_goes_to_the_client_and_its_answer_runs_the_actor(
    gw: GatewayService, http: aiohttp.ClientSession, jobs: asyncio.Queue[GatewayTask]
) -> None:
    task = await send_now(http, gw, "q4")
    job = await next_job(jobs)
    assert await job.input_required("which format?") == "input-required"
    asked = await state_of(http, gw, task["id"])
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert asked["status"]["message"]["parts"][0]["text"] == "which format?"
    answer = message("answer:pdf", task_id=task["id"], context_id=task["contextId"])
    done = await rpc(http, url(gw), "SendMessage", {"message": answer})
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["result"]["task"]["artifacts"][-1]["parts"][0]["text"] == "report in pdf"


async def test_a_follow_up_message_to_an_open_task_runs_the_actor_again(
    gw: GatewayService, http: aiohttp.ClientSession, jobs: asyncio.Queue[GatewayTask]
) -> None:
    task = await send_now(http, gw, "q1")
    job = await next_job(jobs)
    await held(http, gw, task["id"])
    more = message("more:charts", task_id=task["id"], context_id=task["contextId"])
    again = await rpc(http, url(gw), "SendMessage", {"message": more})
    assert "result" in again, again
    kept = again["result"]["task"]
    assert kept["id"] == task["id"]
    assert kept["status"]["state"] == "TASK_STATE_WORKING"
    assert kept["status"]["message"]["parts"][0]["text"] == "also charts"
    assert await job.complete("with charts") == "completed"
    history = [m["parts"][0]["text"] for m in (await state_of(http, gw, task["id"]))["history"]]
    assert history == ["q1", "queued q1", "more:charts", "also charts", "with charts"]
    # finished: a further message is refused
    late = message("more:x", task_id=task["id"], context_id=task["contextId"])
    refused = await rpc(http, url(gw), "SendMessage", {"message": late})
    assert refused["error"]["code"] == -32004


async def test_a_canceled_task_refuses_its_actors_updates(
    gw: GatewayService, http: aiohttp.ClientSession, jobs: asyncio.Queue[GatewayTask]
) -> None:
    task = await send_now(http, gw, "never mind")
    job = await next_job(jobs)
    await held(http, gw, task["id"])
    canceled = await rpc(http, url(gw), "CancelTask", {"id": task["id"]})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    job.grace = 0.2
    with pytest.raises(ActorBusError):
        await job.complete("too late")
    assert (await state_of(http, gw, task["id"]))["status"]["state"] == "TASK_STATE_CANCELED"


async def test_a_restarted_gateway_takes_the_updates_of_open_tasks(
    jobs: asyncio.Queue[GatewayTask],
    nats_server: EmbeddedServer,
    ns: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    db = tmp_path / "gw.db"
    async with running_gateway(nats_server.url, ns, db, "gw-reporter") as first:
        task = await send_now(http, first, "across a restart")
        job = await next_job(jobs)
        await held(http, first, task["id"])
    async with running_gateway(nats_server.url, ns, db, "gw-reporter") as second:
        kept = await state_of(http, second, task["id"])
        assert kept["status"]["state"] == "TASK_STATE_WORKING"  # not failed by the restart
        assert await job.complete("finished anyway") == "completed"
        done = await state_of(http, second, task["id"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"][0]["text"] == "finished anyway"


async def test_a_message_not_from_a_gateway_has_no_task(make_system: Any) -> None:
    class Plain(Actor):
        type_name = "plain-reporter"

        @handler
        async def report(self, text: str) -> str:
            try:
                GatewayTask.of(self)
            except ActorBusError as e:
                return str(e)
            return "a task?"

    system: ActorSystem = await make_system()
    await system.spawn(Plain, "1")
    said = await system.ask("plain-reporter/1", "hi")
    assert "did not come from a gateway task" in said
