"""Ask one actor from a process of its own and print the reply's trace as JSON.

Usage: python tests/_ask.py url namespace address n [prompt]

With ``prompt``, the actor is an agent and is asked an ``AgentTask``.

Used to start a traced flow from a third process (tracing follows the
environment: ACTORBUS_TRACE_DIR, OTEL_*).
"""

from __future__ import annotations

import asyncio
import json
import sys

from _actors import WhoAsk

from actorbus import ActorSystem


async def main(url: str, namespace: str, address: str, n: int, prompt: str | None) -> None:
    from opentelemetry import trace

    message: object = WhoAsk(n=n)
    if prompt is not None:
        from actorbus.agents import AgentTask

        message = AgentTask(prompt=prompt)
    trace_id = None
    async with await ActorSystem.connect(url, namespace=namespace) as system:
        tracing = system.telemetry.tracing
        if tracing:  # one root span over the flow, so its trace id can be printed
            with trace.get_tracer("tests").start_as_current_span("flow") as root:
                reply = await system.ask(address, message, timeout=30)
            trace_id = format(root.get_span_context().trace_id, "032x")
        else:
            reply = await system.ask(address, message, timeout=30)
    out = {"tracing": tracing, "trace_id": trace_id, "reply": reply}
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    url, namespace, address, n = sys.argv[1:5]
    prompt = sys.argv[5] if len(sys.argv) > 5 else None
    asyncio.run(main(url, namespace, address, int(n), prompt))
