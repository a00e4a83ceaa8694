"""A local span recorder and the flow tree ``actorbus trace <trace_id>`` prints.

Each process appends its finished spans to ``spans-<pid>.jsonl`` in the
directory ``ACTORBUS_TRACE_DIR`` names, one JSON object per line, so a flow
across several processes is put together by reading every file there.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

DEFAULT_TRACE_DIR = Path(tempfile.gettempdir()) / "actorbus-traces"


class JsonlSpanExporter(SpanExporter):
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(_record(s), default=str) for s in spans]
        path = self.directory / f"spans-{os.getpid()}.jsonl"
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)  # removed meanwhile? again
            with path.open("a", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _record(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    parent = span.parent
    assert ctx is not None
    return {
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "name": span.name,
        "kind": span.kind.name,
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status.status_code.name,
        "service": span.resource.attributes.get("service.name"),
        "attributes": dict(span.attributes or {}),
        "links": [format(link.context.span_id, "016x") for link in span.links],
    }


@dataclass
class SpanNode:
    record: dict[str, Any]
    children: list[SpanNode] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        start, end = self.record.get("start") or 0, self.record.get("end") or 0
        return max(0.0, (end - start) / 1e6)


def read_trace(directory: str | Path, trace_id: str) -> list[dict[str, Any]]:
    """Every recorded span of ``trace_id`` (a prefix is enough), by start time."""
    found: list[dict[str, Any]] = []
    for path in sorted(Path(directory).glob("spans-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written right now
            if str(rec.get("trace_id", "")).startswith(trace_id):
                found.append(rec)
    return sorted(found, key=lambda r: r.get("start") or 0)


def recent_traces(directory: str | Path, limit: int = 20) -> list[dict[str, Any]]:
    """The root spans of the latest traces (newest first)."""
    roots: dict[str, dict[str, Any]] = {}
    for path in Path(directory).glob("spans-*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("parent_id") is None:
                roots[rec["trace_id"]] = rec
    return sorted(roots.values(), key=lambda r: r.get("start") or 0, reverse=True)[:limit]


def build_tree(records: Iterable[dict[str, Any]]) -> list[SpanNode]:
    """Spans into trees; spans whose parent was not recorded become roots."""
    nodes = {r["span_id"]: SpanNode(r) for r in records}
    roots: list[SpanNode] = []
    for node in nodes.values():
        parent = nodes.get(node.record.get("parent_id") or "")
        (parent.children if parent is not None else roots).append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: n.record.get("start") or 0)
    return sorted(roots, key=lambda n: n.record.get("start") or 0)
