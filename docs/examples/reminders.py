"""Reminders: the broker delivers a durable message to an actor at a time, or
again and again, whether or not the actor (or its process) is running then."""

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Issue(BaseModel):
    amount: int


class Overdue(BaseModel):
    pass


class InvoiceState(BaseModel):
    amount: int = 0
    notices: int = 0


two_notices = asyncio.Event()


class Invoice(Actor):
    keyed = True
    idle_timeout = 0.3  # passivated between notices: each one activates it again
    state: InvoiceState

    @handler
    async def issue(self, issue: Issue) -> str:
        self.state.amount = issue.amount
        await self.remind("overdue", Overdue(), every=1)  # in real life: every few days
        return "issued"

    @handler(durable=True)
    async def overdue(self, _: Overdue) -> None:
        self.state.notices += 1
        print(f"notice {self.state.notices}: {self.address} owes {self.state.amount}")
        if self.state.notices == 2:
            two_notices.set()

    @handler(intent="pay")
    async def pay(self, _: str) -> bool:
        return await self.cancel_reminder("overdue")


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.register(Invoice)
        print(await system.ask("invoice/42", Issue(amount=120)))
        print("reminders:", [r.schedule for r in await system.reminders.list("invoice/42")])
        await asyncio.wait_for(two_notices.wait(), 30)
        print("paid, reminder cancelled:", await system.ask("invoice/42", "", intent="pay"))
        print("reminders:", await system.reminders.list("invoice/42"))


if __name__ == "__main__":
    asyncio.run(main())
