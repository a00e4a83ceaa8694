"""A state model that changed: version 1 kept whole units, version 2 keeps
cents; migrate_state brings stored version 1 states over as they load."""

import asyncio
from typing import Any

from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler


class UnitsState(BaseModel):
    balance: int = 0


class CentsState(BaseModel):
    cents: int = 0


class AccountV1(Actor):
    type_name = "account"
    state: UnitsState

    @handler
    async def deposit(self, units: dict[str, int]) -> int:
        self.state.balance += units["amount"]
        return self.state.balance


class Account(Actor):  # the next release: the same type, its state in cents
    state: CentsState
    state_version = 2

    @classmethod
    def migrate_state(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        if version == 1:
            return {"cents": data["balance"] * 100}
        return super().migrate_state(data, version)

    @handler
    async def deposit(self, cents: dict[str, int]) -> int:
        self.state.cents += cents["amount"]
        return self.state.cents


async def main() -> None:
    async with ActorSystem.start() as system:
        await system.spawn(AccountV1, "alice")
        print("version 1:", await system.ask("account/alice", {"amount": 5}))
        await system.stop_actor("account/alice")  # a redeploy with the new release
        await system.spawn(Account, "alice")
        print("version 2:", await system.ask("account/alice", {"amount": 25}))


if __name__ == "__main__":
    asyncio.run(main())
