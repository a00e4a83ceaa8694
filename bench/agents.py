"""Agents: what the framework adds to each step of a run, and to a tool call.

One embedded nats-server (loopback), a scripted OpenAI-compatible model server
(``actorbus.testing.scripted_model``, real HTTP and the real wire format) and,
each round, the variant order reversed every other round:

- ``direct``: the same run written by hand: the official ``openai`` SDK called
  against the scripted server in a loop, the tool called as a local function,
  nothing kept anywhere;
- ``agent``: an :class:`~actorbus.agents.Agent` asked for the run over the bus:
  its state loaded and saved at every step (the run is recorded so it can
  resume), the tool an actor on the bus (a calculator in another system);

each run is one tool call and the final answer: two model calls ("steps"). The
figure is the overhead per step, ``(agent - direct) / 2`` at p50. And a tool
call through the bus (:class:`~actorbus.agents.ActorTool`, arguments as the
model gives them, validated at the actor) against a plain ``ask`` of the same
actor with the typed message.

Goals (medians over rounds): under 2 ms of overhead per step at p50, a tool call
within 1.3x of an ask.

    python bench/agents.py [--rounds 5] [--runs 200] [--calls 2000] [--out bench/results]
                           [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import machine_info, percentile, positive_int, pyplot, report_console, write_report
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.agents import (
    ActorTool,
    Agent,
    AgentTask,
    ChatMessage,
    OpenAIModel,
    ToolContext,
    ToolSpec,
    actor_tools,
)
from actorbus.bus.server import EmbeddedServer
from actorbus.testing.scripted_model import Received, Reply, ScriptedModel, call, say


class Pair(BaseModel):
    a: int
    b: int


class Adder(Actor):
    """Adds two integers."""

    @handler
    async def add(self, pair: Pair) -> int:
        return pair.a + pair.b


def add(a: int, b: int) -> int:
    return a + b


class Summer(Agent):
    instructions = "Add with the tool, then say the sum."
    tools = (actor_tools("adder"),)
    memory_window = 2  # each run's requests as small as the direct side's, nearly


def script(received: Received) -> Reply:
    """A tool call first, then the answer (what every run of both sides asks)."""
    last = received.messages[-1]
    if last.get("role") == "tool":
        return say(f"The sum is {last['content']}.")
    return call("adder_add", a=2, b=40)


def stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"p50": percentile(s, 0.5), "p95": percentile(s, 0.95), "p99": percentile(s, 0.99)}


async def direct_runs(client: OpenAIModel, runs: int) -> list[float]:
    """The run by hand: SDK call, local tool, SDK call (µs per run), with the same
    tool offered and the same memory sent as the agent's."""
    took = []
    tools = [ToolSpec(name="adder_add", description="Adds", parameters=Pair.model_json_schema())]
    remembered = [  # the last exchange, as the agent's memory sends it too
        ChatMessage.user("2 + 40?"),
        ChatMessage(role="assistant", content="The sum is 42."),
    ]
    for _ in range(runs):
        started = time.perf_counter()
        messages = [
            ChatMessage.system(Summer.instructions),
            *remembered,
            ChatMessage.user("2 + 40?"),
        ]
        first = await client.complete(messages, tools=tools)
        tool_call = first.message.tool_calls[0]
        result = add(**json.loads(tool_call.arguments))
        messages += [first.message, ChatMessage.tool_result(tool_call, str(result))]
        final = await client.complete(messages, tools=tools)
        assert final.message.content == "The sum is 42."
        took.append((time.perf_counter() - started) * 1e6)
    return took


async def agent_runs(caller: ActorSystem, runs: int, round_no: int) -> list[float]:
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = await caller.ask(f"summer/r{round_no}", AgentTask(prompt="2 + 40?"))
        took.append((time.perf_counter() - started) * 1e6)
        assert answer.text == "The sum is 42.", answer
    return took


async def tool_calls(caller: ActorSystem, n: int) -> dict[str, list[float]]:
    """An ActorTool call and a plain ask of the same actor, alternating (µs)."""
    tool = ActorTool("adder", "Pair", schema=Pair.model_json_schema())
    context = ToolContext(idempotency_key="bench", run_id="bench", agent=caller)
    out: dict[str, list[float]] = {"tool": [], "ask": []}
    for i in range(n):
        for side in ("tool", "ask") if i % 2 else ("ask", "tool"):
            started = time.perf_counter()
            if side == "tool":
                got = await tool.call({"a": 2, "b": 40}, context)
            else:
                got = await caller.ask("adder", Pair(a=2, b=40))
            out[side].append((time.perf_counter() - started) * 1e6)
            assert got == 42
    return out


async def run(a: argparse.Namespace) -> dict[str, Any]:
    console = report_console()
    rounds: list[dict[str, Any]] = []
    async with EmbeddedServer() as server, ScriptedModel(fallback=script) as scripted:
        client = OpenAIModel("scripted", api_key="bench", base_url=scripted.openai_url)
        Summer.model = client
        tools_host = await ActorSystem.connect(server.url, namespace="bench-agents")
        agents_host = await ActorSystem.connect(server.url, namespace="bench-agents")
        caller = await ActorSystem.connect(server.url, namespace="bench-agents")
        try:
            await tools_host.register(Adder)
            await agents_host.register(Summer)
            await tools_host.directory.announced()
            await agent_runs(caller, 5, -1)  # warm: connections, the SDK, activations
            await direct_runs(client, 5)
            for r in range(a.rounds):
                order = ["direct", "agent"] if r % 2 == 0 else ["agent", "direct"]
                got: dict[str, Any] = {}
                for side in order:
                    if side == "direct":
                        got[side] = stats(await direct_runs(client, a.runs))
                    else:
                        got[side] = stats(await agent_runs(caller, a.runs, r))
                calls = await tool_calls(caller, a.calls)
                got["tool"], got["ask"] = stats(calls["tool"]), stats(calls["ask"])
                rounds.append(got)
                console.print(
                    f"round {r + 1}/{a.rounds}: direct {got['direct']['p50']:.0f} µs, agent "
                    f"{got['agent']['p50']:.0f} µs per run (p50); tool call "
                    f"{got['tool']['p50']:.0f} µs, ask {got['ask']['p50']:.0f} µs",
                    highlight=False,
                )
        finally:
            for system in (caller, agents_host, tools_host):
                await system.close()
            await client.close()
    return {"rounds": rounds}


def summary(rounds: list[dict[str, Any]]) -> dict[str, float]:
    per_step = [(r["agent"]["p50"] - r["direct"]["p50"]) / 2 for r in rounds]
    per_step95 = [(r["agent"]["p95"] - r["direct"]["p95"]) / 2 for r in rounds]
    tool = [r["tool"]["p50"] / r["ask"]["p50"] for r in rounds]
    return {
        "overhead_per_step_p50_ms": statistics.median(per_step) / 1000,
        "overhead_per_step_p95_ms": statistics.median(per_step95) / 1000,
        "direct_run_p50_ms": statistics.median(r["direct"]["p50"] for r in rounds) / 1000,
        "agent_run_p50_ms": statistics.median(r["agent"]["p50"] for r in rounds) / 1000,
        "tool_vs_ask_p50": statistics.median(tool),
        "tool_p50_us": statistics.median(r["tool"]["p50"] for r in rounds),
        "ask_p50_us": statistics.median(r["ask"]["p50"] for r in rounds),
    }


def _plot(data: dict[str, Any]) -> Any:
    def plot(path: Path) -> bool:
        plt = pyplot()
        if plt is None:
            return False
        rounds = data["rounds"]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, sides, title in (
            (axes[0], ("direct", "agent"), "one run: 2 model calls + 1 tool (ms)"),
            (axes[1], ("ask", "tool"), "one call of the tool actor (µs)"),
        ):
            scale = 1000 if sides[0] == "direct" else 1
            for q, color in (("p50", "#2a7"), ("p95", "#27a"), ("p99", "#a72")):
                meds = [statistics.median(r[s][q] for r in rounds) / scale for s in sides]
                ax.plot(sides, meds, marker="o", color=color, label=q)
            ax.set_title(title)
            ax.legend()
        fig.suptitle("agents: the framework's cost (median of rounds)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True

    return plot


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--runs", type=positive_int, default=200)
    p.add_argument("--calls", type=positive_int, default=2000)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    p.add_argument("--quick", action="store_true", help="a smoke run: small numbers")
    a = p.parse_args()
    if a.quick:
        a.rounds, a.runs, a.calls = 2, 20, 200
    console = report_console()
    data = asyncio.run(run(a))
    data["summary"] = s = summary(data["rounds"])
    data["machine"] = machine_info()
    data["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    data["args"] = {k: v for k, v in vars(a).items() if k != "out"}
    verdict = (
        f"agent overhead per step: p50 {s['overhead_per_step_p50_ms']:.2f} ms (target < 2), "
        f"p95 {s['overhead_per_step_p95_ms']:.2f} ms; a run {s['agent_run_p50_ms']:.2f} ms vs "
        f"{s['direct_run_p50_ms']:.2f} ms by hand; tool call {s['tool_vs_ask_p50']:.2f}x an "
        f"ask (target <= 1.3: {s['tool_p50_us']:.0f} vs {s['ask_p50_us']:.0f} µs)"
    )
    write_report(console, a.out, "agents", data, _plot(data), verdict)


if __name__ == "__main__":
    main()
