"""The OpenTelemetry SDK's providers and exporters, set up as the standard
variables ask (see ``telemetry.config``, which decides whether anything is
recorded). Imported only by a process that records: the SDK costs a process
start about 30 ms that one which records nothing need not pay."""

from __future__ import annotations

import logging

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
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

_OTLP_PACKAGE = "opentelemetry-exporter-otlp-proto-http"


def tracer_provider(exporter: str | None, record_dir: str, asked_by: str) -> TracerProvider:
    """A tracer provider of ours, installed, exporting as asked (``asked_by``
    names the variable that asked for OTLP, for the error when it is missing)."""
    provider = TracerProvider(resource=_resource())
    trace.set_tracer_provider(provider)
    _add_exporters(provider, exporter, record_dir, asked_by)
    return provider


def meter_provider(exporter: str | None, asked_by: str) -> MeterProvider | None:
    """A meter provider of ours, installed, when metrics are asked for and the
    application installed none (None otherwise)."""
    if records_metrics() or exporter is None:
        return None
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
            f"exporting metrics over OTLP ({asked_by})",
            _OTLP_PACKAGE,
        )
        chosen = exporters.OTLPMetricExporter()
    else:
        chosen = ConsoleMetricExporter()
    provider = MeterProvider(
        resource=_resource(), metric_readers=[PeriodicExportingMetricReader(chosen)]
    )
    metrics.set_meter_provider(provider)
    return provider


def records_metrics() -> bool:
    """Whether an SDK meter provider (the application's or ours) records metrics."""
    return isinstance(metrics.get_meter_provider(), MeterProvider)


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


def _add_exporters(
    provider: TracerProvider, exporter: str | None, record_dir: str, asked_by: str
) -> None:
    if env.ACTORBUS_SPAN_SERVICE_NAME.flag():
        provider.add_span_processor(ServiceNameSpanProcessor())
    if exporter == "otlp":
        exporters = require(
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "otlp",
            f"exporting spans over OTLP ({asked_by})",
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
