"""Durable delivery: a message told while its actor is down waits in JetStream,
and an idempotency key that was handled is not handled again."""

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Charge(BaseModel):
    order: str
    cents: int


class Ping(BaseModel):
    pass


class Billing(Actor):
    durable = True  # the default of its handlers: they read its JetStream queue
    idempotent = True  # a handled idempotency_key is not handled again
    charged: asyncio.Queue[str] = asyncio.Queue()

    @handler
    async def charge(self, c: Charge) -> None:
        await self.charged.put(f"charged {c.order}: {c.cents} cents")

    @handler(durable=False)  # per handler: this intent stays fire and forget
    async def ping(self, p: Ping) -> None: ...


async def main() -> None:
    async with ActorSystem.start() as system:
        system.learn(Billing)  # senders that know the type send its intents durably
        # Nobody hosts billing/eu yet: each tell returns once JetStream stored it.
        await system.tell("billing/eu", Charge(order="17", cents=500), idempotency_key="o-17")
        await system.tell("billing/eu", Charge(order="17", cents=500), idempotency_key="o-17")
        await system.tell("billing/eu", Charge(order="18", cents=250), idempotency_key="o-18")
        print("queued:", (await system.queue_stats("billing/eu")).pending)

        await system.spawn(Billing, "eu")  # it gets its queue, in order
        print(await Billing.charged.get())
        print(await Billing.charged.get())
        stored = [env.context.idempotency_key async for env in system.history(address="billing/eu")]
        print("history:", stored)


if __name__ == "__main__":
    asyncio.run(main())
