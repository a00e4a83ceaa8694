"""Durable reminders: a message an actor gets at a time, or again and again.

A reminder is kept by the broker, not by a process (``bus/schedules.py``): it
fires while no instance of the actor is active (the firing activates it),
after its process crashed, and after the broker restarted. Each firing goes
through the actor's durable queue like any durable message: at least once,
retried, dead-lettered, committed with a declared state. Every firing has its
own idempotency key (``reminder:<name>:<when>``, with ``@<next firing>`` for a
repeating one) and is taken once under it, so a firing delivered twice runs
once.

A firing is checked before it runs, since anyone who may send the type durable
messages could copy one into its queue: the reminder's name and schedule are in
the sealed envelope, a one-time reminder's firing is refused before its time
and taken once, and a repeating one's only while its schedule is still the one
that sent it (a cancelled or replaced reminder's firings still waiting are
skipped).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import TYPE_CHECKING, Any

import nats.js.errors

from actorbus.actors.outbox import store_or_hold
from actorbus.actors.pipeline import Outgoing
from actorbus.actors.sending import SendOptions
from actorbus.bus.client import LazyHeaders, encode_headers
from actorbus.bus.schedules import (
    H_SCHEDULE,
    H_SCHEDULE_TARGET,
    H_SCHEDULE_TTL,
    H_TTL,
    LAST_FIRING,
    MIN_EVERY,
    RELAY_CONSUMER,
    Reminder,
    at_schedule,
    every_schedule,
    reminder_stream_name,
    schedule_time,
)
from actorbus.bus.subjects import Address
from actorbus.codecs.errors import AuthError, InvalidAddressError
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import H_MSG_ID

if TYPE_CHECKING:
    from actorbus.actors.runtime import Runtime
    from actorbus.actors.sending import Sender

log = logging.getLogger("actorbus.reminders")

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_KEY = "reminder:"
_CANCELLED = ".cancelled"  # where a cancelled reminder's last firing goes (nobody reads it)
_SLACK_MS = 2_000  # a firing's next time may sit this far off its stored time


class Reminders:
    """Set, cancel and list actors' reminders (``ActorSystem.reminders``; an actor
    uses :meth:`Actor.remind`)."""

    def __init__(self, rt: Runtime, sender: Sender) -> None:
        self.rt = rt
        self.sender = sender

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
    ) -> Reminder:
        """Have ``message`` delivered to ``address`` (``type/key``, a type with a
        durable queue) ``after`` seconds, ``at`` a time, or ``every`` so many
        seconds (the first firing one interval from now), until cancelled.
        Setting ``name`` again replaces that reminder. Inside a durable turn it
        is set when the turn commits."""
        addr = _address(address)
        schedule, when = _schedule(after, at, every)
        rt = self.rt
        await rt.durable.reminder_stream(addr.type)
        session = await self.sender.session(address, queued=True)
        opts = SendOptions(intent=intent, idempotency_key=f"{_KEY}{_valid_name(name)}:{when}")
        out = self.sender.encode(address, message, opts, durable=True, session=session)
        headers = {k: v for k, v in LazyHeaders(out.headers).items() if k != H_MSG_ID}
        headers |= {
            H_SCHEDULE: schedule,
            H_SCHEDULE_TARGET: rt.subjects.fired(addr),
            H_TTL: "never",
        }
        subject = rt.subjects.reminder(addr, name)
        what = f"reminder {name!r} of {address}"
        timeout = rt.durable_settings.store_timeout
        await store_or_hold(
            rt, subject, out._replace(headers=encode_headers(headers)), what, timeout
        )
        return Reminder(address, name, schedule)

    async def cancel(self, address: str, name: str) -> bool:
        """Cancel a reminder (its firings not yet handled are skipped); False when
        there was none."""
        addr = _address(address)
        rt = self.rt
        await rt.durable.reminder_stream(addr.type)
        subject = rt.subjects.reminder(addr, _valid_name(name))
        if not _active(await self._last(addr.type, subject)):
            return False
        # A schedule due at once replaces it; its firing lands where nobody reads
        # and expires, and the subject is left empty (nothing kept forever).
        gone = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        headers = {
            H_SCHEDULE: at_schedule(gone),
            H_SCHEDULE_TARGET: subject + _CANCELLED,
            H_SCHEDULE_TTL: "1s",
            H_TTL: "never",
        }
        what = f"cancelling reminder {name!r} of {address}"
        timeout = rt.durable_settings.store_timeout
        cancelling = Outgoing(b"", encode_headers(headers), "", "")
        await store_or_hold(rt, subject, cancelling, what, timeout)
        return True

    async def list(self, target: str) -> list[Reminder]:
        """The reminders of ``type/key``, or of every key of ``type``."""
        rt = self.rt
        addr = Address.parse(target)
        stream = reminder_stream_name(rt.namespace, addr.type)
        where = rt.subjects.reminders_of(addr if addr.key is not None else addr.type)
        try:
            info = await rt.js.stream_info(stream, subjects_filter=where)
        except nats.js.errors.NotFoundError:
            return []
        found = []
        for subject in sorted(info.state.subjects or {}):
            last = await self._last(addr.type, subject)
            if last is None or not _active(last):
                continue
            schedule = last[H_SCHEDULE]
            _, _, type_, key, name = subject.split(".", 4)
            found.append(Reminder(f"{type_}/{key}", name, schedule))
        return found

    async def waiting(self, type_: str) -> int:
        """Firings of ``type_``'s reminders that the broker made and no host has
        taken into the type's queue yet (none is running)."""
        rt = self.rt
        stream = reminder_stream_name(rt.namespace, type_)
        try:
            info = await rt.js.consumer_info(stream, RELAY_CONSUMER)
            return (info.num_pending or 0) + (info.num_ack_pending or 0)
        except nats.js.errors.NotFoundError:
            pass  # no host ever ran: every firing in the stream waits
        try:
            held = await rt.js.stream_info(stream, subjects_filter=rt.subjects.fired_type(type_))
        except nats.js.errors.NotFoundError:
            return 0
        return sum((held.state.subjects or {}).values())

    async def _last(self, type_: str, subject: str) -> dict[str, str] | None:
        """The headers of the schedule kept on ``subject`` (None: none is)."""
        try:
            last = await self.rt.js.get_last_msg(
                reminder_stream_name(self.rt.namespace, type_), subject
            )
        except nats.js.errors.NotFoundError:
            return None
        return dict(last.headers or {})


async def firing_key(
    rt: Runtime, address: str, env: Inbound, fired: str, data: bytes, stored_ms: int
) -> str | None:
    """The idempotency key a firing (``Ab-Fired: <name> <next>``) is taken once
    under; None when it is to be skipped (its reminder was cancelled or
    replaced). Raises :class:`AuthError` for a message that is not a genuine
    firing of the reminder it names."""
    name, _, next_at = fired.partition(" ")
    key = env.context.idempotency_key or ""
    prefix = f"{_KEY}{name}:"
    if not key.startswith(prefix):
        raise AuthError(f"a firing of reminder {name!r} carries another message")
    when = key[len(prefix) :]
    if when.startswith("at:"):
        due = schedule_time(when[3:])
        if next_at != LAST_FIRING or due is None:
            raise AuthError(f"reminder {name!r} fires once, not again at {next_at}")
        if stored_ms < due.timestamp() * 1000 - _SLACK_MS:
            raise AuthError(f"reminder {name!r} fired before its time ({when[3:]})")
        return key
    try:
        interval_ms = int(when.removeprefix("every:"))
    except ValueError:
        raise AuthError(f"reminder {name!r} has no schedule it could fire by ({when!r})") from None
    upcoming = schedule_time(next_at)
    if upcoming is None:
        raise AuthError(f"a firing of reminder {name!r} names no next time ({next_at!r})")
    ahead = upcoming.timestamp() * 1000 - stored_ms
    if not -_SLACK_MS <= ahead <= interval_ms + _SLACK_MS:
        raise AuthError(f"a firing of reminder {name!r} is out of its schedule")
    addr = Address.parse(address)
    try:
        kept = await rt.js.get_last_msg(
            reminder_stream_name(rt.namespace, addr.type),
            rt.subjects.reminder(addr, name),
        )
    except nats.js.errors.NotFoundError:
        kept = None
    if kept is None or kept.data != data or not (kept.headers or {}).get(H_SCHEDULE):
        log.info("%s: reminder %r was cancelled or replaced; its firing skipped", address, name)
        return None
    return f"{key}@{next_at}"


def _active(schedule: dict[str, str] | None) -> bool:
    """Is this a reminder's schedule (not a cancellation's, nor nothing)?"""
    if schedule is None or H_SCHEDULE not in schedule:
        return False
    return not schedule.get(H_SCHEDULE_TARGET, "").endswith(_CANCELLED)


def _address(address: str) -> Address:
    addr = Address.parse(address)
    if addr.key is None:
        raise InvalidAddressError(f"a reminder is for a 'type/key' address, not {address!r}")
    return addr


def _valid_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(
            f"reminder name {name!r}: 1-64 letters, digits, '-' or '_' (it is a subject token)"
        )
    return name


def _seconds(value: float | dt.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def _schedule(
    after: float | dt.timedelta | None, at: dt.datetime | None, every: float | dt.timedelta | None
) -> tuple[str, str]:
    """The ``Nats-Schedule`` value and the idempotency key's ``when`` part."""
    given = [n for n, v in (("after", after), ("at", at), ("every", every)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of after=, at= or every= (got {given or 'none'})")
    if every is not None:
        seconds = _seconds(every)
        if seconds < MIN_EVERY:
            raise ValueError(f"every={seconds:g}: reminders repeat at most once a second")
        schedule = every_schedule(seconds)
        return schedule, f"every:{schedule.removeprefix('@every ').removesuffix('ms')}"
    if after is not None:
        seconds = _seconds(after)
        if seconds < 0:
            raise ValueError(f"after={seconds:g}: a reminder cannot be set in the past")
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    assert at is not None
    schedule = at_schedule(at)
    return schedule, f"at:{schedule.removeprefix('@at ')}"
