"""Whether tracing is on: one flag the hot paths read (and nothing else)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TelemetryState:
    tracing: bool = False
    metrics: bool = False
    preview: int = 0  # characters of a redacted content preview in spans (0: none)


STATE = TelemetryState()
