"""Reading spans back from Phoenix's REST API, and printing a trace as a tree."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actorbus.services.trace_ui.install import DEFAULT_PROJECT, HEX_TRACE_ID

# -- reading spans back -------------------------------------------------------------


def normalize_trace_id(trace_id: str | int) -> str:
    text = format(trace_id, "032x") if isinstance(trace_id, int) else trace_id.strip().lower()
    text = text.removeprefix("0x").replace("-", "")
    if not HEX_TRACE_ID.match(text):
        raise ValueError(f"not an OpenTelemetry trace id (32 hex digits): {trace_id!r}")
    return text


@dataclass(frozen=True)
class TraceSpan:
    """One span as Phoenix stored it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    service: str | None
    """The ``service.name`` span attribute (see :class:`ServiceNameSpanProcessor`)."""
    project: str
    start_time: str
    attributes: dict[str, Any]
    kind: str = "UNKNOWN"
    """The span kind Phoenix shows (from ``openinference.span.kind``)."""


def _lookup(attributes: Mapping[str, Any], dotted: str) -> Any:
    """``attributes["a.b"]`` flat, or ``attributes["a"]["b"]`` nested."""
    if dotted in attributes:
        return attributes[dotted]
    node: Any = attributes
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


class PhoenixClient:
    """Reads Phoenix's REST API (``/v1``) with the standard library only."""

    def __init__(self, base_url: str, *, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str | Sequence[str]] | None = None) -> Any:
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.base_url}{path}" + (f"?{query}" if query else "")
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read())

    def projects(self) -> list[str]:
        """Names of all projects (Phoenix's ``default`` included)."""
        names: list[str] = []
        cursor: str | None = None
        while True:
            body = self._get("/v1/projects", {"cursor": cursor} if cursor else None)
            names.extend(str(item["name"]) for item in body.get("data", []))
            cursor = body.get("next_cursor")
            if not cursor:
                return names

    def spans(self, trace_id: str | int, project: str | None = None) -> list[TraceSpan]:
        """The spans of one trace in ``project`` (default: in every project), by start time."""
        tid = normalize_trace_id(trace_id)
        found: list[TraceSpan] = []
        for name in [project] if project is not None else self.projects():
            path = f"/v1/projects/{urllib.parse.quote(name, safe='')}/spans"
            cursor: str | None = None
            while True:
                params: dict[str, str | Sequence[str]] = {
                    "trace_id": [tid],
                    "limit": "1000",
                    "sort": "start_time",
                    "order": "asc",
                }
                if cursor:
                    params["cursor"] = cursor
                try:
                    body = self._get(path, params)
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:  # no such project (yet)
                        break
                    raise
                for item in body.get("data", []):
                    attributes = dict(item.get("attributes") or {})
                    service = _lookup(attributes, "service.name")
                    found.append(
                        TraceSpan(
                            trace_id=str(item["context"]["trace_id"]),
                            span_id=str(item["context"]["span_id"]),
                            parent_id=item.get("parent_id") or None,
                            name=str(item["name"]),
                            service=None if service is None else str(service),
                            project=name,
                            start_time=str(item.get("start_time", "")),
                            attributes=attributes,
                            kind=str(item.get("span_kind") or "UNKNOWN").upper(),
                        )
                    )
                cursor = body.get("next_cursor")
                if not cursor:
                    break
        found.sort(key=lambda span: span.start_time)
        return found

    def wait_for_spans(
        self,
        trace_id: str | int,
        count: int,
        *,
        project: str | None = None,
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> list[TraceSpan]:
        """Poll until the trace has at least ``count`` spans; ``TimeoutError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        spans: list[TraceSpan] = []
        while True:
            with contextlib.suppress(OSError):  # URLError is an OSError
                spans = self.spans(trace_id, project)
            if len(spans) >= count:
                return spans
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"trace {trace_id} has {len(spans)} span(s) in Phoenix after "
                    f"{timeout:.0f} s, wanted {count}: {[s.name for s in spans]}"
                )
            time.sleep(interval)

    def latest_trace_id(self, project: str = DEFAULT_PROJECT) -> str | None:
        """The trace id of the project's most recently started trace, if any."""
        latest = self.trace_ids(project, limit=1)
        return latest[0] if latest else None

    def trace_ids(self, project: str = DEFAULT_PROJECT, limit: int = 20) -> list[str]:
        """The project's most recently started traces, newest first ([] when the
        project has none yet)."""
        try:
            body = self._get(
                f"/v1/projects/{urllib.parse.quote(project, safe='')}/traces",
                {"sort": "start_time", "order": "desc", "limit": str(limit)},
            )
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
        return [str(trace["trace_id"]) for trace in body.get("data") or []]


def format_tree(spans: Iterable[TraceSpan]) -> str:
    """The spans as an indented tree, one line each: ``name [service]``."""
    spans = list(spans)
    ids = {span.span_id for span in spans}
    children: dict[str | None, list[TraceSpan]] = {}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else None  # orphans at the top
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            service = f" [{span.service}]" if span.service else ""
            lines.append(f"{'  ' * depth}{span.name}{service}")
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)
