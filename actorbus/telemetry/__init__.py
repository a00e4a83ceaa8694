"""Tracing and metrics wiring (OpenTelemetry).

Off unless asked for: by the standard ``OTEL_*`` environment variables (an OTLP
endpoint, ``OTEL_TRACES_EXPORTER``), by ``ACTORBUS_TRACE_DIR`` (the local
recorder behind ``actorbus trace``), by ``ActorSystem.connect(tracing=True)``,
or by an application that installed an OpenTelemetry SDK tracer provider of
its own. When off, a hop costs one attribute read.
"""

from actorbus.telemetry.config import configure, flush, shutdown
from actorbus.telemetry.state import STATE

__all__ = ["STATE", "configure", "flush", "shutdown"]
