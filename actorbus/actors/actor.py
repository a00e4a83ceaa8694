"""The Actor base class users subclass to write an agent."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    Protocol,
    TypeVar,
    Unpack,
    overload,
)

from pydantic import BaseModel

from actorbus.actors.call_options import AskOptions, PublishOptions, StreamOptions, TellOptions
from actorbus.actors.handlers import HandlerSpec, resolve_handlers
from actorbus.bus.client import Client
from actorbus.bus.schedules import Reminder
from actorbus.bus.subjects import validate_topic, validate_type
from actorbus.codecs.envelope import Envelope
from actorbus.codecs.errors import ActorBusError, StateVersionError
from actorbus.codecs.inbound import Inbound
from actorbus.telemetry import Telemetry

if TYPE_CHECKING:
    import datetime as dt

    from actorbus.actors.listing import DiscoveryQuery, Listing
    from actorbus.actors.timers import Timers

T = TypeVar("T")
R = TypeVar("R")


class ActorContext(Protocol):
    """What an actor instance talks to the world through: the ActorSystem hosting
    it (``self.system``), seen as the part an actor needs."""

    namespace: str
    system_id: str
    nc: Client
    reminders: ReminderBook

    @property
    def telemetry(self) -> Telemetry:
        """What the system records (an agent's own spans follow it)."""
        ...

    async def ask(
        self,
        address: str | None = None,
        message: Any = None,
        *,
        returns: type[Any] | None = None,
        **options: Unpack[AskOptions],
    ) -> Any: ...

    async def tell(
        self, address: str | None = None, message: Any = None, **options: Unpack[TellOptions]
    ) -> None: ...

    async def publish(
        self, topic: str, message: Any, **options: Unpack[PublishOptions]
    ) -> None: ...

    def stream(
        self,
        address: str,
        message: Any,
        *,
        returns: type[Any] | None = None,
        **options: Unpack[StreamOptions],
    ) -> AsyncIterator[Any]: ...

    async def discover(self, **query: Unpack[DiscoveryQuery]) -> list[Listing]: ...


class ReminderBook(Protocol):
    """What an actor does with its reminders (``actors/reminders.py``)."""

    async def set(
        self,
        address: str,
        name: str,
        message: Any,
        *,
        after: float | dt.timedelta | None = None,
        at: dt.datetime | None = None,
        every: float | dt.timedelta | None = None,
        intent: str | None = None,
    ) -> Reminder: ...

    async def cancel(self, address: str, name: str) -> bool: ...

    async def list(self, target: str) -> list[Reminder]: ...


class Crash(ActorBusError):
    """Raise from a handler to say the instance's state is broken: restart it."""

    code = "E_CRASH"


class Incoming(NamedTuple):
    """What a handler is working on: the envelope and the address it arrived at.

    A NamedTuple because one is made per message (cheaper than a dataclass).
    """

    message: Inbound
    address: str


# The message being handled in the current task; outgoing calls inherit its
# trace and session from here, so users never thread a context by hand.
current_incoming: ContextVar[Incoming | None] = ContextVar("actorbus_incoming", default=None)


class TimerSource(Protocol):
    """Where an instance's timers are kept (its cell: made when first used)."""

    def timer_set(self) -> Timers: ...


class StateKeeping(Protocol):
    """What an instance does with its declared state's keeper (``state_keeper.py``)."""

    async def save(self, state: BaseModel) -> None: ...

    async def clear(self) -> BaseModel: ...


def _declared_state(cls: type) -> type[BaseModel] | None:
    """The model ``state`` is annotated with on ``cls`` (or on a base)."""
    annotation = inspect.get_annotations(cls).get("state")
    if annotation is None:
        inherited: type[BaseModel] | None = getattr(cls, "state_model", None)
        return inherited
    if isinstance(annotation, str):  # from __future__ import annotations
        module = sys.modules.get(cls.__module__)
        try:
            annotation = eval(annotation, vars(module) if module else {}, dict(vars(cls)))
        except NameError as exc:
            raise TypeError(
                f"{cls.__qualname__}.state: {exc} (define the state model before the actor)"
            ) from None
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise TypeError(
            f"{cls.__qualname__}.state is annotated with {annotation!r}: declare state as a "
            "pydantic model (state: MyState)"
        )
    return annotation


def _default_type_name(cls_name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", cls_name).lower()


class Actor:
    """Base class of every agent.

    Class attributes tune an actor type:

    - ``type_name``: the address prefix (default: class name in kebab-case)
    - ``concurrency``: messages handled at once per instance (default 1, in order)
    - ``durable``: the delivery default of this type's handlers (``@handler(durable=)``
      overrides it per intent). A type with any durable handler reads its JetStream
      queue: at least once, acked after the handler succeeds, retried, dead-lettered.
      Senders that know the type (it is hosted or ``learn()``-ed in their system) send
      those intents durably unless the call says ``durable=False``.
    - ``retry_backoff``: seconds before each retry of a durable message whose handler
      failed (default: the system's ``DurableSettings.backoff``); after the last one
      the message is dead-lettered. A type whose handler calls something slow to
      recover (a webhook, a payment provider) waits longer than the bus default.
    - ``max_turn``: seconds a durable message's handler may run (default: the
      system's ``DurableSettings.max_turn``, 15 minutes). The message is kept in
      progress meanwhile, so a model call longer than ``ack_wait`` runs once; a turn
      past ``max_turn`` is treated as hung: cancelled, logged, and retried (then
      dead-lettered) like a failure
    - ``idempotent``: a durable message whose ``idempotency_key`` was handled already
      (by any instance, before any restart) is acked without running the handler
      (per intent with ``@handler(idempotent=)``)
    - ``max_restarts`` within ``restart_window`` seconds before the actor is stopped
    - ``restart_backoff``: (initial, maximum) seconds between restarts, with jitter
    - ``crash_on``: exception types that restart the instance (``Crash`` always does)
    - ``keyed``: a virtual actor: at most one live instance of each ``type/key`` in the
      whole namespace (an activation lease); other processes forward to it
    - ``key_by_session``: a lazily hosted type whose messages to the bare type
      address go to the instance keyed by the message's session id (one actor,
      and one state, per conversation: what an agent behind the gateway wants,
      where each A2A context is a session)
    - ``idle_timeout``: seconds without a message after which a lazily activated
      instance is passivated (stopped; the next message activates it again)
    - ``mailbox_size`` / ``mailbox_bytes``: messages (10,000) and bytes (32 MiB) that
      may wait for one instance (per subscription: its address, its type's anycast
      address, each topic); what does not fit is dropped and counted, and an ask
      is answered with ``RateLimitedError`` unless ``mailbox_overflow = "drop"``
    - ``state``, annotated with a pydantic model (``state: AccountState``): the
      instance's persistent state, loaded before its first message (spawned,
      lazily hosted or keyed), saved when a turn changed it (a durable turn's
      together with its sends and its message), sealed to the type's key
      (``ActorSystem.connect(state=StateSettings(...))`` chooses the store);
      ``state_version`` and ``migrate_state`` bring older states over
    - ``skills``, ``tags``, ``description``, ``protocols``: what the registry says
      about the type (skills default to the intents it handles; the description to
      the docstring's first line); ``advertise = False`` keeps it out of the registry
    - ``prompts``: prompt templates the type offers its callers (MCP clients see
      them through the gateway): name -> text with ``{argument}`` placeholders
    """

    type_name: ClassVar[str]
    concurrency: ClassVar[int] = 1
    durable: ClassVar[bool] = False
    security: ClassVar[str | None] = None  # "require" | "allow" | "off"; None: the system's
    idempotent: ClassVar[bool] = False
    retry_backoff: ClassVar[tuple[float, ...] | None] = None
    max_turn: ClassVar[float | None] = None
    max_restarts: ClassVar[int] = 5
    restart_window: ClassVar[float] = 60.0
    restart_backoff: ClassVar[tuple[float, float]] = (0.1, 5.0)
    crash_on: ClassVar[tuple[type[BaseException], ...]] = ()
    keyed: ClassVar[bool] = False
    key_by_session: ClassVar[bool] = False
    idle_timeout: ClassVar[float | None] = None
    mailbox_size: ClassVar[int] = 10_000
    mailbox_bytes: ClassVar[int] = 32 * 1024 * 1024
    mailbox_overflow: ClassVar[Literal["refuse", "drop"]] = "refuse"
    skills: ClassVar[tuple[str, ...]] = ()
    tags: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    prompts: ClassVar[Mapping[str, str]] = {}
    protocols: ClassVar[tuple[str, ...]] = ("actorbus",)
    advertise: ClassVar[bool] = True
    handlers: ClassVar[dict[str, HandlerSpec]] = {}
    topics: ClassVar[tuple[HandlerSpec, ...]] = ()
    has_durable_queue: ClassVar[bool] = False  # derived: any handler is durable
    state_model: ClassVar[type[BaseModel] | None] = None  # derived: ``state``'s annotation
    state_version: ClassVar[int] = 1

    _system: ActorContext
    _address: str
    _key: str
    _timer_source: TimerSource
    # The instance's persistent state, when its class declares one (``state:
    # MyState``, a pydantic model): loaded before the first message.
    state: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" not in cls.__dict__:
            cls.type_name = _default_type_name(cls.__name__)
        validate_type(cls.type_name)
        if cls.concurrency < 1:
            raise TypeError(f"{cls.__qualname__}.concurrency must be >= 1")
        if cls.mailbox_size < 1 or cls.mailbox_bytes < 1:
            raise TypeError(f"{cls.__qualname__}: mailbox_size and mailbox_bytes must be >= 1")
        if cls.mailbox_overflow not in ("refuse", "drop"):
            raise TypeError(f"{cls.__qualname__}.mailbox_overflow must be 'refuse' or 'drop'")
        if cls.max_turn is not None and cls.max_turn <= 0:
            raise TypeError(f"{cls.__qualname__}.max_turn must be > 0 (or None)")
        if cls.idle_timeout is not None and cls.idle_timeout <= 0:
            raise TypeError(f"{cls.__qualname__}.idle_timeout must be > 0 (or None)")
        cls.handlers = resolve_handlers(cls)
        topics = tuple(s for s in cls.handlers.values() if s.topic)
        for spec in topics:
            validate_topic(spec.topic or "", wildcards=True)
        cls.topics = topics
        cls.has_durable_queue = cls.durable or any(s.durable for s in cls.handlers.values())
        cls.state_model = _declared_state(cls)
        if cls.state_model is not None and cls.concurrency != 1:
            raise TypeError(
                f"{cls.__qualname__} declares state and concurrency {cls.concurrency}: a "
                "state is changed by one turn at a time (keep concurrency 1)"
            )

    @classmethod
    def migrate_state(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Bring a state stored by version ``version`` of the state model to
        ``state_version`` (override it when you raise ``state_version``); the
        default refuses with :class:`~actorbus.StateVersionError`."""
        raise StateVersionError(
            f"{cls.type_name}: a state stored by version {version} of "
            f"{cls.state_model.__name__ if cls.state_model else 'the state'} cannot be read "
            f"by version {cls.state_version}: override {cls.__qualname__}.migrate_state()"
        )

    async def save_state(self) -> None:
        """Save the state now, within the turn (it is saved at the turn's end
        anyway): a long turn keeps what it did so far."""
        await self._state_keeper().save(self.state)

    async def clear_state(self) -> None:
        """Delete this actor's stored state for good and start again from the
        model's defaults."""
        self.state = await self._state_keeper().clear()

    def _state_keeper(self) -> StateKeeping:
        keeper = self.__dict__.get("_keeper")
        if keeper is None:
            raise TypeError(
                f"{type(self).__qualname__} declares no state (annotate `state` with a "
                "pydantic model on the class)"
            )
        return keeper  # type: ignore[no-any-return]

    # -- reminders and timers -----------------------------------------------
    async def remind(
        self,
        name: str,
        message: Any,
        *,
        after: float | dt.timedelta | None = None,
        at: dt.datetime | None = None,
        every: float | dt.timedelta | None = None,
        intent: str | None = None,
    ) -> Reminder:
        """Have the broker deliver ``message`` to this actor ``after`` seconds, ``at``
        a time or ``every`` so many seconds, as a durable message: it fires while
        the actor is passivated (and activates it), after its process crashed and
        after a broker restart. Each firing is taken once under its own
        idempotency key (``self.envelope.context.idempotency_key``). Setting ``name`` again
        replaces the reminder; inside a durable turn it is set when the turn
        commits. The type needs a durable handler for ``message``."""
        cls = type(self)
        if not cls.has_durable_queue:
            raise TypeError(
                f"{cls.__qualname__} has no durable handler: a reminder arrives as a durable "
                "message (@handler(durable=True), or durable = True on the class)"
            )
        return await self._system.reminders.set(
            self.address, name, message, after=after, at=at, every=every, intent=intent
        )

    async def cancel_reminder(self, name: str) -> bool:
        """Cancel one of this actor's reminders; False when it had none of that name."""
        return await self._system.reminders.cancel(self.address, name)

    async def list_reminders(self) -> list[Reminder]:
        """This actor's reminders, as the broker keeps them."""
        return await self._system.reminders.list(self.address)

    def every(
        self, seconds: float | dt.timedelta, tick: Callable[[], Awaitable[None]], *, name: str = ""
    ) -> None:
        """Call ``tick`` (an async method of this actor) every ``seconds`` while this
        instance lives: in memory, stopped when the instance stops (passivation,
        restart, shutdown); a durable schedule is :meth:`remind`. Each tick is a
        turn of its own (never beside a message; a state it changed is saved) and
        does not keep an idle instance alive. ``name`` (default: the method's
        name) replaces a timer of the same name."""
        interval = seconds.total_seconds() if not isinstance(seconds, int | float) else seconds
        self._timer_set().start(name or getattr(tick, "__name__", "timer"), interval, tick)

    def cancel_timer(self, name: str) -> bool:
        """Stop a timer started by :meth:`every`; False when none of that name runs."""
        return self._timer_set().cancel(name)

    def _timer_set(self) -> Timers:
        source: TimerSource | None = getattr(self, "_timer_source", None)
        if source is None:
            who = getattr(self, "_address", type(self).__qualname__)
            raise RuntimeError(f"{who} is not running: timers start in on_start or a handler")
        return source.timer_set()

    # -- lifecycle hooks ---------------------------------------------------
    async def on_start(self) -> None:
        """Called before the first message; raising here restarts the instance."""

    async def on_stop(self) -> None:
        """Called once when the instance stops (shutdown, restart or passivation)."""

    # -- who am I ----------------------------------------------------------
    @property
    def key(self) -> str:
        """The key this instance was activated for: ``"eu"`` in ``billing/eu``."""
        return self._key

    @property
    def address(self) -> str:
        """This instance's address, ``type/key``: where others reach it."""
        return self._address

    @property
    def system(self) -> ActorContext:
        """The ActorSystem hosting this instance."""
        return self._system

    @property
    def envelope(self) -> Envelope:
        """The envelope being handled right now (session, trace, idempotency key)."""
        inc = current_incoming.get()
        if inc is None:
            raise RuntimeError("no message is being handled in this task")
        return inc.message.envelope

    # -- talking to others (trace and session travel along) ----------------
    @overload
    async def ask(
        self, address: str, message: Any, *, returns: type[R], **options: Unpack[AskOptions]
    ) -> R: ...
    @overload
    async def ask(
        self, address: str, message: Any, *, returns: None = None, **options: Unpack[AskOptions]
    ) -> Any: ...
    async def ask(
        self,
        address: str,
        message: Any,
        *,
        returns: type[Any] | None = None,
        **options: Unpack[AskOptions],
    ) -> Any:
        """Ask another actor and wait for its reply (typed by ``returns``). The
        message being handled travels along: the trace, and its session.

        Options as :meth:`actorbus.ActorSystem.ask` (``timeout``, ``intent``,
        ``session_id``, ``idempotency_key``, ``ttl_ms``, ``skill``)."""
        return await self._system.ask(address, message, returns=returns, **options)

    async def tell(self, address: str, message: Any, **options: Unpack[TellOptions]) -> None:
        """Send without waiting for an answer; ``durable=True`` stores it first.
        Inside a durable handler a durable send is held until the handler
        succeeded (the outbox). Options as :meth:`actorbus.ActorSystem.tell`."""
        await self._system.tell(address, message, **options)

    async def publish(self, topic: str, message: Any, **options: Unpack[PublishOptions]) -> None:
        """Publish on a pub/sub topic, to every subscribed handler."""
        await self._system.publish(topic, message, **options)

    def stream(
        self,
        address: str,
        message: Any,
        *,
        returns: type[Any] | None = None,
        **options: Unpack[StreamOptions],
    ) -> AsyncIterator[Any]:
        """Call a streaming handler and iterate its items (``async for``); leaving
        the loop early cancels the producer. Options as
        :meth:`actorbus.ActorSystem.stream`."""
        return self._system.stream(address, message, returns=returns, **options)
