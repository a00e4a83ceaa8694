"""ActorSystem: one process's actor runtime on one NATS connection.

It hosts actors (spawned eagerly, or registered for lazy activation on first
message), routes inbound messages to their cells, and is the client side of
``ask``/``tell``/``publish``/``stream``. See ``actorbus.bus.subjects`` for the
subject scheme and docs/architecture.md for where a message goes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack, cast, overload

from nats.aio.subscription import Subscription

from actorbus.actors.actor import Actor, ActorContext
from actorbus.actors.config import SystemConfig
from actorbus.actors.context import default_url
from actorbus.actors.dead_letters import (
    DeadLetter,
    QueueStats,
    drop_dead_letter,
    get_dead_letter,
    list_dead_letters,
    queue_stats,
    replay_dead_letter,
)
from actorbus.actors.delivery import DeliveryDefaults, DeliveryPolicy
from actorbus.actors.directory import Directory
from actorbus.actors.history import read_history, rerun
from actorbus.actors.hosting import Hosting
from actorbus.actors.listing import DiscoveryQuery, Listing
from actorbus.actors.options import SystemOptions, secure_start
from actorbus.actors.ref import ActorRef
from actorbus.actors.reminders import Reminders
from actorbus.actors.runtime import Runtime
from actorbus.actors.sending import ObservedSender, Sender, SendOptions
from actorbus.actors.streaming import StreamProducers
from actorbus.actors.subscriber import subscribe
from actorbus.bus.client import Client
from actorbus.bus.connection import BusConnection
from actorbus.bus.local import LocalBus, LocalConnection
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.bus.subjects import Address, validate_topic
from actorbus.bus.transport import Transport
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import (
    ActorBusError,
)
from actorbus.security.secure_broker import first_join
from actorbus.security.stage import NoSecurity, SecurityStage
from actorbus.telemetry import OFF, Telemetry, configure, flush

log = logging.getLogger("actorbus.system")

A = TypeVar("A", bound=Actor)
R = TypeVar("R")
T = TypeVar("T")


class ActorSystem:
    """The runtime. Create with ``ActorSystem.start()`` (embedded nats-server) or
    ``ActorSystem.connect(url)``; both work with ``async with`` or ``await``."""

    def __init__(
        self,
        conn: Transport,
        config: SystemConfig,
        security: SecurityStage,
        telemetry: Telemetry,
        server: EmbeddedServer | None = None,
    ) -> None:
        """Built by ``start()`` and ``connect()`` (``actors/config.py`` has the defaults)."""
        rt = Runtime(conn, config, security, telemetry)
        self.runtime = rt
        self.delivery = DeliveryDefaults()
        self.server = server
        self.directory = Directory(rt, config.registry)
        rt.restorers.append(self.directory.restore_if_lost)
        self.streams = StreamProducers(rt)
        # Actors talk to the world through this facade (ActorContext is its part they use).
        context = cast(ActorContext, self)
        self.hosting = Hosting(rt, context, self.streams, self._hosted)
        self.placement = self.hosting.placement
        rt.restorers.append(self.placement.restore_if_lost)
        self.virtual = self.hosting.virtual
        # Chosen once: the plain sender, or the one that traces and measures every send.
        self.sender = (ObservedSender if telemetry.on else Sender)(rt)
        self.reminders = Reminders(rt, self.sender)
        self._system_subs: list[Subscription] = []
        self._closing = False
        self._closed = asyncio.Event()

    # -- construction ------------------------------------------------------
    @classmethod
    def start(
        cls,
        *,
        store_dir: str | Path | None = None,
        server_config: ServerConfig | None = None,
        secure: bool = True,
        **options: Unpack[SystemOptions],
    ) -> _Opening:
        """Start an embedded nats-server (JetStream on) and a system on it.

        ``secure`` (the default): the server takes only authenticated users over
        TLS and the system authenticates and seals its messages
        (``security/secure_broker.py``, ``docs/security.md``); ``secure=False`` is
        the old open server, said so in the log."""

        async def open_() -> ActorSystem:
            SystemConfig.of(options)  # bad options are said before a server starts
            config = server_config or ServerConfig(store_dir=Path(store_dir) if store_dir else None)
            if secure:  # the options given this system's way in
                config = secure_start(config, options)
            else:
                log.warning("the embedded nats-server runs without authentication or TLS")
            server = EmbeddedServer(config)
            await server.start()
            try:
                return await cls._open([server.url], server, SystemConfig.of(options))
            except BaseException:
                await server.stop()
                raise

        return _Opening(open_())

    @classmethod
    def connect(
        cls,
        servers: str | list[str] | None = None,
        **options: Unpack[SystemOptions],
    ) -> _Opening:
        """Connect to an existing NATS server or cluster: ``servers``, else
        ``$ACTORBUS_URL``, ``$NATS_URL``, the server ``actorbus up`` runs on this
        machine, or ``nats://127.0.0.1:4222``.

        Without ``connect_options``, a secured server (its INFO line says so) is
        joined as ``actorbus up``'s commands join it: as a member with this
        machine's ``ACTORBUS_HOME`` credentials and TLS, with end-to-end security
        on; so a second process on a development machine needs nothing but the
        URL. Production deployments give ``connect_options`` (their credentials)."""
        if servers is None:
            servers = default_url().split(",")
        urls = [servers] if isinstance(servers, str) else list(servers)

        async def open_() -> ActorSystem:
            config = SystemConfig.of(options)
            if config.connect is None:  # as the server asks: a secured one is joined
                joined = await first_join(urls, config.namespace, config.name)
                config = SystemConfig.of({**joined, **options})
            return await cls._open(urls, None, config)

        return _Opening(open_())

    @classmethod
    def in_process(cls, bus: LocalBus | None = None, **options: Unpack[SystemOptions]) -> _Opening:
        """A system on a bus in this process, with no server: for fast tests of
        actor behaviour (``docs/testing.md``). Systems opened on one ``bus`` see
        each other, as processes on one server do; without one, a new bus.

        Messaging, mailboxes, supervision, streams, keyed-actor placement,
        declared state and discovery behave as on NATS (key-value buckets are
        kept in memory). What a server keeps in streams is not there: durable
        delivery, reminders, history and dead letters raise the typed error a
        server without JetStream gives. No security stage: nothing leaves the
        process."""

        async def open_() -> ActorSystem:
            config = SystemConfig.of(options)
            if config.security is not None:
                raise ValueError(
                    "the in-process bus has no security stage: test security on a server "
                    "(ActorSystem.start(), or the actorbus_server fixture)"
                )
            where = LocalBus() if bus is None else bus
            conn = await LocalConnection.open(where, config.connect_to(["local://"]))
            return await cls._open_on(conn, None, config)

        return _Opening(open_())

    @classmethod
    async def _open(
        cls, urls: list[str], server: EmbeddedServer | None, config: SystemConfig
    ) -> ActorSystem:
        return await cls._open_on(
            await BusConnection.connect(config.connect_to(urls)), server, config
        )

    @classmethod
    async def _open_on(
        cls, conn: Transport, server: EmbeddedServer | None, config: SystemConfig
    ) -> ActorSystem:
        # OTEL_*, or tracing=True: set up once per process
        telemetry = OFF if config.tracing is False else configure(config.tracing)
        security: SecurityStage = NoSecurity()
        try:
            if config.security is not None:
                # Imported by a secured system only: the guard brings the sealing,
                # signature and JWT code, imports a process on an open bus skips.
                from actorbus.security.guard import Guard

                security = await Guard.open(conn.nc.jetstream(), config.namespace, config.security)
        except BaseException:
            await conn.close(2.0)
            raise
        system = cls(conn, config, security, telemetry, server)
        await system._subscribe_system()
        if system.runtime.durable_settings.keep_topics:
            await system.durable_ready()  # topics are stored from the first publish on
        return system

    async def _subscribe_system(self) -> None:
        rt = self.runtime
        await rt.mux.start()
        sub = await rt.nc.subscribe(self.streams.control_subject, cb=self.streams.on_control)
        self._system_subs.append(sub)
        sub = await rt.nc.subscribe(
            rt.subjects.host_all(rt.system_id), cb=self.virtual.on_forwarded
        )
        self._system_subs.append(sub)

    @property
    def telemetry(self) -> Telemetry:
        """What this system records (tracing, metrics), chosen when it opened."""
        return self.runtime.telemetry

    @property
    def url(self) -> str:
        """The first server this system was given."""
        return self.runtime.conn.options.servers[0]

    @property
    def namespace(self) -> str:
        """The namespace its subjects, streams and credentials live in."""
        return self.runtime.namespace

    @property
    def system_id(self) -> str:
        """This process's system, as placement and system events name it."""
        return self.runtime.system_id

    @property
    def nc(self) -> Client:
        """The bus's client, for what actorbus does not wrap (raw subjects): a
        nats-py client on NATS, the same API in memory on the in-process bus."""
        return self.runtime.conn.nc

    # -- hosting actors ----------------------------------------------------
    async def spawn(
        self,
        cls: type[A],
        key: str | None = None,
        *,
        replicas: int = 1,
        **kwargs: Any,
    ) -> ActorRef:
        """Start ``replicas`` instances of ``cls`` at ``type/key`` (key: generated if None).

        Replicas of one address share its messages through a NATS queue group, in
        this process or across processes.
        """
        self._check_open()
        address = await self.hosting.spawn(cls, key, replicas=replicas, **kwargs)
        return ActorRef(cast(ActorContext, self), address)

    async def register(self, cls: type[Actor], **kwargs: Any) -> None:
        """Host ``cls`` lazily: an instance is created on the first message to
        ``type/<any key>`` (and to the anycast address ``type``) that reaches this process."""
        self._check_open()
        await self.hosting.register(cls, **kwargs)

    async def stop_actor(self, address: str, timeout: float = 10.0) -> None:
        """Stop every local replica of ``address`` (they finish what they are doing);
        a keyed actor's activation lease is given back."""
        await self.hosting.stop_actor(address, timeout)

    def local_actors(self) -> dict[str, int]:
        """Addresses hosted here and their replica counts."""
        return self.hosting.local_actors()

    def _hosted(self, cls: type[Actor]) -> None:
        """A type is hosted here now: senders here know its delivery defaults, and the
        registry hears of it."""
        self.learn(cls)
        self.directory.announce(cls)

    async def durable_ready(self, *types: str) -> None:
        """Create the namespace's durable streams and buckets, and the durable queue
        of each actor type in ``types``, once (idempotent on the server too). Sends
        and hosts make what they need themselves; this makes it ahead of them."""
        await self.runtime.durable.ready()
        for type_ in types:
            await self.runtime.durable.queue(type_)

    # -- sending -----------------------------------------------------------
    @overload
    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        timeout: float | None = None,
        returns: type[R],
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
    ) -> R: ...
    @overload
    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        timeout: float | None = None,
        returns: None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
    ) -> Any: ...
    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        timeout: float | None = None,
        returns: type[R] | None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
    ) -> Any:
        """Send and wait for the reply (typed as ``returns`` when given).

        ``skill=`` instead of an address asks a healthy actor type offering that
        skill (from the registry). Raises AskTimeoutError (naming the address and
        intent), NoRespondersError, or the typed error the actor replied with."""
        self._check_open()
        if skill is not None or address is None:
            address = await self._skill_address(address, skill)
        wait = self.runtime.default_timeout if timeout is None else timeout
        opts = SendOptions(intent, session_id, idempotency_key, ttl_ms)
        return await self.sender.ask(address, message, wait, returns, opts)

    async def tell(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        skill: str | None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        ttl_ms: int | None = None,
        durable: bool | None = None,
        timeout: float | None = None,
    ) -> None:
        """Fire and forget: at most once over core NATS; with ``durable=True``, stored
        in JetStream before this returns and delivered at least once, also to an
        actor that is not running yet. ``None`` follows the target type's defaults
        when this system knows them (``Actor.durable``, ``learn()``). ``skill=``
        picks an address from the registry, as for ``ask``."""
        self._check_open()
        if skill is not None or address is None:
            address = await self._skill_address(address, skill)
        if durable is None:
            durable = self.delivery.durable_for(address, message, intent)
        elif durable:
            self.delivery.check_durable(address)
        opts = SendOptions(intent, session_id, idempotency_key, ttl_ms)
        if durable:
            await self.sender.tell_durable(address, message, opts, timeout)
        else:
            await self.sender.tell(address, message, opts)

    async def publish(
        self,
        topic: str,
        message: Any,
        *,
        intent: str | None = None,
        session_id: str | None = None,
    ) -> None:
        """Publish to a pub/sub topic; every subscribed actor address gets it once.

        When topics are kept (``DurableSettings(keep_topics=True)``), this returns
        once JetStream stored the message, so history has it."""
        self._check_open()
        await self.sender.publish(topic, message, SendOptions(intent, session_id))

    def stream(
        self,
        address: str,
        message: Any,
        *,
        timeout: float | None = None,
        returns: type[Any] | None = None,
        intent: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> AsyncIterator[Any]:
        """Call a streaming handler and iterate its items in order.

        ``timeout`` bounds the wait for each item. Leaving the loop early (break,
        exception, or ``aclose()``) cancels the producer.
        """
        self._check_open()
        wait = self.runtime.default_timeout if timeout is None else timeout
        options = SendOptions(intent, session_id, idempotency_key)
        return self.sender.stream(address, message, wait, returns, options)

    # -- durable queues ----------------------------------------------------
    async def dead_letters(self, address: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """Dead letters of one address (or all), oldest first."""
        return await list_dead_letters(self.runtime, address, limit)

    async def get_dead_letter(self, seq: int) -> DeadLetter:
        return await get_dead_letter(self.runtime, seq)

    async def replay_dead_letter(self, seq: int) -> None:
        """Send a dead letter's original message to its actor again and drop it."""
        await replay_dead_letter(self.runtime, seq)

    async def drop_dead_letter(self, seq: int) -> None:
        await drop_dead_letter(self.runtime, seq)

    def history(
        self,
        *,
        address: str | None = None,
        session_id: str | None = None,
        topic: str | None = None,
        since_seq: int | None = None,
        since: datetime | None = None,
    ) -> AsyncIterator[Envelope]:
        """The stored messages of one actor (its durable messages), one session, or
        one topic (when kept), oldest first, from a stream sequence or a time."""
        return read_history(
            self.runtime,
            address=address,
            session_id=session_id,
            topic=topic,
            since_seq=since_seq,
            since=since,
        )

    async def rerun(self, messages: AsyncIterator[Envelope], address: str) -> int:
        """Send stored messages again, to ``address`` (say, a new version of an agent),
        durably and in order, each once (a message stored again, by a dead letter's
        replay, is the same message); returns how many were sent."""
        return await rerun(self.tell, messages, address, self.runtime.telemetry.tracing)

    @property
    def client_address(self) -> str:
        """What this system's own sends (outside any handler) say they come from:
        ``client/<its key id>`` on a secured bus, where no other member can use it."""
        return self.runtime.client_address

    async def queue_stats(self, address: str) -> QueueStats:
        """Queue depth and consumer lag of an address's durable queue."""
        return await queue_stats(self.runtime, address)

    # -- discovery ---------------------------------------------------------
    async def discover(self, **query: Unpack[DiscoveryQuery]) -> list[Listing]:
        """Agents in the registry offering a ``skill``, carrying every one of
        ``tags``, speaking a ``protocol`` (``"actorbus"``, ``"a2a"``...), by
        ``name``; healthy ones unless ``healthy=False``."""
        self._check_open()
        return await self.directory.discover(**query)

    async def _skill_address(self, address: str | None, skill: str | None) -> str:
        if (address is None) == (skill is None):
            raise TypeError("give an address or skill=, not both or neither")
        assert skill is not None
        return await self.directory.address_for(skill)

    def learn(self, *types: type[Actor]) -> None:
        """Know these actor types' delivery defaults when sending to them (types
        hosted by this system are known already)."""
        for cls in types:
            self.delivery.learn(cls.type_name, DeliveryPolicy.of(cls))

    def ref(self, address: str) -> ActorRef:
        Address.parse(address)
        return ActorRef(cast(ActorContext, self), address)

    async def subscribe(
        self, topic: str, callback: Callable[[Envelope], Awaitable[None]], *, system: bool = False
    ) -> Callable[[], Awaitable[None]]:
        """Watch a topic (or, with ``system=True``, system events such as
        ``actor.failed``) from outside any actor. Returns an unsubscribe function."""
        self._check_open()
        rt = self.runtime
        if system:
            subject = rt.subjects.system(validate_topic(topic, wildcards=True))
            return await subscribe(rt.nc, subject, callback, rt.limits, rt.security)
        subject = rt.subjects.topic(topic, wildcards=True)
        return await subscribe(rt.nc, subject, callback, rt.limits, rt.security, topic=topic)

    # -- shutdown ----------------------------------------------------------
    def _check_open(self) -> None:
        if self._closing:
            raise ActorBusError("the actor system is closed")
        lost = self.runtime.conn.lost_error
        if lost is not None:
            raise lost

    def _spawn_task(self, coro: Coroutine[Any, Any, Any], what: str = "actorbus task") -> None:
        self.runtime.spawn_task(coro, what)

    async def close(self, timeout: float = 10.0) -> None:
        """Graceful shutdown: stop accepting, let in-flight handlers finish (bounded
        by ``timeout``), run on_stop, drain the connection, stop an embedded server."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            try:
                # Each step is bounded; this bounds them together, so that the
                # connection and an embedded server are always closed below.
                async with asyncio.timeout(3 * timeout):
                    await self._stop_hosting(timeout)
            except TimeoutError:
                log.error("actors did not stop within %gs; closing the connection", 3 * timeout)
            await self.runtime.conn.close(timeout)
            if self.runtime.telemetry.tracing:
                await asyncio.to_thread(flush, timeout)  # this process may end now
        finally:
            if self.server is not None:
                await self.server.stop()
            self._closed.set()

    async def _stop_hosting(self, timeout: float) -> None:
        """Stop discovery, readers, actors and leases, each bounded by ``timeout``."""
        await self.directory.close(timeout)  # discovery stops offering us at once
        await self.hosting.close(timeout)
        await self.runtime.mailboxes.close()  # drops not reported yet are said now
        await self.runtime.close_state_store()  # after the actors saved their last turns
        await self.runtime.security.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class _Opening:
    """``await ActorSystem.start()`` or ``async with ActorSystem.start() as system``."""

    def __init__(self, coro: Awaitable[ActorSystem]) -> None:
        self._coro = coro
        self._system: ActorSystem | None = None

    def __await__(self) -> Generator[Any, None, ActorSystem]:
        return self._coro.__await__()

    async def __aenter__(self) -> ActorSystem:
        self._system = await self._coro
        return self._system

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._system is not None:
            await self._system.close()
