"""What a cell adds when tracing or metrics are on: each message handled inside
its span, restarts and failures counted. Chosen once, when the system opens
(``Hosting.cell_class``), so a cell of a system without telemetry runs none of it.
"""

from __future__ import annotations

from nats.aio.msg import Msg

from actorbus.actors.cell import ActorCell
from actorbus.actors.streaming import Turn
from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.inbound import Inbound
from actorbus.state.record import Position
from actorbus.telemetry import metrics as meters, spans


class ObservedCell(ActorCell):
    """A cell when tracing or metrics are on (chosen once, when the system opens):
    each message handled inside its span, restarts and failures counted."""

    def _arrival(self) -> int:
        return spans.now_ns() if self.rt.telemetry.tracing else 0

    def _counted_restart(self) -> None:
        if self.rt.telemetry.metrics:
            meters.restarts.add(1, {"actorbus.destination.type": self.cls.type_name})

    def _counted_failure(self, env: Inbound, err: ActorBusError) -> None:
        if self.rt.telemetry.metrics:
            labels = meters.labels(env.src, self.address)
            where = {"error.type": err.code, "messaging.operation.type": "process"}
            meters.failures.add(1, {**labels, **where})

    async def _handle(
        self,
        msg: Msg,
        env: Inbound,
        arrived: int = 0,
        turn: Turn | None = None,
        position: Position | None = None,
        attempt: int = 0,
    ) -> Exception | None:
        telemetry = self.rt.telemetry
        if not telemetry.tracing:
            return await super()._handle(msg, env, arrived, turn, position)
        with spans.processing(
            self.address,
            msg.subject,
            msg.headers,
            env,
            len(msg.data),
            arrived,
            bool(msg.reply),
            telemetry.preview,
            attempt,
        ) as span:
            failed = await super()._handle(msg, env, arrived, turn, position)
            if failed is not None:
                spans.failed(span, failed)
            return failed
