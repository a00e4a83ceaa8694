"""An agent whose tools are a Python function and an actor on the bus.

It runs against the scripted model of actorbus.testing, so it runs anywhere:
for a real model, give the agent `OpenAIModel("gpt-4.1-mini")` (or set
OPENAI_API_KEY and OPENAI_MODEL and leave `model` out) and drop the script.
"""

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.agents import Agent, AgentTask, OpenAIModel, actor_tools, tool
from actorbus.testing.scripted_model import ScriptedModel, call, calls, say


class Order(BaseModel):
    item: str
    quantity: int


class Shop(Actor):
    """Takes orders."""

    @handler
    async def order(self, order: Order) -> str:
        return f"order #1: {order.quantity} x {order.item}"


@tool
def price(item: str) -> float:
    """The unit price of an item, in euros."""
    return {"tea": 3.5, "cake": 4.0}.get(item, 0.0)


class Clerk(Agent):
    instructions = "You take orders. Check the price first."
    tools = (price, actor_tools("shop"))  # the shop: any process on the bus


async def main() -> None:
    async with ScriptedModel() as model, ActorSystem.start() as system:
        model.script(  # what the model answers, in turn
            calls(("price", {"item": "tea"}), ("price", {"item": "cake"})),
            call("shop_order", item="tea", quantity=2),
            say("Two teas: 7.0 euros, order #1."),
            say("You ordered two teas."),
        )
        Clerk.model = OpenAIModel("scripted", api_key="-", base_url=model.openai_url)
        await system.register(Shop)
        await system.register(Clerk)

        answer = await system.ask("clerk/ann", AgentTask(prompt="Two teas, please."))
        print(answer.text, f"({answer.steps} model calls)")
        for request in model.requests[1:3]:
            results = [m["content"] for m in request.messages if m["role"] == "tool"]
            print("the model read:", results)

        # The same conversation (clerk/ann's state), its answer streamed.
        tokens = [t async for t in system.stream("clerk/ann", "What did I order?")]
        print("streamed:", tokens)
        print("it remembered:", [m["content"] for m in model.requests[-1].messages[1:]])


if __name__ == "__main__":
    asyncio.run(main())
