"""Durable agent runs killed for real: the agent's host is a process of its own
(tests/_host.py), SIGKILLed at each step of a run (by its own hook, at the named
points of actors/faults.py) and from outside during the model call and during
the tool call. The run resumes on the restarted host: the model is not asked
again for an answer recorded, the tool's effect happens once (a call repeated
after a crash carries the same idempotency key), and the answer arrives once."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from _agent_actors import Answers, Mailer, Sent
from _util import run_host

from actorbus import ActorSystem
from actorbus.actors import faults
from actorbus.agents import DurableTask
from actorbus.bus.jetstream import DurableSettings
from actorbus.testing import queue_drained
from actorbus.testing.scripted_model import Reply, ScriptedModel, call, say

FAST = DurableSettings(backoff=(0.1, 0.2, 0.4), ack_wait=1.0, reader_lease_ttl=1.0)
RESEARCHER = "_agent_actors:Researcher"


@pytest.fixture
async def bus(make_system: Any) -> ActorSystem:
    """The test's side: the mailer (the tool with an effect) and where answers go."""
    Answers.got.clear()
    Answers.arrived = asyncio.Event()
    Mailer.started, Mailer.pause = None, 0.0
    system = await make_system(durable=FAST)
    await system.register(Mailer)
    await system.register(Answers)
    await system.directory.announced()
    return system


def host(url: str, ns: str, model: ScriptedModel, kill_at: str | None = None) -> Any:
    env = {
        "OPENAI_BASE_URL": model.openai_url,
        "OPENAI_API_KEY": "test",
        "OPENAI_MODEL": "scripted-1",
        "ACTORBUS_TEST_READER_LEASE": "1.0",  # a killed host's reader replaced within 1 s
    }
    if kill_at is not None:
        env["ACTORBUS_TEST_KILL_AT"] = kill_at
    return run_host(RESEARCHER, url, ns, "*", ack_wait=1.0, env=env)


async def mailer(system: ActorSystem) -> Sent:
    """The mailer's state (the tool is called at its bare type address: the
    instance it activates there is ``mailer/default``)."""
    sent: Sent = await system.ask("mailer/default", "", intent="counts", returns=Sent)
    return sent


async def outcome(system: ActorSystem, scripted: ScriptedModel) -> tuple[int, int, int]:
    """(answers told, mail effects, model requests) once the answer arrived."""
    await asyncio.wait_for(Answers.arrived.wait(), 30)
    return len(Answers.got), len((await mailer(system)).effects), len(scripted.requests)


def script(model: ScriptedModel, first: Reply | None = None) -> None:
    model.script(first or call("mailer_send", to="ann", body="report"), say("Mailed."))


async def start_run(system: ActorSystem) -> None:
    await system.tell(
        "researcher/r1",
        DurableTask(prompt="report to ann", reply_to="answers/a"),
        durable=True,
    )


# Every step of a run, in the order a run reaches them: the model's call recorded,
# the tool call begun, its result recorded, the answer recorded but the turn not
# committed, the turn committed (the answer's send not out), the send out (the
# message not acked).
STEPS = (
    faults.MODEL_ANSWERED,
    faults.TOOLS_BEGUN,
    faults.TOOLS_ANSWERED,
    faults.BEFORE_STATE_WRITE,
    faults.AFTER_STATE_WRITE,
    faults.AFTER_SENDS,
)


async def test_a_run_killed_at_every_step_in_turn_resumes_with_each_effect_once(
    nats_server: Any, ns: str, bus: ActorSystem, scripted_model: ScriptedModel
) -> None:
    """One run, its host SIGKILLed at each step in turn (six hosts die, the
    seventh finishes it): two model calls in all, one mail, one answer."""
    script(scripted_model)
    await start_run(bus)
    for point in STEPS:
        async with host(nats_server.url, ns, scripted_model, kill_at=f"{point}:1") as doomed:
            status = await asyncio.wait_for(doomed.proc.wait(), 20)
            assert status == -signal.SIGKILL, f"not killed at {point}: {doomed.stderr_text()}"
    async with host(nats_server.url, ns, scripted_model):
        await outcome(bus, scripted_model)
        await queue_drained(bus, "researcher/r1")  # no repeat can follow now
    await queue_drained(bus, "answers/a")
    sent = await mailer(bus)
    assert (len(Answers.got), len(scripted_model.requests)) == (1, 2)
    assert (len(sent.effects), sent.calls) == (1, 1)  # killed before the call, then after it
    assert Answers.got[0].text == "Mailed."


async def test_a_run_killed_during_the_model_call_asks_again(
    nats_server: Any, ns: str, bus: ActorSystem, scripted_model: ScriptedModel
) -> None:
    held = asyncio.Event()
    scripted_model.script(Reply(text="lost with its host", hold=held))
    script(scripted_model)
    async with host(nats_server.url, ns, scripted_model) as doomed:
        await start_run(bus)
        await scripted_model.wait_requests(1, timeout=20)
        doomed.proc.kill()
        await doomed.proc.wait()
    held.set()
    async with host(nats_server.url, ns, scripted_model):
        told, effects, asked = await outcome(bus, scripted_model)
    assert (told, effects, asked) == (1, 1, 3)  # the lost call, then the run's two


async def test_a_run_killed_during_the_tool_call_does_not_repeat_its_effect(
    nats_server: Any, ns: str, bus: ActorSystem, scripted_model: ScriptedModel
) -> None:
    Mailer.started, Mailer.pause = asyncio.Event(), 1.0
    script(scripted_model)
    async with host(nats_server.url, ns, scripted_model) as doomed:
        await start_run(bus)
        await asyncio.wait_for(Mailer.started.wait(), 20)
        doomed.proc.kill()  # the mail goes out; its answer finds nobody
        await doomed.proc.wait()
    async with host(nats_server.url, ns, scripted_model):
        told, effects, asked = await outcome(bus, scripted_model)
        sent = await mailer(bus)
    assert (told, effects, asked) == (1, 1, 2)
    assert sent.calls == 2  # called again with the same key, and it knew
