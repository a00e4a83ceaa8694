"""Hosting actors in this process: spawn, register, the subscriptions that feed
their cells, lazy activation, stopping, and the cells' durable readers.

Everything here works on the runtime kernel and the residents table; keyed
(virtual) actors are placed by ``actors/virtual.py``, to which this hands the
messages of keys it does not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actorbus.actors.actor import Actor, ActorContext
from actorbus.actors.address_inbox import DurableInbox
from actorbus.actors.cell import ActorCell, CellEnv
from actorbus.actors.mailbox import ENTRANCE, limits_of
from actorbus.actors.observed_cell import ObservedCell
from actorbus.actors.placement import Placement
from actorbus.actors.reminder_relay import ReminderRelay
from actorbus.actors.residents import Residents, TypeHost
from actorbus.actors.runtime import Runtime
from actorbus.actors.streaming import StreamProducers
from actorbus.actors.topic_fanout import TopicFanout
from actorbus.actors.type_inbox import TypeInbox
from actorbus.actors.virtual import VirtualActors
from actorbus.bus.jetstream import stream_name
from actorbus.bus.subjects import Address, session_key, validate_key
from actorbus.bus.tasks import spawn
from actorbus.codecs.envelope import new_id
from actorbus.codecs.errors import ActorBusError

log = logging.getLogger("actorbus.hosting")


class Hosting:
    """The actors one system hosts."""

    def __init__(
        self,
        rt: Runtime,
        context: ActorContext,
        streams: StreamProducers,
        on_host: Callable[[type[Actor]], None],
    ) -> None:
        self.rt = rt
        self.gc_young = rt.config.gc_young
        self.on_host = on_host  # a type is hosted here now: learn and announce it
        self.residents = Residents()
        self.env = CellEnv(rt, streams, context, self.forget_cell)
        # Chosen once: plain cells, or cells that trace and measure every message.
        self.cell_class = ObservedCell if rt.telemetry.on else ActorCell
        self.placement = Placement(
            rt.js,
            rt.namespace,
            rt.system_id,
            rt.config.activation_ttl,
            replicas=rt.durable_settings.replicas,
            on_lost=self.stop_actor,
            record_ttl=rt.config.placement_ttl,
            reachable=lambda: rt.nc.is_connected,
        )
        self.virtual = VirtualActors(
            rt, self.placement, self.residents, self.lazy_cell, self.stop_actor
        )
        self.inboxes: dict[ActorCell, DurableInbox] = {}
        self.fanout = TopicFanout(rt, self.residents)
        self.relays: dict[str, ReminderRelay] = {}  # per type whose durable queue is read here
        self._unread_checked: set[str] = set()

    async def spawn(
        self,
        cls: type[Actor],
        key: str | None = None,
        *,
        replicas: int = 1,
        **kwargs: Any,
    ) -> str:
        """Start ``replicas`` instances of ``cls`` at ``type/key`` (key: generated if
        None); returns the address.

        Replicas of one address share its messages through a NATS queue group, in
        this process or across processes.
        """
        only_here = key is None or cls.keyed  # no other process can host it
        key = key if key is not None else new_id()
        validate_key(key)
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        address = f"{cls.type_name}/{key}"
        hosted = self.residents.hosts.get(cls.type_name)
        self.on_host(cls)
        self._check_unread(cls)
        tune_collector(self.gc_young)
        await self.rt.security.host_type(cls.type_name, [t.topic for t in cls.topics if t.topic])
        if cls.keyed:
            owner = await self.placement.owner(address)
            if owner is not None:
                raise ActorBusError(
                    f"{address} is keyed and already active in system {owner}; "
                    "send to it instead (register() hosts a keyed type on demand)"
                )
        for _ in range(replicas):
            cell = self.cell_class(self.env, cls, key, kwargs)
            self.residents.cells.setdefault(address, []).append(cell)
            if not await cell.start():
                raise ActorBusError(f"{address} failed to start: {cell.failure!r}")
            if hosted is None:
                await self._subscribe_cell(cell, only_here)
            else:
                await self._subscribe_topics(cell, only_here)
            if cls.has_durable_queue and hosted is None:  # else the type's reader has it
                await self._relay(cls.type_name)
                inbox = DurableInbox(self.rt, cell)
                await inbox.start()
                self.inboxes[cell] = inbox
        await self._confirm_subscriptions()
        return address

    async def _confirm_subscriptions(self) -> None:
        """A round trip to the server, so that once spawn()/register() return, any
        client anywhere can reach the new subscriptions."""
        try:
            await self.rt.nc.flush(timeout=max(1, round(self.rt.default_timeout)))
        except nats.errors.Error as exc:
            raise self.rt.conn.translate(exc) from exc

    async def register(self, cls: type[Actor], **kwargs: Any) -> None:
        """Host ``cls`` lazily: an instance is created on the first message to
        ``type/<any key>`` (and to the anycast address ``type``) that reaches this process."""
        type_name = cls.type_name
        if type_name in self.residents.hosts:
            raise ValueError(f"actor type {type_name!r} is already registered")
        for address in self.residents.cells:
            if address.startswith(type_name + "/"):
                raise ValueError(f"register {type_name!r} before spawning instances of it")
        host = TypeHost(cls, kwargs)
        self.residents.hosts[type_name] = host
        await self.rt.security.host_type(type_name, [t.topic for t in cls.topics if t.topic])
        self.on_host(cls)
        self._check_unread(cls)
        tune_collector(self.gc_young)
        s = self.rt.subjects

        async def on_direct(msg: Msg) -> None:
            started = time.monotonic()
            await self._route_lazy(host, s.key_of(msg.subject), msg)
            if host.reading.due(started):  # a burst: the loop reads on meanwhile
                await asyncio.sleep(0)

        limits = ENTRANCE  # each activated key's own mailbox bound is in deliver_later
        everyone = f"{type_name}/*"

        async def on_anycast(msg: Msg) -> None:
            started = time.monotonic()
            await self._route_lazy(host, self._anycast_key(host), msg, anycast=True)
            if host.reading.due(started):  # a burst: the loop reads on meanwhile
                await asyncio.sleep(0)

        direct = await self.rt.nc.subscribe(
            s.direct_all(type_name), queue=s.lazy_queue(type_name), cb=on_direct, **limits
        )
        anycast = await self.rt.nc.subscribe(
            s.anycast(type_name), queue=s.queue(Address(type_name)), cb=on_anycast, **limits
        )
        host.subs += [self.rt.mailboxes.watch(sub, everyone, cls) for sub in (direct, anycast)]
        if cls.idle_timeout is not None:
            self.virtual.watch_idle()
        if cls.has_durable_queue:
            host.inbox = TypeInbox(
                self.rt,
                cls,
                lambda key: self.virtual.place(host, key),
                self.virtual.forward_durable,
            )
            await self._relay(type_name)
            await host.inbox.start()
        await self._confirm_subscriptions()

    def _check_unread(self, cls: type[Actor]) -> None:
        """Durable messages sent to a type that reads no durable queue (it has no
        durable handler) would wait unread until they expire: say so, once per
        type, off the start's path."""
        if cls.has_durable_queue or cls.type_name in self._unread_checked:
            return
        self._unread_checked.add(cls.type_name)
        spawn(self._warn_unread(cls), f"unread durable messages of {cls.type_name}", self.rt.tasks)

    async def _warn_unread(self, cls: type[Actor]) -> None:
        try:
            async with asyncio.timeout(self.rt.default_timeout):
                unread = await self.rt.durable.unread(cls.type_name)
        except (TimeoutError, nats.errors.Error, ActorBusError) as exc:  # no JetStream, say
            log.debug("could not look for unread durable messages of %s: %r", cls.type_name, exc)
            return
        if unread:
            log.warning(
                "%d durable message(s) for %r wait in stream %s and nothing reads them: "
                "%s has no durable handler, so its hosts read no durable queue. Make its "
                "handlers durable (@handler(durable=True), or durable = True on the class) "
                "to have them delivered",
                unread,
                cls.type_name,
                stream_name(self.rt.namespace, cls.type_name),
                cls.__qualname__,
            )

    async def _relay(self, type_: str) -> None:
        """Relay the type's reminder firings into its queue (once per process)."""
        if type_ not in self.relays:
            relay = ReminderRelay(self.rt, type_)
            await relay.start()
            self.relays[type_] = relay

    async def _route_lazy(
        self, host: TypeHost, key: str, msg: Msg, *, anycast: bool = False
    ) -> None:
        address = f"{host.cls.type_name}/{key}"
        env = await self.rt.intake.decode_or_answer(msg, address, host.cls.security)
        if env is None:
            return
        session = env.context.session_id
        if anycast and host.cls.key_by_session and session:
            key = session_key(session)  # each conversation is an actor of its own
            address = f"{host.cls.type_name}/{key}"
        if host.cls.keyed and not self.placement.holds(address):
            self.virtual.route(host, key, msg, env)  # claim, or forward to the holder
            return
        self.lazy_cell(host, key).deliver_later(msg, env)

    def _anycast_key(self, host: TypeHost) -> str:
        """Which instance a message to the bare type address goes to: one active
        here in turn, else ``default``. A type keyed by session: its session's
        (``_route_lazy``), else ``default``, never another conversation's."""
        type_name = host.cls.type_name
        if host.cls.key_by_session:
            return "default"
        local = [a for a in self.residents.cells if a.startswith(type_name + "/")]
        return local[next(host.rr) % len(local)].split("/", 1)[1] if local else "default"

    def lazy_cell(self, host: TypeHost, key: str) -> ActorCell:
        """The local instance of ``type/key``, activated now if there is none."""
        address = f"{host.cls.type_name}/{key}"
        cells = self.residents.cells.get(address)
        if not cells:
            cell = self.cell_class(self.env, host.cls, key, host.kwargs)
            self.residents.cells[address] = [cell]
            cell.starter = self._activate  # by the message it is made for (no task of its own)
            return cell
        # Replicas of one address in this process: the least busy one takes it.
        return cells[0] if len(cells) == 1 else min(cells, key=ActorCell.load)

    async def _activate(self, cell: ActorCell) -> None:
        if await cell.start():
            await self._subscribe_topics(cell, cell.cls.keyed)

    async def _subscribe_cell(self, cell: ActorCell, only_here: bool) -> None:
        s = self.rt.subjects
        addr = Address(cell.cls.type_name, cell.key)

        intake, replies, declared = self.rt.intake, self.rt.replies, cell.cls.security

        async def on_msg(msg: Msg) -> None:  # the hot path: one coroutine less
            env = None
            try:
                env = intake.decode(msg, cell.address)
                if intake.checks:
                    await intake.admit(msg, env, cell.address, declared)
            except ActorBusError as err:
                await replies.error(msg, err, env, cell.address)
                return
            await cell.deliver(msg, env)

        limits = limits_of(cell.cls)
        direct = await self.rt.nc.subscribe(
            s.direct(addr), queue=s.queue(addr), cb=on_msg, **limits
        )
        anycast = await self.rt.nc.subscribe(
            s.anycast(addr.type), queue=s.queue(Address(addr.type)), cb=on_msg, **limits
        )
        watch = self.rt.mailboxes.watch
        cell.subscriptions += tuple(watch(sub, cell.address, cell.cls) for sub in (direct, anycast))
        await self._subscribe_topics(cell, only_here)

    async def _subscribe_topics(self, cell: ActorCell, only_here: bool) -> None:
        """``cell``'s topic subscriptions: shared with the process's other actors
        of its type when its address can exist only here (``topic_fanout.py``),
        else its own, in its address's queue group."""
        addr = Address(cell.cls.type_name, cell.key)
        for spec in cell.cls.topics:
            assert spec.topic is not None
            if only_here:
                await self.fanout.join(spec.topic, cell)
                continue

            async def on_topic(msg: Msg) -> None:
                if msg.reply:  # a kept topic's message carries its store's ack inbox:
                    msg = dataclasses.replace(msg, reply="")  # a topic is never answered
                declared = cell.cls.security
                env = await self.rt.intake.decode_or_answer(msg, cell.address, declared)
                if env is not None:
                    await cell.deliver(msg, env)

            sub = await self.rt.nc.subscribe(
                self.rt.subjects.topic(spec.topic, wildcards=True),
                queue=self.rt.subjects.queue(addr),
                cb=on_topic,
                **limits_of(cell.cls),
            )
            cell.subscriptions += (self.rt.mailboxes.watch(sub, cell.address, cell.cls),)

    async def stop_actor(self, address: str, timeout: float = 10.0) -> None:
        """Stop every local replica of ``address`` (they finish what they are doing);
        a keyed actor's activation lease is given back."""
        for cell in self.residents.cells.pop(address, []):
            await self._stop_cell(cell, timeout)
        await self.placement.release(address)

    async def _stop_cell(self, cell: ActorCell, timeout: float) -> None:
        if cell.cls.topics:  # (a passivation sweep stops a million without any)
            await self.fanout.leave(cell)
        inbox = self.inboxes.pop(cell, None)
        if inbox is not None:
            await inbox.stop(timeout)
        subs, cell.subscriptions = cell.subscriptions, ()
        await _drain(subs, timeout)
        for sub in subs:
            self.rt.mailboxes.forget(sub)
        await cell.stop(timeout)

    async def forget_cell(self, cell: ActorCell) -> None:
        """Called by a cell that gave up: unsubscribe it and drop it from the table."""
        cells = self.residents.cells.get(cell.address, [])
        if cell in cells:
            cells.remove(cell)
            if not cells:
                del self.residents.cells[cell.address]
        await self.fanout.leave(cell)
        for sub in cell.subscriptions:
            self.rt.mailboxes.forget(sub)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        cell.subscriptions = ()

    def local_actors(self) -> dict[str, int]:
        """Addresses hosted here and their replica counts."""
        return {address: len(cells) for address, cells in self.residents.cells.items()}

    async def close(self, timeout: float) -> None:
        """Stop readers, actors and leases, each bounded by ``timeout``."""
        await _drain([sub for host in self.residents.hosts.values() for sub in host.subs], timeout)
        inboxes = [host.inbox for host in self.residents.hosts.values() if host.inbox is not None]
        relays, self.relays = list(self.relays.values()), {}
        await asyncio.gather(
            *(inbox.stop(timeout) for inbox in inboxes), *(r.stop(timeout) for r in relays)
        )
        await self.fanout.close(timeout)  # what it holds still reaches its members
        cells = [c for cs in self.residents.cells.values() for c in cs]
        self.residents.cells.clear()
        await self.virtual.close()
        await asyncio.gather(*(self._stop_cell(c, timeout) for c in cells))
        await self.placement.close(timeout)
        if self.rt.tasks:
            await asyncio.wait(self.rt.tasks, timeout=timeout)


# CPython's own default: a process that set another keeps it.
_INTERPRETER_YOUNG = 700


def tune_collector(young: int | None) -> None:
    """Collect the young generation every ``young`` allocations instead of every
    700, once this process hosts actors.

    Every message makes short-lived containers (tasks, coroutines, envelopes);
    at 700 they reach the old generations half-dead, and each full collection
    walks every activation the process keeps. With 100,000 activations that
    was two thirds of the time an activation took (11,000/s; 18,000/s with
    20,000 here). A process that tuned its own collector keeps its settings."""
    threshold, *older = gc.get_threshold()
    if young is None or threshold != _INTERPRETER_YOUNG or young == threshold:
        return
    gc.set_threshold(young, *older)
    log.debug("collector's young threshold: %d", young)


async def _drain(subs: Sequence[Subscription], timeout: float) -> None:
    """Stop receiving on ``subs`` but let the messages they hold finish (bounded).

    A plain unsubscribe would cancel the subscription's task, and with it a
    handler running inside it.
    """

    async def one(sub: Subscription) -> None:
        try:
            async with asyncio.timeout(timeout):
                await sub.drain()  # type: ignore[no-untyped-call]
        except Exception:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    if subs:
        await asyncio.gather(*(one(sub) for sub in subs))
