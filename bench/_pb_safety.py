"""ProtocolBench's Safety row: what each stack blocks out of the box, each run as
its users run it by default (actorbus on its secured broker; the peers as their
quick starts have them), against the same three attacks by an on-path attacker:

- **eavesdrop**: a relay on loopback between the caller and what it connects to
  (the broker for the NATS stacks, the server for the others) records every byte
  while one marked request (a card number) is echoed; blocked when the mark is
  never readable;
- **tamper**: the relay rewrites the mark in the caller's bytes where it can read
  it, else flips one bit in each of the caller's chunks after its first (a blind
  attacker); blocked when the agent never handles an altered text;
- **replay**: the caller's bytes of each connection, captured during the
  eavesdrop run, are sent again on new connections; blocked when the agent does
  not handle the request again.

The agent says what it handled (``serve-echo --watch``, ``_driver.handled``), so
an outcome is what the agent did, not what a reply looked like.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _harness import stop_processes

ATTACKS = ("eavesdrop", "tamper", "replay")
MARK = b"PII:card=4111-1111-1111-1111"  # as in stacks/_driver.py
TAMPERED = b"PII:card=4000-0000-0000-0002"
REPLAY_WAIT = 3.0  # how long a replayed request gets to reach the agent
CALL_TIMEOUT = 45.0  # one probe's caller process (a peer's interpreter starts slowly)


@dataclass(frozen=True)
class Run:
    """One row: a stack's module, the broker its processes join (the NATS stacks),
    the ``ACTORBUS_HOME`` with its keys (actorbus on its secured broker), and how
    to make the command line of one of its processes."""

    name: str
    module: str
    nats_url: str
    home: Path | None
    command: Callable[..., list[str]]


@dataclass
class Relay:
    """A TCP relay on 127.0.0.1 in front of ``target``: what an attacker on the path
    sees (``seen``, both ways), keeps (``sent``, the caller's bytes per connection)
    and does (``rewrite``, applied to the caller's bytes)."""

    target: tuple[str, int] | None = None
    rewrite: Callable[[bytes, int], bytes] | None = None  # (chunk, its index) -> chunk
    seen: bytearray = field(default_factory=bytearray)
    sent: list[bytearray] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.target is not None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        mine = bytearray()
        self.sent.append(mine)
        pumps = (
            asyncio.ensure_future(self._pump(reader, up_writer, mine, self.rewrite)),
            asyncio.ensure_future(self._pump(up_reader, writer, None, None)),
        )
        self._tasks.update(pumps)
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for task in pumps:
            task.cancel()
        for w in (writer, up_writer):
            w.close()

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        keep: bytearray | None,
        rewrite: Callable[[bytes, int], bytes] | None,
    ) -> None:
        index = 0
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await src.read(65536):
                self.seen += chunk
                if keep is not None:
                    keep += chunk
                if rewrite is not None:
                    chunk = rewrite(chunk, index)
                index += 1
                dst.write(chunk)
                await dst.drain()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def rewrite_mark(chunk: bytes, _index: int) -> bytes:
    """A reading attacker: the card number replaced by another of the same length."""
    return chunk.replace(MARK, TAMPERED)


def flip_bits(chunk: bytes, index: int) -> bytes:
    """A blind attacker: one bit of each chunk after the first (a handshake's opening)."""
    if index == 0 or not chunk:
        return chunk
    middle = len(chunk) // 2
    return chunk[:middle] + bytes([chunk[middle] ^ 0x01]) + chunk[middle + 1 :]


class Agent:
    """A stack's echo server under ``--watch``: counts what it says it handled."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.counts: dict[str, int] = {"mark": 0, "tampered": 0, "other": 0}
        self.changed = threading.Condition()
        self.address = ""
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            words = line.split()
            if words[:1] == ["ready"] and len(words) > 1:
                self.address = words[1]
                self.ready.set()
            elif words[:1] == ["handled"] and len(words) > 1:
                with self.changed:
                    self.counts[words[1]] = self.counts.get(words[1], 0) + 1
                    self.changed.notify_all()
        self.ready.set()  # it ended: whoever waits learns it from the empty address

    def snapshot(self) -> dict[str, int]:
        with self.changed:
            return dict(self.counts)

    def wait_more(self, before: dict[str, int], timeout: float) -> bool:
        """Whether it handled anything more than ``before`` within ``timeout``."""
        with self.changed:
            return self.changed.wait_for(lambda: self.counts != before, timeout)


@dataclass(frozen=True)
class Target:
    """Where a stack's caller connects, and how to point it at a relay instead."""

    kind: str  # "nats", "http" or "grpc"
    nats_url: str = ""  # the NATS stacks' broker


def kind_of(module: str) -> str:
    return {"a2a_http": "http", "autogen_grpc": "grpc"}.get(module, "nats")


async def probe_stack(
    start_agent: Callable[[list[str]], subprocess.Popen[str]],
    run_caller: Callable[[list[str]], subprocess.CompletedProcess[str]],
    target: Target,
    start_timeout: float,
) -> dict[str, Any]:
    """The three attacks on one stack. ``start_agent(extra args)`` starts its echo
    server; ``run_caller(extra args)`` runs one echo call to completion."""
    front = Relay()  # made first: an HTTP agent's card names it as its URL
    await front.start()
    extra = ["--watch"]
    if target.kind == "http":
        extra += ["--advertise", f"http://127.0.0.1:{front.port}"]
    if target.kind == "nats":
        extra += ["--nats", target.nats_url]
    agent = Agent(start_agent(extra))
    try:
        if not await asyncio.to_thread(agent.ready.wait, start_timeout) or not agent.address:
            raise RuntimeError("the echo server did not start")
        upstream, caller_args = _aim(target, agent.address, front.port)
        front.target = upstream
        result: dict[str, Any] = {}

        # eavesdrop: one marked call through the relay, everything recorded
        before = agent.snapshot()
        call = await asyncio.to_thread(run_caller, caller_args)
        answered = agent.snapshot()["mark"] > before["mark"]
        readable = MARK in front.seen
        result["eavesdrop"] = {
            "blocked": not readable,
            "detail": (
                "the card number crossed in clear"
                if readable
                else f"{len(front.seen):,} bytes recorded, the card number in none"
            ),
            "call_ok": call.returncode == 0 and answered,
        }
        if not result["eavesdrop"]["call_ok"]:
            raise RuntimeError(f"the marked call did not get through:\n{call.stderr[-2000:]}")
        captured = [bytes(b) for b in front.sent]

        # replay: each captured connection's bytes again, straight to the target
        before = agent.snapshot()
        came_back = await _replay(upstream, captured)
        again = await asyncio.to_thread(agent.wait_more, before, REPLAY_WAIT)
        result["replay"] = {
            "blocked": not again,
            "detail": (
                f"the agent handled it again ({_more(before, agent.snapshot())})"
                if again
                else f"{len(captured)} connection(s) replayed, {came_back:,} bytes came back; "
                "the agent handled nothing"
            ),
        }

        # tamper: the same relay (an HTTP agent's card names it) now rewrites what it
        # can read, else flips bits blindly
        front.rewrite = rewrite_mark if readable else flip_bits
        before = agent.snapshot()
        call = await asyncio.to_thread(run_caller, caller_args)
        after = agent.snapshot()
        altered = after["tampered"] > before["tampered"] or after["other"] > before["other"]
        how = "rewrote the card number" if readable else "flipped a bit per chunk (blind)"
        outcome = "the call failed" if call.returncode else "the call returned"
        result["tamper"] = {
            "blocked": not altered,
            "detail": f"{how}; {outcome}; the agent "
            + ("handled the altered request" if altered else "never handled an altered request"),
        }
        return result
    finally:
        await front.close()
        stop_processes([agent.proc])


def _aim(target: Target, address: str, port: int) -> tuple[tuple[str, int], list[str]]:
    """Where the caller really connects, and the caller's arguments that send it
    through a relay on ``port`` instead."""
    if target.kind == "nats":
        url = urlsplit(target.nats_url)
        relayed = f"{url.scheme}://127.0.0.1:{port}"
        return (url.hostname or "127.0.0.1", url.port or 4222), [
            "--nats",
            relayed,
            "--address",
            address,
        ]
    if target.kind == "http":
        url = urlsplit(address)
        return (url.hostname or "127.0.0.1", url.port or 80), [
            "--address",
            f"http://127.0.0.1:{port}",
        ]
    host, _, grpc_port = address.rpartition(":")
    return (host, int(grpc_port)), ["--address", f"127.0.0.1:{port}"]


async def _replay(target: tuple[str, int], streams: list[bytes]) -> int:
    """Send each stream on a connection of its own; the bytes that came back."""

    async def one(data: bytes) -> int:
        back = 0
        with contextlib.suppress(OSError, TimeoutError):
            reader, writer = await asyncio.open_connection(*target)
            writer.write(data)
            await writer.drain()
            # keep it open while the agent may answer; read whatever comes back
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REPLAY_WAIT):
                    while chunk := await reader.read(65536):
                        back += len(chunk)
            writer.close()
        return back

    return sum(await asyncio.gather(*(one(s) for s in streams if s)))


def _more(before: dict[str, int], after: dict[str, int]) -> str:
    return ", ".join(f"{k} +{after[k] - before.get(k, 0)}" for k in after if after[k] != before[k])


def measure(runs: list[Run], progress: Any, start_timeout: float) -> dict[str, Any]:
    """Every row's three attacks, one row after the other."""
    task = progress.add_task("safety", total=len(runs))
    rows: dict[str, Any] = {}
    for run in runs:
        progress.update(task, description=f"safety: attacking {run.name}")
        env = {**os.environ, **({"ACTORBUS_HOME": str(run.home)} if run.home else {})}

        def start_agent(extra: list[str], run: Run = run, env: dict[str, str] = env) -> Any:
            return subprocess.Popen(
                run.command("serve-echo", *extra),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )

        def run_caller(
            extra: list[str], run: Run = run, env: dict[str, str] = env
        ) -> subprocess.CompletedProcess[str]:
            args = ("echo", "--text", f"my card is {MARK.decode()}", "--warmup", "0")
            cmd = run.command(*args, "--sequential", "1", "--concurrent", "0", *extra)
            try:
                return subprocess.run(
                    cmd, capture_output=True, text=True, timeout=CALL_TIMEOUT, env=env
                )
            except subprocess.TimeoutExpired as exc:  # a caller stuck on a broken link
                return subprocess.CompletedProcess(cmd, -9, "", f"timed out: {exc}")

        target = Target(kind_of(run.module), nats_url=run.nats_url)
        try:
            rows[run.name] = asyncio.run(
                probe_stack(start_agent, run_caller, target, start_timeout)
            )
        except RuntimeError as exc:
            rows[run.name] = {"error": str(exc)}
        progress.advance(task)
    return rows


def blocked_count(result: dict[str, Any]) -> int:
    return sum(bool(result.get(a, {}).get("blocked")) for a in ATTACKS)


# -- the report ---------------------------------------------------------------------
def table(rows: dict[str, Any]) -> Any:
    """The console table (rich, imported here: the orchestrator's side only)."""
    from rich.table import Table

    out = Table(title="Safety: attacks blocked out of the box")
    for col in ("stack", *ATTACKS, "blocked"):
        out.add_column(col)
    for name, row in rows.items():
        if "error" in row:
            out.add_row(name, f"[red]{row['error'][:80]}", "", "", "")
            continue
        marks = ["blocked" if row[a]["blocked"] else "[red]not blocked" for a in ATTACKS]
        out.add_row(name, *marks, f"{row['blocked']} of {len(ATTACKS)}")
    return out


def markdown(rows: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Safety: what each stack blocks out of the box",
        "",
        "An attacker on the path between a caller and what it connects to (the broker "
        "for the NATS stacks, the server for the others) eavesdrops on one request "
        "carrying a card number, rewrites it (or, where it cannot read it, flips a bit "
        "per chunk), and replays the caller's captured connections. Blocked means the "
        "card number was never readable, the agent never handled an altered request, "
        "the agent did not handle the replay (as the agent itself reported). actorbus "
        "runs on its secured broker, its default; the peers as their quick starts "
        "have them; actorbus on an open bus is the control.",
        "",
        "| stack | eavesdrop | tamper | replay | blocked |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| `{name}` | error: {row['error'][:120]} | | | |")
            continue
        cells = [
            f"{'blocked' if row[a]['blocked'] else '**not blocked**'}: {row[a]['detail']}"
            for a in ATTACKS
        ]
        lines.append(f"| `{name}` | {' | '.join(cells)} | {row['blocked']} of {len(ATTACKS)} |")
    return lines
