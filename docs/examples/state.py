"""Declared state: an account keeps its balance across passivation and a restart
of every process (a crash too: tests/state/test_state_faults.py kills hosts)."""

import asyncio
import tempfile

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class Deposit(BaseModel):
    amount: int


class AccountState(BaseModel):
    balance: int = 0
    deposits: int = 0


class Account(Actor):
    keyed = True
    idle_timeout = 0.5  # passivated quickly, to show it
    state: AccountState

    @handler
    async def deposit(self, d: Deposit) -> int:
        self.state.balance += d.amount
        self.state.deposits += 1
        return self.state.balance


async def main() -> None:
    store = tempfile.mkdtemp()  # the broker's JetStream store, kept across its restarts
    async with ActorSystem.start(store_dir=store) as first:
        await first.register(Account)
        print("deposit:", await first.ask("account/alice", Deposit(amount=5)))
        await asyncio.sleep(1.5)  # idle: passivated, its memory gone
        print("hosted after idling:", "account/alice" in first.local_actors())
        print("after passivation:", await first.ask("account/alice", Deposit(amount=7)))
    # Every process is gone, the broker too; a new one starts on the same store.
    async with ActorSystem.start(store_dir=store) as second:
        await second.register(Account)
        print("after a full restart:", await second.ask("account/alice", Deposit(amount=1)))


if __name__ == "__main__":
    asyncio.run(main())
