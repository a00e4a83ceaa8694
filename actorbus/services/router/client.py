"""The router's online half: an ``ask`` that picks its destination among healthy
instances and survives bad ones.

    router = DestinationRouter(system, LatencyAware(), bulkhead=32, hedge_after=0.05)
    answer = await router.ask(question, to=["worker/1", "worker/2"], key=session_id)
    answer = await router.ask(question, skill="translate")   # instances from the registry

For one message: its key's lane (per-session order, ``KeyedQueues``), the
candidates (given, or the healthy actor addresses the registry knows for a
skill), the policy's order (``destinations``), then attempts: each to the next
destination whose circuit allows it, inside that destination's bulkhead; a
failure worth retrying (``resilience.retryable``) backs off with jitter and goes
on to the next destination; with ``hedge_after``, a second request goes to the
next destination if the first has not answered by then, the first answer wins
and the other is cancelled (both carry the same idempotency key, so an
idempotent handler runs the work once). Every attempt teaches the policy and the
destination's circuit breaker.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics

from actorbus.actors.system import ActorSystem
from actorbus.codecs.errors import ActorBusError, ActorNotFoundError
from actorbus.services.router.destinations import FirstMatch, Policy
from actorbus.services.router.resilience import (
    Bulkhead,
    BulkheadFullError,
    CircuitBreaker,
    CircuitOpenError,
    KeyedQueues,
    RetryPolicy,
    retryable,
)

_meter = metrics.get_meter("actorbus.router")
_decisions = _meter.create_counter(
    "actorbus.router.decisions", description="messages routed, by destination type"
)
_hedges = _meter.create_counter("actorbus.router.hedges", description="hedged requests fired")
_opened = _meter.create_counter(
    "actorbus.router.circuit.opened", description="circuits that opened, by destination type"
)


@dataclass
class RouterStats:
    """What the router did (also exported as OpenTelemetry metrics)."""

    decisions: Counter[str] = field(default_factory=Counter)  # destination -> messages won
    attempts: int = 0
    retries: int = 0
    hedges: int = 0
    hedge_wins: int = 0  # hedges whose second request answered first
    refused: int = 0  # bulkheads full, circuits open


class DestinationRouter:
    def __init__(
        self,
        system: ActorSystem,
        policy: Policy | None = None,
        *,
        retry: RetryPolicy | None = None,
        failures: int = 3,
        cooldown: float = 5.0,
        bulkhead: int | None = None,
        hedge_after: float | None = None,
        timeout: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.system = system
        self.policy = policy or FirstMatch()
        self.retry = retry or RetryPolicy()
        self.failures = failures
        self.cooldown = cooldown
        self.bulkhead = Bulkhead(bulkhead) if bulkhead else None
        self.hedge_after = hedge_after
        self.timeout = timeout
        self.rng = rng or random.Random()
        self.queues = KeyedQueues()
        self.circuits: dict[str, CircuitBreaker] = {}
        self.stats = RouterStats()

    def circuit(self, destination: str) -> CircuitBreaker:
        breaker = self.circuits.get(destination)
        if breaker is None:
            breaker = self.circuits[destination] = CircuitBreaker(self.failures, self.cooldown)
        return breaker

    async def candidates(
        self, to: Sequence[str] | None, skill: str | None, name: str | None = None
    ) -> list[str]:
        """The destinations given, or the healthy actors the registry knows for a
        skill or an actor type ``name``."""
        if to is not None:
            return list(dict.fromkeys(to))
        if skill is None and name is None:
            raise ValueError("give the destinations (to=), a skill (skill=) or a type (name=)")
        listings = await (
            self.system.discover(skill=skill) if skill else self.system.discover(name=name)
        )
        found = sorted({lst.address for lst in listings if lst.address})
        if not found:
            raise ActorNotFoundError(f"no healthy actor offers {skill or name!r}")
        return found

    async def ask(
        self,
        message: Any,
        *,
        to: Sequence[str] | None = None,
        skill: str | None = None,
        name: str | None = None,
        key: str | None = None,
        intent: str | None = None,
        timeout: float | None = None,
        returns: type[Any] | None = None,
    ) -> Any:
        """The answer of the first destination that gives one (see the module
        docstring); the last failure if none does, or CircuitOpenError /
        BulkheadFullError when every destination refuses at once."""
        candidates = await self.candidates(to, skill, name)
        async with self.queues.turn(key):
            ordered = self.policy.order(candidates, key)
            idem = (key and f"{key}:{uuid.uuid4().hex}") or uuid.uuid4().hex  # one per message
            call = _Call(message, intent, timeout or self.timeout, returns, idem)
            return await self._attempts(ordered, call)

    async def _attempts(self, ordered: list[str], call: _Call) -> Any:
        last: BaseException | None = None
        start = 0
        for attempt in range(self.retry.attempts):
            usable = self._usable(ordered[start:] + ordered[:start])
            if not usable:
                break
            primary, spare = usable[0], usable[1] if len(usable) > 1 else None
            start = (ordered.index(primary) + 1) % len(ordered)
            try:
                if self.hedge_after is not None and spare is not None:
                    return await self._hedged(primary, spare, call)
                return await self._attempt(primary, call)
            except (BulkheadFullError, CircuitOpenError) as exc:
                last = exc
                self.stats.refused += 1
                continue  # full or resting: the next destination at once, no backoff
            except ActorBusError as exc:
                if not retryable(exc):
                    raise
                last = exc
            if attempt + 1 < self.retry.attempts:
                self.stats.retries += 1
                await asyncio.sleep(self.retry.delay(attempt, self.rng))
        if last is not None:
            raise last
        self.stats.refused += 1
        waits = [self.circuit(d).retry_in() for d in ordered]
        raise CircuitOpenError(ordered, min(waits) if waits else 0.0)

    def _usable(self, ordered: list[str]) -> list[str]:
        """The first two destinations whose circuit would let a request through."""
        return [d for d in ordered if self.circuit(d).available()][:2]

    async def _attempt(self, destination: str, call: _Call) -> Any:
        breaker = self.circuit(destination)
        if not breaker.allow():  # taken by another request's probe meanwhile
            raise CircuitOpenError([destination], breaker.retry_in())
        if self.bulkhead is not None:
            try:
                self.bulkhead.take(destination)
            except BulkheadFullError:
                breaker.abandon()  # never sent: no verdict on the destination
                raise
        self.stats.attempts += 1
        t0 = time.perf_counter()
        try:
            result = await self.system.ask(
                destination,
                call.message,
                timeout=call.timeout,
                intent=call.intent,
                returns=call.returns,
                idempotency_key=call.idempotency_key,
            )
        except ActorBusError as exc:
            worked = not retryable(exc)  # the handler's own error: the destination is up
            self.policy.observe(destination, time.perf_counter() - t0, worked)
            if worked:
                breaker.success()
            else:
                was = breaker.state
                breaker.failure()
                if breaker.state == "open" and was != "open":
                    _opened.add(1, {"actorbus.destination.type": _type(destination)})
            raise
        except asyncio.CancelledError:  # a hedge lost: neither success nor failure
            breaker.abandon()
            raise
        finally:
            if self.bulkhead is not None:
                self.bulkhead.give_back(destination)
        self.policy.observe(destination, time.perf_counter() - t0, True)
        breaker.success()
        self.stats.decisions[destination] += 1
        _decisions.add(1, {"actorbus.destination.type": _type(destination)})
        return result

    async def _hedged(self, primary: str, spare: str, call: _Call) -> Any:
        first = asyncio.create_task(self._attempt(primary, call), name=f"route {primary}")
        done, _ = await asyncio.wait({first}, timeout=self.hedge_after)
        if done:
            return first.result()
        self.stats.hedges += 1
        _hedges.add(1)
        second = asyncio.create_task(self._attempt(spare, call), name=f"hedge {spare}")
        pending = {first, second}
        failure: BaseException | None = None
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is None:
                        if task is second:
                            self.stats.hedge_wins += 1
                        return task.result()
                    failure = task.exception()
        finally:
            for task in pending:  # the loser: cancelled, its answer never taken
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, ActorBusError):
                    await task
        assert failure is not None
        raise failure


@dataclass(frozen=True)
class _Call:
    message: Any
    intent: str | None
    timeout: float
    returns: type[Any] | None
    idempotency_key: str


def _type(address: str) -> str:
    return address.partition("/")[0]
