"""Turning tracing and metrics on from the standard ``OTEL_*`` variables.

- ``OTEL_SDK_DISABLED=true`` keeps everything off.
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (or
  ``OTEL_TRACES_EXPORTER=otlp|console``) export spans over OTLP/HTTP (Jaeger,
  Phoenix, any collector); ``OTEL_SERVICE_NAME`` names the process;
  ``OTEL_TRACES_SAMPLER`` and its argument pick the sampler (the SDK reads them).
- ``OTEL_METRICS_EXPORTER=otlp|console`` (or an OTLP metrics endpoint) exports
  metrics the same way, every ``OTEL_METRIC_EXPORT_INTERVAL`` ms.
- ``ACTORBUS_TRACE_DIR`` also records finished spans there as JSON lines, for
  ``actorbus trace <trace_id>`` when no tracing UI is at hand.
- ``ACTORBUS_TRACE_PREVIEW=N`` adds a redacted preview (N characters) of each
  message's content to its spans; off by default (size and hash only).
- ``ACTORBUS_SPAN_SERVICE_NAME=1`` copies ``service.name`` onto every span, for
  backends that drop resource attributes (Phoenix).

An application that installed an SDK tracer provider itself keeps it: actorbus
only adds its spans to it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)

from actorbus import environment as env
from actorbus.extras import require

log = logging.getLogger("actorbus.telemetry")


@dataclass(frozen=True)
class Telemetry:
    """What a system records, chosen once when it opens (:func:`configure`); the
    hot paths read it from their runtime, so a system without telemetry pays
    one attribute read per hop."""

    tracing: bool = False
    metrics: bool = False
    preview: int = 0  # characters of a redacted content preview in spans (0: none)

    @property
    def on(self) -> bool:
        """Anything recorded at all (the observed sender and cell are chosen)."""
        return self.tracing or self.metrics


OFF: Final = Telemetry()

_lock = threading.Lock()
_configured = False
_chosen = OFF  # what this process's providers record (OpenTelemetry's are per process)
_providers: list[object] = []


# Per kind of signal: the variable naming its exporter, and its own OTLP endpoint.
_ASKING: Final = {
    "traces": (env.OTEL_TRACES_EXPORTER, env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
    "metrics": (env.OTEL_METRICS_EXPORTER, env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT),
}


def _wanted_exporter(kind: str) -> str | None:
    """'otlp', 'console' or None for traces/metrics, by the standard variables."""
    exporter, endpoint = _ASKING[kind]
    explicit = (exporter.get() or "").lower()
    if explicit:
        return None if explicit == "none" else explicit.split(",")[0]
    if env.OTEL_EXPORTER_OTLP_ENDPOINT.get() or endpoint.get():
        return "otlp"
    return None


def _asked_by(kind: str) -> str:
    """The variable that turned the OTLP exporter on, as the user set it."""
    for variable in (*_ASKING[kind], env.OTEL_EXPORTER_OTLP_ENDPOINT):
        value = variable.get()
        if value:
            return f"{variable.name}={value}"
    return "asked for in code"


_OTLP_PACKAGE = "opentelemetry-exporter-otlp-proto-http"


def configure(force: bool | None = None) -> Telemetry:
    """Set tracing (and metrics) up once per process; returns what a system that
    opens now records.

    ``force=True`` turns tracing on even without variables (spans then go to the
    exporters the variables name, the local recorder, or nowhere but the
    metrics); ``False`` turns it off for the systems that open from now on.
    """
    global _configured, _chosen
    with _lock:
        if force is False:
            _chosen = OFF
            return OFF
        if _configured and not force:
            return _chosen
        _configured = True
        _chosen = _choose(force)
        return _chosen


def _choose(force: bool | None) -> Telemetry:
    """Providers and exporters as the variables (or ``force``) ask."""
    if (env.OTEL_SDK_DISABLED.get() or "").lower() == "true":
        return OFF
    preview = int(env.ACTORBUS_TRACE_PREVIEW.get() or 0)
    exporter = _wanted_exporter("traces")
    record_dir = env.ACTORBUS_TRACE_DIR.get() or ""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # the application set one up
        provider = current
    elif exporter or record_dir or force:
        provider = TracerProvider(resource=_resource())
        trace.set_tracer_provider(provider)
        _providers.append(provider)
    else:
        return OFF
    if provider is not current:
        _add_exporters(provider, exporter, record_dir)
    return Telemetry(tracing=True, metrics=_configure_metrics(), preview=preview)


def _resource() -> Resource:
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    attrs = {} if env.OTEL_SERVICE_NAME.get() else {"service.name": "actorbus"}
    return Resource.create(attrs)


class ServiceNameSpanProcessor(SpanProcessor):
    """Copies the resource's ``service.name`` onto each span as an attribute: some
    backends (Phoenix) keep no resource attributes and could not tell processes
    apart. Add it before the exporting processor."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        service = span.resource.attributes.get("service.name")
        if service is not None and (span.attributes or {}).get("service.name") is None:
            span.set_attribute("service.name", str(service))

    def on_end(self, span: ReadableSpan) -> None:
        return None


def _add_exporters(provider: TracerProvider, exporter: str | None, record_dir: str) -> None:
    if env.ACTORBUS_SPAN_SERVICE_NAME.flag():
        provider.add_span_processor(ServiceNameSpanProcessor())
    if exporter == "otlp":
        exporters = require(
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "otlp",
            f"exporting spans over OTLP ({_asked_by('traces')})",
            _OTLP_PACKAGE,
        )
        provider.add_span_processor(BatchSpanProcessor(exporters.OTLPSpanExporter()))
    elif exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter:
        log.warning("OTEL_TRACES_EXPORTER=%s is not supported here (otlp, console)", exporter)
    if record_dir:
        from actorbus.telemetry.recorder import JsonlSpanExporter

        provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(record_dir)))


def _configure_metrics() -> bool:
    """A meter provider as the variables ask (or the application's); whether
    metrics are recorded."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

    if isinstance(metrics.get_meter_provider(), SdkMeterProvider):
        return True  # the application set one up: record into it
    exporter = _wanted_exporter("metrics")
    if exporter is None:
        return False
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )

    chosen: MetricExporter
    if exporter == "otlp":
        exporters = require(
            "opentelemetry.exporter.otlp.proto.http.metric_exporter",
            "otlp",
            f"exporting metrics over OTLP ({_asked_by('metrics')})",
            _OTLP_PACKAGE,
        )
        chosen = exporters.OTLPMetricExporter()
    else:
        chosen = ConsoleMetricExporter()
    provider = MeterProvider(
        resource=_resource(), metric_readers=[PeriodicExportingMetricReader(chosen)]
    )
    metrics.set_meter_provider(provider)
    _providers.append(provider)
    return True


def flush(timeout: float = 5.0) -> None:
    """Export what is buffered now (a process about to end loses nothing)."""
    for provider in _providers:
        force_flush = getattr(provider, "force_flush", None)
        if force_flush is not None:
            try:
                force_flush(int(timeout * 1000))
            except Exception as exc:
                log.debug("telemetry flush: %r", exc)
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider) and current not in _providers:
        current.force_flush(int(timeout * 1000))


def shutdown() -> None:
    """Flush and stop what ``configure`` started (spans still buffered go out)."""
    for provider in _providers:
        flush = getattr(provider, "shutdown", None)
        if flush is not None:
            try:
                flush()
            except Exception as exc:
                log.debug("telemetry shutdown: %r", exc)
