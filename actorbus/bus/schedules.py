"""Reminders on the server's own message scheduling (nats-server 2.12+, ADR-51).

Each actor type's reminders live in a stream of their own,
``actorbus-{ns}-r-{type}`` on ``{ns}.rem.{type}.>``, not in its durable queue: a
stream that takes schedules lets whoever may publish into it purge a subject
(the server rolls a subject up under each schedule message), and any member may
send durable messages to any type. Only the type's own hosts (and unlimited
members) may publish on its reminder subjects (``security/broker.py``).

One reminder is one schedule message on ``{ns}.rem.{type}.{key}.{name}``, with
``Nats-Schedule`` (``@at <time>`` or ``@every <interval>``), ``Nats-TTL: never``
(a schedule outlives the stream's ``max_age``) and ``Nats-Schedule-Target`` on
``{ns}.rem.{type}.{key}``. Setting the same name again replaces it; cancelling it
replaces it with a schedule due at once whose firing goes nowhere anyone reads
and expires a second later, which leaves the subject empty. When a reminder is
due the server stores a copy of its message (its body and our headers) on the
target, with ``Nats-Scheduler`` (the schedule's subject) and
``Nats-Schedule-Next`` (the next firing, or ``purge`` after the last); the
type's hosts relay each firing into the actor's durable queue
(``actors/reminder_relay.py``).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import dataclass
from typing import Final

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from actorbus.bus.jetstream import DurableSettings, create_or_update, patiently
from actorbus.bus.subjects import Subjects

H_SCHEDULE: Final = "Nats-Schedule"
H_SCHEDULE_TARGET: Final = "Nats-Schedule-Target"
H_SCHEDULE_TTL: Final = "Nats-Schedule-TTL"
H_TTL: Final = "Nats-TTL"
H_SCHEDULER: Final = "Nats-Scheduler"  # set by the server on a firing
H_SCHEDULE_NEXT: Final = "Nats-Schedule-Next"  # likewise: the next firing, or "purge"
LAST_FIRING: Final = "purge"

MIN_EVERY: Final = 1.0  # seconds: the scheduler's resolution
RELAY_CONSUMER: Final = "relay"  # the type's hosts' shared consumer of its firings


@dataclass(frozen=True, slots=True)
class Reminder:
    """One reminder as the broker keeps it."""

    address: str
    name: str
    schedule: str  # "@at 2026-11-26T18:00:00Z" or "@every 30000ms"

    @property
    def repeats(self) -> bool:
        """An ``every=`` reminder (until cancelled), not a one-time one."""
        return self.schedule.startswith("@every")


def reminder_stream_name(ns: str, type_: str) -> str:
    return f"actorbus-{ns}-r-{type_}"


def reminders_config(subjects: Subjects, type_: str, s: DurableSettings) -> StreamConfig:
    """The stream of one type's reminders and their firings (firings age out as
    durable messages do; the schedules themselves never: ``Nats-TTL: never``)."""
    return StreamConfig(
        name=reminder_stream_name(subjects.ns, type_),
        subjects=[subjects.reminders_type(type_)],
        allow_msg_schedules=True,
        allow_msg_ttl=True,
        storage=StorageType.FILE,
        num_replicas=s.replicas,
        max_age=s.max_age + s.retention_grace,
        duplicate_window=s.duplicate_window,
        discard=DiscardPolicy.OLD,
    )


async def ensure_reminders(
    js: JetStreamContext, subjects: Subjects, type_: str, s: DurableSettings
) -> None:
    """Make one type's reminder stream (or bring it up to its settings)."""
    config = reminders_config(subjects, type_, s)
    await patiently(functools.partial(create_or_update, js, config), s.start_timeout)


def at_schedule(when: dt.datetime) -> str:
    """``@at`` for ``when`` (aware; naive is taken as UTC), to the second, rounded
    up so that a reminder never fires before its time."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    when = when.astimezone(dt.UTC)
    if when.microsecond:
        when = when.replace(microsecond=0) + dt.timedelta(seconds=1)
    return f"@at {when.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def every_schedule(seconds: float) -> str:
    """``@every`` for an interval in seconds (whole milliseconds)."""
    return f"@every {math.ceil(seconds * 1000)}ms"


def schedule_time(text: str) -> dt.datetime | None:
    """The time in an ``@at`` schedule or a ``Nats-Schedule-Next`` header (None:
    neither, or ``purge``)."""
    text = text.removeprefix("@at ").strip()
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
