"""AgentAnycast's task and stream state machine: pure, no I/O."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from actorbus.codecs.anycast.frames import AnycastFrame, parse_frame
from actorbus.codecs.anycast.schema import DEDUP_WINDOW
from actorbus.codecs.common import format_timestamp as format_timestamp
from actorbus.codecs.errors import (
    ProtocolError,
)

# -- the task state machine ----------------------------------------------------------------------


class TaskState(StrEnum):
    SUBMITTED = "SUBMITTED"
    WORKING = "WORKING"
    INPUT_REQUIRED = "INPUT_REQUIRED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    REJECTED = "REJECTED"


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
# Which statuses a TASK_STATUS_UPDATE may move a task to, from each live state.
_STATUS_MOVES: dict[TaskState, frozenset[TaskState]] = {
    TaskState.SUBMITTED: frozenset({TaskState.WORKING, TaskState.REJECTED, TaskState.CANCELED}),
    TaskState.WORKING: frozenset(
        {TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.REJECTED, TaskState.CANCELED}
    ),
    TaskState.INPUT_REQUIRED: frozenset(
        {TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.REJECTED, TaskState.CANCELED}
    ),
}


@dataclass
class _Stream:
    total: int
    received: int = 0
    last_seen: bool = False
    ended: bool = False


@dataclass
class AnycastTask:
    """One task's lifecycle and its artifact streams (see :class:`AnycastTasks`)."""

    task_id: str
    state: TaskState = TaskState.SUBMITTED
    streams: dict[str, _Stream] = field(default_factory=dict)

    def open_streams(self) -> list[str]:
        return [a for a, s in self.streams.items() if not s.ended]

    def illegal(self, frm: AnycastFrame, why: str) -> ProtocolError:
        return ProtocolError(
            f"AgentAnycast task {self.task_id!r} in state {self.state.value} cannot take "
            f"{frm.type} (envelope {frm.envelope_id!r}): {why}"
        )

    def apply(self, frm: AnycastFrame) -> TaskState:
        if frm.type in ("GET_TASK", "GET_TASK_RESPONSE"):
            return self.state
        if self.state in TERMINAL_STATES:
            raise self.illegal(frm, "the task has ended")
        step = getattr(self, "_on_" + frm.type.lower())
        self.state = step(frm)
        return self.state

    def _on_send_task(self, frm: AnycastFrame) -> TaskState:
        if self.state is not TaskState.INPUT_REQUIRED:
            raise self.illegal(frm, "a task takes more input only when it asked for it")
        return TaskState.WORKING

    def _on_task_status_update(self, frm: AnycastFrame) -> TaskState:
        status = frm.payload.get("status", "UNSPECIFIED")
        if (
            status not in TaskState.__members__
            or TaskState(status) not in _STATUS_MOVES[self.state]
        ):
            raise self.illegal(frm, f"status {status} does not follow {self.state.value}")
        return TaskState(status)

    def _on_task_complete(self, frm: AnycastFrame) -> TaskState:
        if self.state is TaskState.INPUT_REQUIRED:
            raise self.illegal(frm, "the task is waiting for input")
        if self.open_streams():
            raise self.illegal(frm, f"streams {self.open_streams()} have not ended")
        return TaskState.COMPLETED

    def _on_task_fail(self, frm: AnycastFrame) -> TaskState:
        self._end_streams()
        return TaskState.FAILED

    def _on_task_cancel(self, frm: AnycastFrame) -> TaskState:
        self._end_streams()
        return TaskState.CANCELED

    def _on_ack(self, frm: AnycastFrame) -> TaskState:
        return self.state

    def _end_streams(self) -> None:
        for stream in self.streams.values():
            stream.ended = True

    def _on_stream_start(self, frm: AnycastFrame) -> TaskState:
        artifact = frm.payload.get("artifactId", "")
        if self.state is TaskState.INPUT_REQUIRED:
            raise self.illegal(frm, "the task is waiting for input")
        if artifact in self.streams:
            raise self.illegal(frm, f"artifact {artifact!r} was already streamed")
        total = frm.payload.get("totalChunks", 0)
        if total < 0:
            raise self.illegal(frm, "totalChunks cannot be negative")
        self.streams[artifact] = _Stream(total=total)
        return self.state

    def _stream(self, frm: AnycastFrame) -> _Stream:
        artifact = frm.payload.get("artifactId", "")
        stream = self.streams.get(artifact)
        if stream is None or stream.ended:
            raise self.illegal(frm, f"no open stream for artifact {artifact!r}")
        return stream

    def _on_stream_chunk(self, frm: AnycastFrame) -> TaskState:
        stream = self._stream(frm)
        seq = frm.payload.get("sequence", 0)
        last = frm.payload.get("isLast", False)
        if stream.last_seen:
            raise self.illegal(frm, "a chunk after the one marked isLast")
        if seq != stream.received:
            raise self.illegal(frm, f"chunk #{seq} where #{stream.received} was expected")
        if stream.total and (seq >= stream.total or (last and seq != stream.total - 1)):
            raise self.illegal(frm, f"chunk #{seq} does not fit totalChunks {stream.total}")
        stream.received += 1
        stream.last_seen = last
        return self.state

    def _on_stream_end(self, frm: AnycastFrame) -> TaskState:
        stream = self._stream(frm)
        reason = frm.payload.get("reason", "UNSPECIFIED")
        if reason == "COMPLETE":
            short = stream.total and stream.received < stream.total
            unmarked = not stream.total and stream.received and not stream.last_seen
            if short or unmarked:
                raise self.illegal(frm, f"stream ended COMPLETE after {stream.received} chunks")
        stream.ended = True
        return self.state


class AnycastTasks:
    """The pure state machine of AgentAnycast tasks, one per taskId.

    Per the reference: SEND_TASK creates a task (SUBMITTED);
    TASK_STATUS_UPDATE* moves it (WORKING, INPUT_REQUIRED, REJECTED,
    CANCELED); another SEND_TASK answers INPUT_REQUIRED (-> WORKING);
    TASK_COMPLETE (from SUBMITTED or WORKING, every stream ended) or
    TASK_FAIL ends it; TASK_CANCEL cancels a live task; GET_TASK and its
    response change nothing; nothing else is taken once it has ended. Streams:
    STREAM_START per artifact, STREAM_CHUNKs numbered 0, 1, 2 ... (within
    ``totalChunks`` when given, ``isLast`` on the last one), STREAM_END
    (COMPLETE only when every chunk arrived). A repeated envelopeId (at-least-
    once redelivery) is ignored, as the reference's dedup LRU does; an ACK is
    not about a task. Illegal steps raise ProtocolError naming the task, its
    state and the frame.
    """

    def __init__(self, dedup_window: int = DEDUP_WINDOW) -> None:
        self.tasks: dict[str, AnycastTask] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._window = dedup_window

    def observe(self, obj: Mapping[str, Any] | AnycastFrame) -> TaskState | None:
        """Apply one frame; returns the task's state (None for an ACK)."""
        frm = obj if isinstance(obj, AnycastFrame) else parse_frame(obj)
        if frm.type == "ACK":
            return None
        task = self.tasks.get(frm.task_id)
        if self._duplicate(frm.envelope_id):
            return task.state if task is not None else None
        if task is None:
            if frm.type != "SEND_TASK":
                raise ProtocolError(f"AgentAnycast {frm.type} for unknown task {frm.task_id!r}")
            self.tasks[frm.task_id] = AnycastTask(frm.task_id)
            return TaskState.SUBMITTED
        return task.apply(frm)

    def _duplicate(self, envelope_id: str) -> bool:
        if not envelope_id:
            return False
        if envelope_id in self._seen:
            self._seen.move_to_end(envelope_id)
            return True
        self._seen[envelope_id] = None
        if len(self._seen) > self._window:
            self._seen.popitem(last=False)
        return False
