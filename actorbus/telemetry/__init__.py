"""Tracing and metrics wiring (OpenTelemetry).

Off unless asked for: by the standard ``OTEL_*`` environment variables (an OTLP
endpoint, ``OTEL_TRACES_EXPORTER``), by ``ACTORBUS_TRACE_DIR`` (the local
recorder behind ``actorbus trace``), by ``ActorSystem.connect(tracing=True)``,
or by an application that installed an OpenTelemetry SDK tracer provider of
its own. What a system records is chosen when it opens (:class:`Telemetry`,
held by its runtime); when off, a hop costs one attribute read.
"""

from actorbus.telemetry.config import OFF, Telemetry, configure, flush, shutdown

__all__ = ["OFF", "Telemetry", "configure", "flush", "shutdown"]
