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
import sys
import threading
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace

from actorbus import environment as env

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
    installed = _installed_provider()  # the application's, or ours from an earlier call
    if installed is None and not (exporter or record_dir or force):
        return OFF  # (and the SDK is never imported)
    from actorbus.telemetry import providers

    if installed is None:
        made = providers.tracer_provider(exporter, record_dir, _asked_by("traces"))
        _providers.append(made)
    meter = providers.meter_provider(_wanted_exporter("metrics"), _asked_by("metrics"))
    if meter is not None:
        _providers.append(meter)
    return Telemetry(tracing=True, metrics=providers.records_metrics(), preview=preview)


def _installed_provider() -> Any | None:
    """The OpenTelemetry SDK tracer provider installed in this process, if any (none
    while the SDK was never imported: then nobody could have installed one)."""
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    current = trace.get_tracer_provider()
    return current if sdk is not None and isinstance(current, sdk.TracerProvider) else None


def _asked_by(kind: str) -> str:
    """The variable that turned the OTLP exporter on, as the user set it."""
    for variable in (*_ASKING[kind], env.OTEL_EXPORTER_OTLP_ENDPOINT):
        value = variable.get()
        if value:
            return f"{variable.name}={value}"
    return "asked for in code"


def flush(timeout: float = 5.0) -> None:
    """Export what is buffered now (a process about to end loses nothing)."""
    for provider in _providers:
        force_flush = getattr(provider, "force_flush", None)
        if force_flush is not None:
            try:
                force_flush(int(timeout * 1000))
            except Exception as exc:
                log.debug("telemetry flush: %r", exc)
    installed = _installed_provider()
    if installed is not None and installed not in _providers:  # the application's
        installed.force_flush(int(timeout * 1000))


def shutdown() -> None:
    """Flush and stop what ``configure`` started (spans still buffered go out)."""
    for provider in _providers:
        flush = getattr(provider, "shutdown", None)
        if flush is not None:
            try:
                flush()
            except Exception as exc:
                log.debug("telemetry shutdown: %r", exc)
