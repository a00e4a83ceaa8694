"""A SERVER span around each HTTP request, when tracing is on.

The incoming W3C ``traceparent`` (and ``tracestate``) header is extracted, so an
outside caller's trace continues through the gateway; the span is current while
the request is handled, so the actor calls made for it (ask, stream, including
the task's background run) are its children. Attributes follow the OpenTelemetry
HTTP server conventions. Off (the default), the middleware costs one flag check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from opentelemetry import context as otel_context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("actorbus.gateway")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _route(request: web.Request) -> str:
    info = request.match_info.route.resource
    canonical = info.canonical if info is not None else None
    return canonical or request.path


@web.middleware
async def server_spans(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Each request in its server span (added when the gateway's system traces)."""
    carrier = {k.lower(): v for k, v in request.headers.items()}
    parent = _propagator.extract(carrier)
    route = _route(request)
    span = _tracer.start_span(
        f"{request.method} {route}",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={
            "http.request.method": request.method,
            "http.route": route,
            "url.path": request.path,
            "url.scheme": request.scheme,
            "server.address": request.host,
            "network.protocol.name": "http",
            "actorbus.gateway.agent": request.match_info.get("agent", ""),
        },
    )
    version = request.headers.get("A2A-Version")
    if version:
        span.set_attribute("a2a.version", version)
    token = otel_context.attach(trace.set_span_in_context(span, parent))
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        span.set_attribute("http.response.status_code", exc.status)
        raise
    except BaseException as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    else:
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        return response
    finally:
        otel_context.detach(token)
        span.end()
