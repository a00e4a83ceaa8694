"""OpenTelemetry metrics: request duration, message bytes, failures by category,
restarts, queue depth and lag per actor type; attributes kept to actor types."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import BaseModel

from actorbus import Actor, Crash, RemoteError, handler
from actorbus.actors import durable
from actorbus.telemetry import configure

_READER = InMemoryMetricReader()


@pytest.fixture(scope="module")
def reader() -> InMemoryMetricReader:
    """One SDK meter provider for the process (OpenTelemetry allows setting it once)."""
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
    return _READER


@pytest.fixture
def recorded(reader: InMemoryMetricReader) -> Any:
    assert configure(True).metrics  # the reader's provider is an SDK one: metrics recorded
    try:
        yield reader
    finally:
        configure(False)


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    found = []
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


class Job(BaseModel):
    n: int


class Worker(Actor):
    durable = True
    gate: asyncio.Event | None = None

    @handler
    async def work(self, job: Job) -> int:
        if job.n < 0:
            raise ValueError("negative")
        if job.n == 13:
            raise Crash("unlucky")
        if Worker.gate is not None:
            await Worker.gate.wait()
        return job.n


async def test_requests_bytes_failures_and_restarts_are_measured(
    make_system, recorded: Any
) -> None:
    host = await make_system()
    await host.spawn(Worker, "m")
    caller = await make_system()
    for n in range(3):
        await caller.ask("worker/m", Job(n=n))
    with pytest.raises(RemoteError):
        await caller.ask("worker/m", Job(n=-1))
    with pytest.raises(RemoteError):
        await caller.ask("worker/m", Job(n=13))
    [duration] = points(recorded, "actorbus.request.duration")
    assert duration.count == 5
    assert dict(duration.attributes) == {
        "actorbus.source.type": "client",
        "actorbus.destination.type": "worker",
        "actorbus.protocol": "actorbus",
    }
    sizes = points(recorded, "actorbus.message.size")
    assert sum(p.count for p in sizes) >= 5
    by_kind = {
        (p.attributes["messaging.operation.type"], p.attributes["error.type"]): p.value
        for p in points(recorded, "actorbus.failures")
    }
    assert by_kind == {("send", "E_HANDLER"): 2, ("process", "E_HANDLER"): 2}
    restarts = points(recorded, "actorbus.actor.restarts")
    assert [p.value for p in restarts] == [1]


async def test_queue_depth_and_lag_per_actor_type(
    make_system, recorded: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(durable, "_DEPTH_EVERY", 0.05)
    Worker.gate = asyncio.Event()
    try:
        host = await make_system()
        await host.spawn(Worker, "q1")
        for n in range(5):
            await host.tell("worker/q1", Job(n=n), durable=True)

        async def depth_is(n: int) -> None:
            while True:
                depth = {
                    p.attributes["actorbus.destination.type"]: p.value
                    for p in points(recorded, "actorbus.queue.depth")
                }
                if depth.get("worker") == n:
                    return
                await asyncio.sleep(0.05)  # the gauge refreshes on its own schedule

        await asyncio.wait_for(depth_is(5), 5)  # one in flight (held), four waiting
        lag = {
            p.attributes["actorbus.destination.type"]: p.value
            for p in points(recorded, "actorbus.queue.lag")
        }
        assert lag["worker"] == 4
        Worker.gate.set()
        await asyncio.wait_for(depth_is(0), 5)
    finally:
        Worker.gate = None


async def test_state_size_and_write_time_per_actor_type(make_system, recorded: Any) -> None:
    from _actors import Counted

    host = await make_system()
    await host.spawn(Counted, "m")
    for _ in range(3):
        await host.ask("counted/m", "x", intent="bump")
    [size] = points(recorded, "actorbus.state.size")
    [duration] = points(recorded, "actorbus.state.write.duration")
    assert dict(size.attributes) == {"actorbus.destination.type": "counted"}
    assert size.count == duration.count == 4  # the activation's claim and three turns
    assert size.min > 0
    assert duration.max > 0
