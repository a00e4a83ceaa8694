"""A keyed (virtual) actor: one live account/<key> in the whole namespace,
whichever process a message reaches."""

import asyncio

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Deposit(BaseModel):
    amount: int


class AccountState(BaseModel):
    balance: int = 0


class Account(Actor):
    keyed = True  # at most one live account/<key> in the namespace
    idle_timeout = 300.0  # passivated after 5 idle minutes, reactivated on demand
    state: AccountState  # kept in the store: survives passivation, crashes, redeploys

    @handler
    async def deposit(self, d: Deposit) -> int:
        self.state.balance += d.amount
        return self.state.balance


async def main() -> None:
    async with (
        ActorSystem.start() as host_a,
        ActorSystem.connect(host_a.url) as host_b,  # a second process, say
    ):
        await host_a.register(Account)  # in every process that may host accounts
        await host_b.register(Account)
        print(await host_a.ask("account/alice", Deposit(amount=5)))
        print(await host_b.ask("account/alice", Deposit(amount=7)))  # the same instance
        print(await host_b.ask("account/bob", Deposit(amount=1)))


if __name__ == "__main__":
    asyncio.run(main())
