"""A local tracing UI: Arize Phoenix in a subprocess on loopback, no docker.

Phoenix (``pip install arize-phoenix``) is a tracing backend with a web UI that
accepts OTLP over HTTP at ``/v1/traces``. It is big (about 800 MB of packages),
so actorbus never imports it: this module starts it as a subprocess of whichever
Python interpreter has it installed, and talks to it over HTTP only.

- :func:`find_phoenix` finds that interpreter (``$ACTORBUS_PHOENIX_PYTHON``, the
  running one, or ``$ACTORBUS_TRACE_VENV`` / ``./.venv-trace``);
  :func:`ensure_phoenix_venv` creates ``.venv-trace`` with Phoenix in it on demand.
- :func:`start_phoenix` starts it on ``127.0.0.1`` on a free port with a temp
  working dir (its SQLite store), offline (no telemetry, no web fonts), its gRPC
  receiver switched off, and waits (bounded) until its health check answers.
  :meth:`PhoenixServer.otel_env` is the environment that sends a process's spans
  there; :meth:`PhoenixServer.trace_url` is the UI page of one trace;
  :meth:`PhoenixServer.stop` ends it (SIGTERM to its process group, then SIGKILL).
- :class:`PhoenixClient` reads spans back through Phoenix's REST API
  (``GET /v1/projects``, ``GET /v1/projects/{project}/spans?trace_id=...``).
- :func:`screenshot` / :func:`capture_page` save a PNG of a page (and read its
  DOM) with headless Chromium.

Phoenix files spans under a *project*: the ``openinference.project.name``
resource attribute (which :meth:`~PhoenixServer.otel_env` sets through
``OTEL_RESOURCE_ATTRIBUTES``), else ``default``. It keeps no other resource
attribute, so ``service.name`` is visible in Phoenix only when a span carries it
as a span attribute: add :class:`ServiceNameSpanProcessor` to the tracer provider.
"""

from actorbus.services.trace_ui.client import PhoenixClient, TraceSpan, format_tree
from actorbus.services.trace_ui.install import (
    DEFAULT_PROJECT,
    DEFAULT_TRACE_VENV,
    ENV_CHROMIUM,
    ENV_PHOENIX_PYTHON,
    ENV_TRACE_VENV,
    LOOPBACK,
    PHOENIX_REQUIREMENT,
    STOP_TIMEOUT,
    TraceUIError,
    default_venv,
    ensure_phoenix_venv,
    find_phoenix,
    phoenix_version,
)
from actorbus.services.trace_ui.server import (
    PhoenixServer,
    free_port,
    otel_env,
    start_phoenix,
    trace_url,
)
from actorbus.telemetry.providers import ServiceNameSpanProcessor

__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_TRACE_VENV",
    "ENV_CHROMIUM",
    "ENV_PHOENIX_PYTHON",
    "ENV_TRACE_VENV",
    "LOOPBACK",
    "PHOENIX_REQUIREMENT",
    "STOP_TIMEOUT",
    "PhoenixClient",
    "PhoenixServer",
    "ServiceNameSpanProcessor",
    "TraceSpan",
    "TraceUIError",
    "default_venv",
    "ensure_phoenix_venv",
    "find_phoenix",
    "format_tree",
    "free_port",
    "otel_env",
    "phoenix_version",
    "start_phoenix",
    "trace_url",
]
