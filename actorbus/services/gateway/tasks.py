"""The gateway's task state machine, shared by every protocol edge.

A task is one unit of work an outside client asked an agent (an actor type)
for. Its states are the codec's :class:`~actorbus.codecs.a2a.types.TaskState`
(A2A's, which ACP runs map onto as well); :func:`check_transition` enforces
the legal moves:

- ``submitted`` -> working, input-required, auth-required, completed, failed,
  canceled, rejected
- ``working`` -> working (a progress update), input-required, auth-required,
  completed, failed, canceled
- ``input-required`` / ``auth-required`` -> submitted or working (the client
  answered), failed, canceled, rejected
- ``completed``, ``failed``, ``canceled``, ``rejected``: terminal, nothing follows.

An actor asks the client for more (multi-turn within one task) by replying
:class:`InputRequired` (or yielding it as a stream item): the task goes
``input-required`` with ``message`` as its status message; the client's next
message naming the task (A2A ``taskId``) runs the actor again in the same
session (context id).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from pydantic import BaseModel

from actorbus.actors.messages import remember
from actorbus.codecs.a2a.types import TaskState
from actorbus.codecs.errors import UnsupportedError

S = TaskState

TRANSITIONS: Final[dict[TaskState, frozenset[TaskState]]] = {
    S.SUBMITTED: frozenset(
        {
            S.WORKING,
            S.INPUT_REQUIRED,
            S.AUTH_REQUIRED,
            S.COMPLETED,
            S.FAILED,
            S.CANCELED,
            S.REJECTED,
        }
    ),
    S.WORKING: frozenset(
        {S.WORKING, S.INPUT_REQUIRED, S.AUTH_REQUIRED, S.COMPLETED, S.FAILED, S.CANCELED}
    ),
    S.INPUT_REQUIRED: frozenset({S.SUBMITTED, S.WORKING, S.FAILED, S.CANCELED, S.REJECTED}),
    S.AUTH_REQUIRED: frozenset({S.SUBMITTED, S.WORKING, S.FAILED, S.CANCELED, S.REJECTED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELED: frozenset(),
    S.REJECTED: frozenset(),
    S.UNKNOWN: frozenset(set(TaskState) - {S.UNKNOWN}),
}


class IllegalTransitionError(UnsupportedError):
    """A task was asked to move to a state it cannot reach from where it is."""

    def __init__(self, task_id: str, current: TaskState, wanted: TaskState) -> None:
        super().__init__(f"task {task_id} cannot go from {current.value} to {wanted.value}")
        self.task_id = task_id
        self.current = current
        self.wanted = wanted


def can_transition(current: TaskState, wanted: TaskState) -> bool:
    return wanted in TRANSITIONS[current]


def check_transition(task_id: str, current: TaskState, wanted: TaskState) -> None:
    """IllegalTransitionError unless ``current -> wanted`` is a legal move."""
    if not can_transition(current, wanted):
        raise IllegalTransitionError(task_id, current, wanted)


class InputRequired(BaseModel):
    """An actor's reply that asks the outside client for more input."""

    __intent__: ClassVar[str] = "gateway.input-required"
    message: Any  # what to ask: text, data (any JSON), or bytes


class AuthRequired(BaseModel):
    """An actor's reply saying the client must authenticate before it goes on."""

    __intent__: ClassVar[str] = "gateway.auth-required"
    message: Any


# Known here, so replies of these intents come back to the gateway as the models.
remember(InputRequired)
remember(AuthRequired)
