"""The gateway's task state machine, shared by every protocol edge.

A task is one unit of work an outside client asked an agent (an actor type)
for. Its states are the neutral :class:`~actorbus.codecs.tasks.TaskState` (each
edge maps its protocol's onto them: A2A's task states, ACP's run statuses);
:func:`check_transition` enforces the legal moves:

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
message naming the task (its task id) runs the actor again in the same
session (context id).

An actor keeps a task open by replying :class:`Working`: the task stays
``working`` (a client may return at once, list it, subscribe to it, cancel it),
and the actor finishes it later through :class:`GatewayTask`, which it makes
while handling the message (``GatewayTask.of(self)``) and keeps::

    @handler
    async def report(self, req: Report) -> Working:
        self.jobs.append(GatewayTask.of(self))
        return Working(message="queued")

    async def finish(self, job: GatewayTask, pdf_url: str) -> None:
        await job.complete(pdf_url)       # or job.working(...), job.fail(...),
                                          # job.input_required(...)

An update reaches the gateway holding the task at ``gateway-tasks/<task id>``
(an ask: the actor learns the task's new state, or that it was canceled). The
task id is the capability: only who got the task's message can name it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from pydantic import BaseModel

from actorbus.actors.messages import remember
from actorbus.codecs.errors import NoRespondersError, UnsupportedError
from actorbus.codecs.tasks import TaskState

if TYPE_CHECKING:
    from actorbus.actors.actor import Actor

S = TaskState
TASKS_TYPE: Final = "gateway-tasks"  # where an open task listens: gateway-tasks/<task id>

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
    # An agent may reject a task it is working on once it finds it cannot proceed:
    # an actor refusing the input says so after the gateway has reported the task
    # working.
    S.WORKING: frozenset(
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


UpdateState = Literal["working", "input-required", "auth-required", "completed", "failed"]


class TaskUpdate(BaseModel):
    """A change of an open task, from the actor keeping it (sent by :class:`GatewayTask`)."""

    __intent__: ClassVar[str] = "gateway.task-update"
    task_id: str
    state: UpdateState
    message: Any = None  # the status message (a progress note, a question)
    result: Any = None  # an artifact: the answer (completed) or a partial result (working)
    error: str | None = None  # why it failed


class GatewayTask:
    """A task an actor keeps open (it replied :class:`Working`), to update and
    finish later from anywhere in the actor. Each call returns the task's new
    state; it raises ``UnsupportedError`` when the task is not open (it ended, or
    the client canceled it) and ``NoRespondersError`` when no gateway holds it
    (within ``grace`` seconds: it ended, or no gateway of the namespace runs)."""

    def __init__(self, actor: Actor, task_id: str, *, grace: float = 5.0) -> None:
        self.actor = actor
        self.task_id = task_id
        self.address = f"{TASKS_TYPE}/{task_id}"
        self.grace = grace

    @classmethod
    def of(cls, actor: Actor) -> GatewayTask:
        """The task of the message ``actor`` is handling now (called in the handler)."""
        key = actor.envelope.context.idempotency_key or ""
        protocol, _, rest = key.partition(":")
        task_id = rest.partition(":")[0]
        if not protocol or not task_id:
            raise UnsupportedError(
                "this message did not come from a gateway task (its idempotency key is "
                f"{key!r}, not '<protocol>:<task id>:<message id>')"
            )
        return cls(actor, task_id)

    async def _send(self, state: UpdateState, **fields: Any) -> str:
        """Ask the gateway holding the task. It listens once it has the actor's
        ``Working`` reply, which may still be on its way when the actor's first
        update is: nobody listening is tried again for ``grace`` seconds."""
        update = TaskUpdate(task_id=self.task_id, state=state, **fields)
        deadline = time.monotonic() + self.grace
        delay = 0.02
        while True:
            try:
                answer: str = await self.actor.ask(self.address, update)
                return answer
            except NoRespondersError:
                if time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def working(self, message: Any = None, *, result: Any = None) -> str:
        """A progress note, and optionally a partial result (an artifact)."""
        return await self._send("working", message=message, result=result)

    async def complete(self, result: Any = None) -> str:
        return await self._send("completed", result=result)

    async def fail(self, error: str) -> str:
        return await self._send("failed", error=error)

    async def input_required(self, message: Any) -> str:
        """Ask the client; its next message on the task runs the actor's handler again."""
        return await self._send("input-required", message=message)

    async def auth_required(self, message: Any) -> str:
        return await self._send("auth-required", message=message)


# Known here, so replies of these intents come back to the gateway as the models.
remember(TaskUpdate)
