"""What every safety probe shares: the actor under attack, the probe record and
its table, a member system of the secured bus, and the tcpdump watermark (for
``bench/safety.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _capture import Capture, unavailable as capture_unavailable
from pydantic import BaseModel
from rich.console import Console

from actorbus import Actor, ActorSystem, SecuritySettings, handler
from actorbus.security.secure_broker import SecureBroker

MARK = "PII-WATERMARK-4111-1111-1111-1111"
TOPIC = "vault.news"
NS = "safety"
TIMEOUT = 3.0


class Note(BaseModel):
    text: str


class Bulletin(BaseModel):
    text: str


class Vault(Actor):
    type_name = "vault"
    durable = False
    heard = 0  # topic messages taken, by every vault of the process
    wanted = 0
    arrived = asyncio.Event()

    @handler(topic="vault.news")
    async def bulletin(self, bulletin: Bulletin) -> None:
        Vault.heard += 1
        if Vault.heard >= Vault.wanted:
            Vault.arrived.set()

    @handler
    async def keep(self, note: Note) -> str:
        return f"kept {len(note.text)} chars"

    @handler
    async def text(self, text: str) -> str:
        return f"vault got {len(text)} chars"


@dataclass
class Probe:
    target: str  # "bus" or an edge
    dimension: str
    name: str
    blocked: bool
    detail: str


async def quiet(_exc: Exception) -> None:
    """nats-py's default error callback prints a traceback for every refused
    connection; here refusals are the expected outcome."""


class Probes:
    def __init__(self, console: Console) -> None:
        self.results: list[Probe] = []
        self.controls: list[dict[str, Any]] = []  # what must still work: not attacks
        self.skipped: list[dict[str, str]] = []  # probes this machine cannot run, and why
        self.console = console

    def skip(self, target: str, dimension: str, name: str, why: str) -> None:
        self.skipped.append({"target": target, "dimension": dimension, "name": name, "why": why})
        self.console.print(
            f"{target:6} {dimension:12} {name:44} [yellow]skipped[/]: {why}", highlight=False
        )

    def control(self, target: str, name: str, ok: bool, detail: str) -> None:
        self.controls.append(asdict(Probe(target, "control", name, ok, detail[:300])))
        mark = "[green]ok[/]" if ok else "[bold red]BROKEN[/]"
        self.console.print(f"{target:6} {'control':12} {name:44} {mark}", highlight=False)

    def add(self, target: str, dimension: str, name: str, blocked: bool, detail: str) -> None:
        self.results.append(Probe(target, dimension, name, blocked, detail[:300]))
        mark = "[green]blocked[/]" if blocked else "[bold red]NOT BLOCKED[/]"
        self.console.print(f"{target:6} {dimension:12} {name:44} {mark}", highlight=False)

    async def refused(
        self, target: str, dimension: str, name: str, attempt: Callable[[], Awaitable[Any]]
    ) -> None:
        """Blocked when ``attempt`` raises (any refusal) within the timeout."""
        try:
            async with asyncio.timeout(TIMEOUT + 2):
                result = await attempt()
        except Exception as exc:  # the refusal, whatever form it takes
            self.add(target, dimension, name, True, f"{type(exc).__name__}: {exc}")
            return
        self.add(target, dimension, name, False, f"accepted: {result!r}")


async def member(
    url: str, broker: SecureBroker, name: str, *, registry: bool = False
) -> ActorSystem:
    return await ActorSystem.connect(
        url,
        namespace=NS,
        name=name,
        registry=registry,
        connect_options=broker.connect_options(NS, name),
        security=SecuritySettings(home=broker.home / NS),
    )


async def heard(n: int) -> bool:
    """Until the vaults have taken ``n`` topic messages in all (False after the
    timeout): the watermark counts only what was really carried."""
    Vault.wanted = n
    Vault.arrived = asyncio.Event()
    if Vault.heard >= n:
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(Vault.arrived.wait(), TIMEOUT)
    return Vault.heard >= n


class Sniffed:
    """What tcpdump saw (``data`` None: it could not run)."""

    def __init__(self) -> None:
        self.data: bytes | None = None

    @property
    def hits(self) -> int:
        return (self.data or b"").count(MARK.encode())

    def summary(self) -> dict[str, int]:
        return {"bytes": len(self.data or b""), "hits": self.hits}


@contextlib.asynccontextmanager
async def sniffing(p: Probes, target: str, ports: list[int], work: Path) -> AsyncIterator[Sniffed]:
    """tcpdump on ``ports`` of loopback around the block, when this machine can
    (else the probe is reported skipped, with the reason)."""
    sniffed = Sniffed()
    why = capture_unavailable()
    if why is not None:
        p.skip(target, "watermark", "marked PII on the wire (tcpdump)", why)
        yield sniffed
        return
    async with Capture(ports, work / f"{target}-{uuid.uuid4().hex[:6]}.pcap") as capture:
        yield sniffed
    sniffed.data = capture.data
