"""A SIGKILL drill for declared state: thousands of durable deposits, three host kills.

One embedded nats-server (loopback, JetStream file storage). A host process
(``tests/_host.py``) serves a vault actor whose durable turn adds each deposit to
its declared state and durably tells a ledger about it, in one commit
(``tests/_actors.py:Vault``); the ledger runs in this process and records every
send it gets. ``--deposits`` deposits are sent; in the ``kills`` run the host is
SIGKILLed ``--kills`` times at random moments while they stream in and started
again each time. The ``calm`` run, the baseline, is the same with no kill. Runs
alternate, ``--rounds`` of each.

Checked every run: the balance is exactly the sum of the deposits, the vault
counted each deposit once, and the ledger got each send exactly once (none
missing, none twice). Measured: the time until everything was handled, and per
kill the time from the new host's start to the next deposit handled.

    python bench/state_drill.py [--deposits 10000] [--kills 3] [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import machine_info, positive_int, pyplot, report_console, write_report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _actors import Balance, Deposit, Ledger
from _util import run_host

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer, ServerConfig

ACK_WAIT = 1.0  # a killed host's message in hand comes back this fast


async def _drill(url: str, n: int, kills: int, seed: int, console: Any) -> dict[str, Any]:
    ns = f"drill{uuid.uuid4().hex[:8]}"
    rng = random.Random(seed)
    amounts = [1 + i % 5 for i in range(n)]
    got: list[int] = []
    changed = asyncio.Event()
    recoveries: list[float] = []
    async with ActorSystem.connect(url, namespace=ns, registry=False) as system:
        await system.spawn(Ledger, "l", got=got, changed=changed)
        started = time.perf_counter()

        async def deposits() -> None:
            for i, amount in enumerate(amounts):
                await system.tell("st-vault/a", Deposit(n=i, amount=amount), durable=True)

        sending = asyncio.create_task(deposits())
        target = "_actors:Vault"
        # Killed when a random share of the deposits was handled: mid-stream whatever
        # the machine's speed, at a moment no turn is aligned with.
        kill_at = sorted(rng.sample(range(n // 10, n * 9 // 10), kills))
        for k, at in enumerate(kill_at):
            async with run_host(target, url, ns, "a", ack_wait=ACK_WAIT) as host:
                if k:
                    recoveries.append(await _next_handled(got, changed, time.perf_counter()))
                await _handled(got, changed, at)
                host.proc.send_signal(signal.SIGKILL)
                await host.proc.wait()
                console.print(f"  kill {k + 1}/{kills}: {len(set(got)):,} of {n:,} handled")
        async with run_host(target, url, ns, "a", ack_wait=ACK_WAIT):
            if kills and len(set(got)) < n:
                recoveries.append(await _next_handled(got, changed, time.perf_counter()))
            await sending
            await _handled(got, changed, n)
            elapsed = time.perf_counter() - started
            state = await system.ask("st-vault/a", "?", intent="balance", returns=Balance)
    repeats = len(got) - len(set(got))
    return {
        "deposits": n,
        "kills": kills,
        "seconds": elapsed,
        "balance_exact": state.balance == sum(amounts),
        "counted_once": state.seen == n,
        "sends_missing": n - len(set(got)),
        "sends_twice": repeats,
        "recovery_s": recoveries,
    }


async def _handled(got: list[int], changed: asyncio.Event, count: int) -> None:
    """Until the ledger got ``count`` different deposits' sends."""
    async with asyncio.timeout(600):
        while len(set(got)) < count:
            changed.clear()
            await changed.wait()


async def _next_handled(got: list[int], changed: asyncio.Event, since: float) -> float:
    """Seconds from ``since`` until the ledger got its next send."""
    before = len(got)
    async with asyncio.timeout(120):
        while len(got) == before:
            changed.clear()
            await changed.wait()
    return time.perf_counter() - since


async def run(a: argparse.Namespace) -> dict[str, Any]:
    console = report_console()
    runs: list[dict[str, Any]] = []
    import tempfile

    with tempfile.TemporaryDirectory() as store:
        async with EmbeddedServer(ServerConfig(store_dir=Path(store))) as server:
            for r in range(a.rounds):
                for kills in (0, a.kills) if r % 2 == 0 else (a.kills, 0):
                    label = "calm" if kills == 0 else f"{kills} kills"
                    console.print(f"round {r + 1}/{a.rounds}, {label}: {a.deposits:,} deposits")
                    got = await _drill(server.url, a.deposits, kills, r, console)
                    console.print(f"  {got}", highlight=False)
                    runs.append(got)
    return {"runs": runs}


def _plot(data: dict[str, Any]) -> Any:
    def plot(path: Path) -> bool:
        plt = pyplot()
        if plt is None:
            return False
        calm = [r["seconds"] for r in data["runs"] if not r["kills"]]
        killed = [r["seconds"] for r in data["runs"] if r["kills"]]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.bar(["calm", "host killed"], [statistics.median(calm), statistics.median(killed)])
        ax.set_title(f"{data['runs'][0]['deposits']:,} durable deposits: seconds to handle all")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True

    return plot


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deposits", type=positive_int, default=10_000)
    p.add_argument("--kills", type=positive_int, default=3)
    p.add_argument("--rounds", type=positive_int, default=2)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    p.add_argument("--quick", action="store_true", help="a smoke run: 500 deposits, 1 round")
    a = p.parse_args()
    if a.quick:
        a.deposits, a.rounds = 500, 1
    console = report_console()
    data = asyncio.run(run(a))
    data["machine"] = machine_info()
    data["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    data["args"] = {k: v for k, v in vars(a).items() if k != "out"}
    runs = data["runs"]
    exact = all(
        r["balance_exact"] and r["counted_once"] and not r["sends_missing"] + r["sends_twice"]
        for r in runs
    )
    calm = statistics.median(r["seconds"] for r in runs if not r["kills"])
    killed = statistics.median(r["seconds"] for r in runs if r["kills"])
    recoveries = [s for r in runs for s in r["recovery_s"]]
    verdict = (
        f"{'EXACT' if exact else 'NOT EXACT'} in every run (balance, counted once, each send "
        f"once); all handled in {killed:.1f} s with {a.kills} kills vs {calm:.1f} s calm "
        f"({killed / calm:.2f}x); recovery after a restart median "
        f"{statistics.median(recoveries) if recoveries else 0:.2f} s"
    )
    write_report(console, a.out, "state_drill", data, _plot(data), verdict)
    if not exact:
        sys.exit(1)


if __name__ == "__main__":
    main()
