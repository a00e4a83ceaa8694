"""The model-backed protocol router: a model's choice through the official SDK
(against the scripted server), held to the feature model's hard needs, with the
spec-only router wherever the model cannot answer."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from actorbus.agents import ModelRouter, ModelSettings, OpenAIModel
from actorbus.services.router import Module, select
from actorbus.testing.scripted_model import Received, Reply, ScriptedModel, fail, say

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "router"
SECRET_LINE = Module(
    id="1",
    name="Secret Line",
    tasks=(
        "Identify every peer by its DID document before the first message.",
        "Encrypt every exchange end to end.",
    ),
)
STATUS_FEED = Module(id="1", name="Status Feed", tasks=("Stream progress updates to the UI.",))


def router(server: ScriptedModel) -> ModelRouter:
    settings = ModelSettings("m-router", temperature=0.0, max_retries=0, timeout=5)
    return ModelRouter(OpenAIModel(settings, api_key="test", base_url=server.openai_url))


def choice(protocol: str, *evidence: str, rationale: str = "because") -> Reply:
    return say(
        json.dumps({"protocol": protocol, "evidence": list(evidence), "rationale": rationale})
    )


async def test_the_models_choice_decides_with_its_evidence_quoted_from_the_module(
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.script(choice("A2A", "Stream progress updates", "a phrase it made up"))
    r = router(scripted_model)
    try:
        decision = await r.select(STATUS_FEED, "A build service reports to its dashboard.")
    finally:
        await r.close()
    assert (decision.selected_protocol, decision.decided_by) == ("A2A", "model")
    assert decision.evidence_spans == ["Stream progress updates"]  # only what the module says
    assert decision.rationale == "because"
    (sent,) = scripted_model.requests
    assert sent.body["temperature"] == 0.0
    system, user = sent.messages
    assert "HARD" in system["content"]
    assert "ANP native" in system["content"]  # the feature model, as facts
    assert json.loads(user["content"])["module"] == "Status Feed"


async def test_a_choice_that_lacks_a_hard_need_is_refused_for_the_spec_only_one(
    scripted_model: ScriptedModel,
) -> None:
    """DID identities and end-to-end encryption are hard needs: a protocol without
    them is never chosen, whatever the model says."""
    scripted_model.script(choice("A2A"))
    r = router(scripted_model)
    try:
        decision = await r.select(SECRET_LINE)
    finally:
        await r.close()
    assert decision.selected_protocol == select(SECRET_LINE).selected_protocol == "ANP"
    assert decision.decided_by.startswith("spec-only (the model chose A2A, which lacks")


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (fail(500), "the model failed"),
        (say("ANP, I think"), "the model failed"),  # not the structured answer asked for
        (choice("MQTT"), "the model named 'MQTT', not a protocol"),
    ],
    ids=["error", "not-json", "unknown-protocol"],
)
async def test_when_the_model_cannot_answer_the_spec_only_router_decides(
    scripted_model: ScriptedModel, reply: Reply, why: str
) -> None:
    scripted_model.script(reply)
    r = router(scripted_model)
    try:
        decision = await r.select(SECRET_LINE)
    finally:
        await r.close()
    floor = select(SECRET_LINE)
    assert decision.selected_protocol == floor.selected_protocol
    assert decision.evidence_spans == floor.evidence_spans
    assert decision.decided_by.startswith(f"spec-only ({why}")


def by_keyword(received: Received) -> Reply:
    """A stand-in model for a whole file: ANP where the module speaks of DIDs."""
    module = json.loads(received.messages[-1]["content"])
    text = " ".join([module["module"], *module["tasks"]]).lower()
    return choice("ANP" if "did" in text.split() else "A2A")


async def test_route_eval_with_a_model_scores_its_decisions(tmp_path: Path) -> None:
    """`actorbus route eval FILE --model`, from the shell, on the environment's
    model (here the scripted server as an OpenAI-compatible one)."""
    out = tmp_path / "result.json"
    async with ScriptedModel(fallback=by_keyword) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.openai_url,
            "OPENAI_API_KEY": "test",
            "OPENAI_MODEL": "m-router",
        }
        env.pop("ANTHROPIC_API_KEY", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "actorbus",
            "route",
            "eval",
            str(FIXTURES / "heldout_scenarios.json"),
            "--model",
            "--json-out",
            str(out),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        said, _ = await asyncio.wait_for(proc.communicate(), 120)
    text = said.decode()
    assert proc.returncode == 0, text
    assert "asking m-router about 16 modules" in text
    result = json.loads(out.read_text())
    assert result["router"]["model"] == "m-router"
    # the stand-in says A2A where a module's hard needs rule it out: refused, and said
    refused = result["router"]["spec_only_fallbacks"]
    assert refused > 0
    assert f"{refused} of 16 modules fell back to the spec-only router" in text
    assert result["overall"]["modules"] == 16
    assert len(server.requests) == 16
    assert all(r.body["temperature"] == 0.0 for r in server.requests)


async def test_a_model_that_is_not_there_is_asked_three_times_not_once_per_module(
    scripted_model: ScriptedModel,
) -> None:
    """A whole file against a model that keeps failing: three calls, then the
    spec-only router for the rest without waiting out more retries."""
    from actorbus.services.router import read_scenarios

    scripted_model.fallback = lambda _received: fail(503)
    scenarios = read_scenarios(FIXTURES / "heldout_scenarios.json")
    r = router(scripted_model)
    try:
        decisions = [d for ds in await r.decide(scenarios) for d in ds]
    finally:
        await r.close()
    assert len(scripted_model.requests) == 3
    assert len(decisions) == 16
    assert all(d.decided_by.startswith("spec-only (the model failed") for d in decisions)
    assert [d.selected_protocol for d in decisions] == [
        select(m, s.description).selected_protocol for s in scenarios for m in s.modules
    ]
