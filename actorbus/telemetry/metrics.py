"""OpenTelemetry metrics of the bus: request duration, message bytes, failures by
error category, restarts, durable queue depth and consumer lag per actor, and
the size and write time of actors' declared state.

Attributes are limited to the source actor type, the destination actor type
and the protocol (plus the error category on failures): actor keys, message
ids and intents would make the series count grow without bound. Recorded only
while a meter provider is configured (``Telemetry.metrics``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

_meter = metrics.get_meter("actorbus")

request_duration = _meter.create_histogram(
    "actorbus.request.duration",
    unit="s",
    description="time from sending an ask to its reply (or error), at the caller",
)
message_size = _meter.create_histogram(
    "actorbus.message.size", unit="By", description="encoded size of messages sent"
)
failures = _meter.create_counter(
    "actorbus.failures",
    description="failed requests (operation 'send', at the caller) and handlers ('process'), "
    "by error category (error.type: the taxonomy's code)",
)
restarts = _meter.create_counter(
    "actorbus.actor.restarts", description="actor instances restarted after a crash"
)
state_size = _meter.create_histogram(
    "actorbus.state.size", unit="By", description="stored size of an actor's state at each save"
)
state_write_duration = _meter.create_histogram(
    "actorbus.state.write.duration",
    unit="s",
    description="time to save an actor's state (sealed, compare-and-set, confirmed)",
)
mailbox_dropped = _meter.create_counter(
    "actorbus.mailbox.dropped",
    description="messages that did not fit an actor's mailbox (tells dropped, asks refused)",
)

# Durable queues report here (refreshed by their readers); the gauges sum them
# per actor type (one series per type, however many keys).
queue_state: dict[str, tuple[int, int]] = {}  # address (or 'type/*') -> (depth, lag)


def _observe(index: int) -> Any:
    def callback(_: CallbackOptions) -> Iterable[Observation]:
        totals: dict[str, int] = {}
        for address, values in list(queue_state.items()):
            type_ = address.split("/", 1)[0]
            totals[type_] = totals.get(type_, 0) + values[index]
        return [Observation(v, {"actorbus.destination.type": t}) for t, v in totals.items()]

    return callback


_meter.create_observable_gauge(
    "actorbus.queue.depth",
    callbacks=[_observe(0)],
    description="durable messages stored and not yet acked (pending + in flight)",
)
_meter.create_observable_gauge(
    "actorbus.queue.lag",
    callbacks=[_observe(1)],
    description="durable messages not yet delivered to the actor (consumer lag)",
)


def labels(source: str, destination: str, protocol: str = "actorbus") -> dict[str, str]:
    """The only attributes metrics carry: actor types, not addresses."""
    return {
        "actorbus.source.type": source.split("/", 1)[0],
        "actorbus.destination.type": destination.split("/", 1)[0].split(":", 1)[0],
        "actorbus.protocol": protocol,
    }
