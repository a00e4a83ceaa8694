"""Actors used by tests that host them in another OS process (see _host.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from pydantic import BaseModel

from actorbus import Actor, handler


class WhoAsk(BaseModel):
    n: int


class WhoCount(BaseModel):
    n: int


class WhoReply(BaseModel):
    n: int
    pid: int
    instance: int


class Whoami(Actor):
    """Answers with its process id and instance id, so a test can tell replicas apart."""

    type_name = "whoami"

    @handler
    async def who(self, q: WhoAsk) -> WhoReply:
        return WhoReply(n=q.n, pid=os.getpid(), instance=id(self))

    @handler
    async def fail(self, q: dict) -> dict:  # type: ignore[type-arg]
        raise ValueError(f"remote failure {q.get('why')}")

    @handler
    async def count(self, req: WhoCount) -> AsyncIterator[WhoReply]:
        for i in range(req.n):
            yield WhoReply(n=i, pid=os.getpid(), instance=id(self))


class Tick(BaseModel):
    n: int


class Tally(Actor):
    """A durable, idempotent actor that reports each message it handled on a plain
    subject, so a test in another process can count handlings across kills."""

    durable = True
    idempotent = True

    @handler
    async def tick(self, t: Tick) -> None:
        # Its effect goes through actorbus (held until the handler succeeded, so
        # exactly once); the plain publish is only a progress signal for the test.
        await self.tell("sink/k", t, durable=True)
        await self.system.nc.publish(f"{self.system.namespace}.test.handled", str(t.n).encode())


class Doomed(Actor):
    """A durable actor whose process dies (SIGKILL, no goodbye) on tick 1: the crash
    loop a poison message causes; other ticks are reported on a plain subject."""

    durable = True

    @handler
    async def tick(self, t: Tick) -> None:
        if t.n == 1:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        await self.system.nc.publish(f"{self.system.namespace}.test.handled", str(t.n).encode())


class Bump(BaseModel):
    by: int = 1


class Bumped(BaseModel):
    total: int
    pid: int
    system: str


class VCounter(Actor):
    """A keyed (virtual) actor: one live instance per key across every process."""

    keyed = True
    durable = True

    def __init__(self) -> None:
        self.total = 0

    @handler
    async def bump(self, b: Bump) -> Bumped:
        self.total += b.by
        return Bumped(total=self.total, pid=os.getpid(), system=self.system.system_id)


class Forward(Actor):
    """Passes a question on to whoami/w: the middle hop of a 3-process flow."""

    @handler
    async def who(self, q: WhoAsk) -> WhoReply:
        reply: WhoReply = await self.ask("whoami/w", q, returns=WhoReply)
        return reply


class Sluggish(Actor):
    """Takes a millisecond per message (without blocking the loop) and can say how
    many it handled and how many its mailbox dropped."""

    type_name = "sluggish"
    mailbox_size = 2_000
    mailbox_bytes = 4 * 1024 * 1024

    def __init__(self) -> None:
        self.handled = 0

    @handler
    async def take(self, data: bytes) -> None:
        import asyncio

        self.handled += 1
        await asyncio.sleep(0.001)

    @handler(intent="stats")
    async def stats(self, _: dict[str, int]) -> dict[str, int]:
        dropped = self.system.runtime.mailboxes.dropped.get(self.address, 0)
        return {"handled": self.handled, "dropped": dropped, "rss_kb": _rss_kb()}


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Blocking(Sluggish):
    """Blocks the event loop for a millisecond per message (what not to do)."""

    type_name = "blocking"

    @handler
    async def take(self, data: bytes) -> None:
        import time

        self.handled += 1
        time.sleep(0.001)  # noqa: ASYNC251 - blocking on purpose


# -- state that commits with a durable turn (tests/state/test_state_faults.py) --


class Deposit(BaseModel):
    n: int
    amount: int


class Balance(BaseModel):
    balance: int = 0
    seen: int = 0


class Vault(Actor):
    """A durable account with declared state: each deposit adds to the balance and
    durably tells the ledger (``st-ledger/l``) about it, in one turn."""

    type_name = "st-vault"
    durable = True
    state: Balance

    @handler
    async def deposit(self, d: Deposit) -> int:
        self.state.balance += d.amount
        self.state.seen += 1
        await self.tell("st-ledger/l", d, durable=True)
        return self.state.balance

    @handler(intent="balance", durable=False)
    async def read(self, _: str) -> Balance:
        return self.state


class Ledger(Actor):
    """Where the vault's sends arrive: every one is recorded, repeats included."""

    type_name = "st-ledger"
    durable = True

    def __init__(self, got: list[int], changed: asyncio.Event) -> None:
        self.got, self.changed = got, changed

    @handler
    async def deposit(self, d: Deposit) -> None:
        self.got.append(d.n)
        self.changed.set()


def _kill_at(spec: str) -> None:
    """ACTORBUS_TEST_KILL_AT=point:n: this process SIGKILLs itself the n-th time a
    durable turn reaches ``point`` (actorbus/actors/faults.py)."""
    import signal

    from actorbus.actors import faults

    point, _, nth = spec.partition(":")
    hits = {"n": 0}

    def hook(reached: str) -> None:
        if reached == point:
            hits["n"] += 1
            if hits["n"] >= int(nth):
                os.kill(os.getpid(), signal.SIGKILL)

    faults.install(hook)


if os.environ.get("ACTORBUS_TEST_KILL_AT"):
    _kill_at(os.environ["ACTORBUS_TEST_KILL_AT"])


class Count(BaseModel):
    count: int = 0


class Counted(Actor):
    """An actor with declared state that counts the bumps it was sent."""

    type_name = "counted"
    state: Count

    @handler(intent="bump")
    async def bump(self, _: str) -> int:
        self.state.count += 1
        return self.state.count


# -- reminders (tests/state/test_reminders.py) ----------------------------------


class Nudge(BaseModel):
    note: str = ""


class Nudges(BaseModel):
    notes: list[str] = []
    keys: list[str] = []


class Nudged(Actor):
    """Keeps every reminder firing it got (the note and its idempotency key), and
    sets, cancels and lists its reminders when asked."""

    type_name = "rm-nudged"
    state: Nudges

    @handler(durable=True)
    async def nudge(self, n: Nudge) -> None:
        self.state.notes.append(n.note)
        self.state.keys.append(self.envelope.context.idempotency_key or "")

    @handler(intent="remind")
    async def set_reminder(self, spec: dict[str, Any]) -> str:
        name = spec["name"]
        when = {k: spec[k] for k in ("after", "every") if k in spec}
        reminder = await self.remind(name, Nudge(note=name), **when)
        return reminder.schedule

    @handler(intent="cancel")
    async def cancel(self, name: str) -> bool:
        return await self.cancel_reminder(name)

    @handler(intent="reminders")
    async def reminders(self, _: str) -> list[str]:
        return [r.name for r in await self.list_reminders()]

    @handler(intent="nudges")
    async def nudges(self, _: str) -> Nudges:
        return self.state


class Ticker(Actor):
    """Starts an in-memory timer on its first message; passivated when idle."""

    type_name = "rm-ticker"
    idle_timeout = 0.5
    ticks: ClassVar[dict[str, int]] = {}
    timers: ClassVar[dict[str, Any]] = {}

    async def on_start(self) -> None:
        Ticker.timers[self.key] = self._timer_set()

    @handler(intent="start")
    async def start(self, seconds: str) -> None:
        self.every(float(seconds), self.tick)

    @handler(intent="stop")
    async def stop(self, name: str) -> bool:
        return self.cancel_timer(name)

    async def tick(self) -> None:
        Ticker.ticks[self.key] = Ticker.ticks.get(self.key, 0) + 1
