"""A research team: a planner asks several readers at once, an aggregator merges.

The agents come from ``actorbus.demo`` (``actorbus demo`` runs the full show with
streaming and pub/sub); here they get documents of our own, to show that
agents are configured by the arguments they are spawned with::

    python examples/research_team.py "Where do penguins live?"
"""

from __future__ import annotations

import asyncio
import sys

from actorbus import ActorSystem
from actorbus.demo import Aggregator, Document, Planner, PlanResult, Question, Reader

LIBRARY = [
    Document(
        title="Birds of the south",
        sentences=[
            "Penguins live in the southern hemisphere, mostly around Antarctica.",
            "Albatrosses glide for hours without flapping their wings.",
        ],
    ),
    Document(
        title="Zoo guide",
        sentences=[
            "Our penguins live in a cold enclosure next to the seals.",
            "Feeding time for the seals is at noon.",
        ],
    ),
]


async def ask_team(question: str) -> PlanResult:
    async with ActorSystem.start() as system:
        readers = []
        for key, document in enumerate(LIBRARY):
            ref = await system.spawn(Reader, key=str(key), document=document, delay_s=0.1)
            readers.append(ref.address)
        await system.spawn(Aggregator, key="0")
        planner = await system.spawn(Planner, key="0", readers=readers)
        result: PlanResult = await planner.ask(Question(text=question, top_k=2))
        return result


def main() -> None:
    question = " ".join(sys.argv[1:]) or "Where do penguins live?"
    result = asyncio.run(ask_team(question))
    for step in result.steps:
        print(f"{step.agent:<14} {step.duration_ms:6.1f} ms  {step.action}")
    print("\nAnswer:", result.answer.text)


if __name__ == "__main__":
    main()
