"""What one actor's stored state value holds, before sealing.

Besides the state itself (as JSON-compatible data, with the model's version):

- ``owner``: the activation that wrote it. An activation claims the state when it
  starts (a write of its own), so one that lost its lease and wakes up later
  fails its next write instead of overwriting the newer activation's state;
- the position of the last durable message the state reflects (the stream it
  came from, by its creation time, and its sequence there) and that turn's
  sends. The state, the sends and "this message is applied" are one write: a
  redelivered message at or before the position is not run again, its recorded
  sends go out again (the stream drops repeats by id) and it is acked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actorbus.codecs.errors import StateError
from actorbus.codecs.wire import pack, unpack


@dataclass(frozen=True)
class Position:
    """Where a durable message was stored: its stream (by creation time: a stream
    made again restarts its sequences) and its sequence there."""

    stream: str
    seq: int

    def header(self) -> str:
        return f"{self.seq}@{self.stream}"

    @classmethod
    def parse(cls, text: str) -> Position | None:
        seq, sep, stream = text.partition("@")
        if not sep or not seq.isdigit():
            return None
        return cls(stream, int(seq))


@dataclass
class StateRecord:
    version: int
    state: dict[str, Any]
    owner: str
    applied: Position | None = None
    sends: list[list[Any]] = field(default_factory=list)  # the applied turn's held sends

    def covers(self, position: Position) -> bool:
        """Is the durable message at ``position`` already reflected here?"""
        applied = self.applied
        return (
            applied is not None
            and applied.stream == position.stream
            and position.seq <= applied.seq
        )

    def encode(self) -> bytes:
        body: dict[str, Any] = {"v": self.version, "s": self.state, "o": self.owner}
        if self.applied is not None:
            body["at"] = [self.applied.stream, self.applied.seq]
            body["out"] = self.sends
        return pack(body)

    @classmethod
    def decode(cls, data: bytes, where: str) -> StateRecord:
        try:
            body = unpack(data)
            at = body.get("at")
            return cls(
                version=int(body["v"]),
                state=dict(body["s"]),
                owner=str(body.get("o", "")),
                applied=Position(str(at[0]), int(at[1])) if at else None,
                sends=list(body.get("out") or []),
            )
        except Exception as exc:
            raise StateError(f"the stored state of {where} is unreadable ({exc!r})") from None
