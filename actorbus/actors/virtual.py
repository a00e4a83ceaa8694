"""Keyed (virtual) actors: route each message to the one process hosting its key.

A process that gets a message for ``type/key`` of a keyed type hosts the actor
itself if it holds (or can take) the activation lease; otherwise it forwards the
message to the holder's host subject (``{ns}.h.{system_id}.{type}.{key}``):

- an ask goes as a request and the holder's answer is relayed to the caller;
- a tell goes as a request too, answered as soon as the holder has it, so a
  holder that died (no responders) is noticed and the message is not lost to it;
- a durable message goes as a request answered with the handler's outcome and
  its held sends, so the reader acks, retries or dead-letters as if it had run
  the handler itself (and records the sends with the idempotency key);
- a stream request is forwarded as is (its items go straight to the caller).

A holder that passivated the actor meanwhile answers "moved"; a dead holder's
lease runs out within the activation ttl, after which the message activates
the actor where it is. Idle instances of types with ``idle_timeout`` are
passivated by a sweep, which also gives their lease back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from actorbus.actors.outbox import Outbox, current_outbox
from actorbus.bus.client import EncodedHeaders, encode_headers, header_block, with_header
from actorbus.bus.jetstream import stream_name
from actorbus.bus.requests import NoResponders, RequestTimeout
from actorbus.bus.subjects import Address
from actorbus.bus.tasks import YieldEvery, stop_task, supervise
from actorbus.codecs.errors import (
    ActorNotFoundError,
    AskTimeoutError,
    StoreUnavailableError,
    error_from_wire,
)
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import H_FWD, H_MOVED, H_MSG_ID, H_STORED, pack, unpack
from actorbus.state.record import Position

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor
    from actorbus.actors.cell import ActorCell
    from actorbus.actors.placement import Placement
    from actorbus.actors.residents import Residents, TypeHost
    from actorbus.actors.runtime import Runtime

log = logging.getLogger("actorbus.placement")

_PASSIVATED_AT_ONCE = 64  # idle actors a sweep stops side by side
_LOOKED_AT_ONCE = 4096  # activations a sweep looks at between two turns of the loop


class VirtualActors:
    """The keyed-actor side of one ActorSystem."""

    def __init__(
        self,
        rt: Runtime,
        placement: Placement,
        residents: Residents,
        lazy_cell: Callable[[TypeHost, str], ActorCell],
        stop_actor: Callable[[str], Awaitable[None]],
    ) -> None:
        self.rt = rt
        self.placement = placement
        self.residents = residents
        self.lazy_cell = lazy_cell  # the local instance of a key (activated if need be)
        self.stop_actor = stop_actor
        self._sweeper: asyncio.Task[None] | None = None
        # Messages waiting for their key's placement or forward, in arrival order.
        self._queues: dict[str, deque[tuple[TypeHost, str, Msg, Inbound]]] = {}

    # -- where a key lives -------------------------------------------------
    async def place(self, host: TypeHost, key: str) -> ActorCell | str:
        """The local instance of ``type/key`` (activated if need be), or the id of the
        system hosting it elsewhere."""
        rt = self.rt
        address = f"{host.cls.type_name}/{key}"
        if host.cls.keyed:
            owner = await self.placement.owner(address)
            if owner is not None and owner != rt.system_id:
                return owner
        return self.lazy_cell(host, key)

    def route(self, host: TypeHost, key: str, msg: Msg, env: Inbound) -> None:
        """A message that arrived here for a key this process does not hold: placed
        (claimed, or forwarded to the holder) one at a time per key, so the messages
        of a key that reach this process keep their order."""
        address = f"{host.cls.type_name}/{key}"
        queued = self._queues.get(address)
        if queued is not None:
            queued.append((host, key, msg, env))
            return
        self._queues[address] = deque([(host, key, msg, env)])
        self.rt.spawn_task(self._drain(address))

    async def _drain(self, address: str) -> None:
        queued = self._queues[address]
        try:
            while queued:
                host, key, msg, env = queued[0]
                try:
                    where = await self.place(host, key)
                    if isinstance(where, str):
                        await self.forward(where, address, msg, env)
                    else:
                        where.deliver_later(msg, env)
                except Exception as exc:  # NATS trouble: this message fails, not the rest
                    log.warning("%s: could not place a message: %r", address, exc)
                    await self._refuse(msg, env, address, exc)
                queued.popleft()
        finally:
            del self._queues[address]

    async def _refuse(self, msg: Msg, env: Inbound, address: str, exc: Exception) -> None:
        """Tell an asker why its message could not be placed (a tell is logged)."""
        err = StoreUnavailableError(f"could not place {address} (where it lives): {exc}")
        if msg.reply:
            with contextlib.suppress(Exception):
                await self.rt.replies.error(msg, err, env, address)

    # -- sending to the holder ---------------------------------------------
    async def forward(self, owner: str, address: str, msg: Msg, env: Inbound) -> None:
        rt = self.rt
        addr = Address.parse(address)
        block = header_block(msg.headers)  # passed on as they came
        if env.context.stream:  # items flow from the holder to the caller directly
            await rt.nc.publish(
                rt.subjects.host(owner, addr), msg.data, reply=msg.reply, headers=block
            )
            return
        mode = "ask" if msg.reply else "tell"
        headers = with_header(block or encode_headers({}), H_FWD, mode)
        reply = await self._to_holder(owner, address, msg, env, headers)
        if reply is None:
            return  # hosted here after all, or answered with an error
        if mode == "ask":
            await rt.nc.publish(msg.reply, reply.data, headers=header_block(reply.headers))

    async def forward_durable(
        self, owner: str, address: str, msg: Msg, env: Inbound
    ) -> Outbox | Exception | None:
        """Run a durable message's handler in the holder's process: its outcome (held
        sends, or the error), or None when it turned out to be hosted here."""
        block = header_block(msg.headers) or encode_headers({})
        headers = with_header(block, H_FWD, "durable")
        reply = await self._to_holder(owner, address, msg, env, headers, durable=True)
        if reply is None:
            return None
        outcome: dict[str, Any] = unpack(reply.data)
        if outcome.get("ok"):
            return Outbox.of_rows(outcome.get("held") or [])
        return error_from_wire(outcome.get("error") or {}, address)

    async def _to_holder(
        self,
        owner: str,
        address: str,
        msg: Msg,
        env: Inbound,
        headers: EncodedHeaders,
        durable: bool = False,
    ) -> Msg | None:
        """Request the holder; follow moves and wait out a dead holder's lease.
        None: the key is hosted here now (the message was delivered locally)."""
        rt = self.rt
        addr = Address.parse(address)
        deadline = time.monotonic() + rt.default_timeout + self.placement.ttl
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                err = AskTimeoutError(address, env.intent, rt.default_timeout)
                if durable:
                    raise err
                await rt.replies.error(msg, err, env, address)
                return None
            try:
                reply = await rt.mux.request(rt.subjects.host(owner, addr), msg.data, headers, left)
            except NoResponders:  # the holder is gone: its lease runs out within ttl
                await asyncio.sleep(min(left, self.placement.ttl / 3))
                reply = None
            except RequestTimeout:
                continue  # the deadline check above answers
            if reply is not None and not (reply.headers and H_MOVED in reply.headers):
                return reply
            self.placement.forget(address)
            host = self.residents.hosts[addr.type]
            where = await self.place(host, addr.key or "")
            if not isinstance(where, str):
                if not durable:  # (a durable reader runs it here itself)
                    where.deliver_later(msg, env)
                return None
            owner = where

    # -- taking forwarded messages -------------------------------------------
    async def on_forwarded(self, msg: Msg) -> None:
        rt = self.rt
        _, _, _, type_, key = msg.subject.split(".", 4)
        address = f"{type_}/{key}"
        host = self.residents.hosts.get(type_)
        declared = host.cls.security if host is not None else None
        env = await rt.intake.decode_or_answer(msg, address, declared)
        if env is None:
            return
        mode = msg.headers.get(H_FWD) if msg.headers else None
        owner = await self.placement.owner(address) if host is not None else ""
        if host is None or owner is not None:  # not (any more) ours: say who has it
            if mode is None:  # a stream request: its caller waits for items, not moves
                gone = ActorNotFoundError(f"{address} moved while its stream was forwarded")
                await rt.replies.error(msg, gone, env, address)
            elif msg.reply:
                await rt.nc.publish(msg.reply, b"", headers={H_MOVED: owner or ""})
            return
        cell = self.lazy_cell(host, key)
        if mode in (None, "ask") or not msg.reply:
            cell.deliver_later(msg, env)
            return
        # Handled without a reply subject; the forwarder gets its own answer.
        plain = Msg(_client=msg._client, subject=msg.subject, data=msg.data, headers=msg.headers)
        if mode == "durable":
            plain = await self._genuine_position(host.cls, plain, env)
            self.rt.spawn_task(self._handle_durable(cell, plain, env, msg.reply))
            return
        await rt.nc.publish(msg.reply, b"")  # a tell: received, the holder is alive
        cell.deliver_later(plain, env)

    async def _genuine_position(self, cls: type[Actor], msg: Msg, env: Inbound) -> Msg:
        """A forwarded durable message's position (a declared state commits with it,
        and skips a message at or before it) is taken when the stream holds this
        very message there; otherwise it is dropped, and the turn runs as any."""
        stored = msg.headers.get(H_STORED) if msg.headers else None
        if stored is None:
            return msg
        position = Position.parse(stored) if cls.state_model is not None else None
        if position is not None:
            stream = stream_name(self.rt.namespace, cls.type_name)
            try:
                raw = await self.rt.js.get_msg(stream, seq=position.seq)
                if (raw.headers or {}).get(H_MSG_ID) == env.id:
                    return msg
            except Exception as exc:
                log.debug("%s: position %s not checked: %r", env.dst, stored, exc)
        log.warning("%s: a forwarded message's stream position did not check out", env.dst)
        headers = {k: v for k, v in (msg.headers or {}).items() if k != H_STORED}
        return Msg(_client=msg._client, subject=msg.subject, data=msg.data, headers=headers)

    async def _handle_durable(self, cell: ActorCell, msg: Msg, env: Inbound, inbox: str) -> None:
        box = Outbox()
        token = current_outbox.set(box)
        try:
            failed = await cell.deliver_durable(msg, env)
        finally:
            current_outbox.reset(token)
            box.open = False
        if failed is None:
            outcome: dict[str, Any] = {"ok": True, "held": box.rows()}
        else:
            outcome = {"ok": False, "error": cell.error_for(failed).to_wire()}
        await self.rt.nc.publish(inbox, pack(outcome))

    # -- passivation -------------------------------------------------------
    def watch_idle(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = supervise("passivation sweeper", self._sweep_forever, logger=log)

    async def _sweep_forever(self) -> None:
        while True:
            timeouts = [
                h.cls.idle_timeout for h in self.residents.hosts.values() if h.cls.idle_timeout
            ]
            if not timeouts:
                return
            await asyncio.sleep(max(0.05, min(timeouts) / 4))
            await self._passivate(await self._idle(time.monotonic()))

    async def _idle(self, now: float) -> deque[str]:
        """The addresses idle for longer than their type allows. A million of
        them take the better part of a second to look through, so the loop gets
        a turn every _LOOKED_AT_ONCE; the table may change meanwhile, hence the
        copy of its keys (a list, where a copy of its items made a tuple each)."""
        table, hosts = self.residents.cells, self.residents.hosts
        idle: deque[str] = deque()
        for n, address in enumerate(list(table), 1):
            cells = table.get(address)
            host = hosts.get(address.split("/", 1)[0])
            limit = host.cls.idle_timeout if host is not None else None
            if limit and cells and all(c.idle_for(now) > limit for c in cells):
                idle.append(address)
            if n % _LOOKED_AT_ONCE == 0:
                await asyncio.sleep(0)
        return idle

    async def _passivate(self, idle: deque[str]) -> None:
        """Stop ``idle`` actors, _PASSIVATED_AT_ONCE side by side (a keyed one waits
        for the write that releases its key, a kept state for its save) by as
        many workers taking the next address. Chunks of them gathered (a task
        for each actor, and every chunk waiting for its slowest) took a sweep
        of 200,000 lazily hosted actors from 375,000/s to 83,000/s. Actors whose
        stop never waits are stopped back to back, the loop given a turn every
        few milliseconds. Each address is let go as its stop begins: kept to
        the end of a sweep, a million of them kept the memory of the stopped
        activations they were made beside from going back to the system."""
        if not idle:
            return
        log.debug("passivating %d idle actor(s), %s first", len(idle), idle[0])
        turns = YieldEvery()

        async def worker() -> None:
            while idle:
                address = idle.popleft()
                started = time.monotonic()
                await self.stop_actor(address)
                if turns.due(started):
                    await asyncio.sleep(0)

        await asyncio.gather(*(worker() for _ in range(min(_PASSIVATED_AT_ONCE, len(idle)))))

    async def close(self) -> None:
        await stop_task(self._sweeper, what="passivation sweeper")
