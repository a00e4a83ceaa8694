"""A2A's requests and results, once, independent of the wire version.

A2A 1.0 and 0.3 carry the same things in different spellings (``TASK_STATE_WORKING``
vs ``working``, ``{"raw": ...}`` vs ``{"kind": "file", "file": {"bytes": ...}}``,
``SendMessage`` vs ``message/send``). Tasks, messages and artifacts are the
protocol-neutral model of :mod:`actorbus.codecs.tasks`; here are what only A2A
has (its methods, request parameters, a task list, the state's 1.0 spelling),
and :mod:`actorbus.codecs.a2a.wire` converts both to and from either version's
JSON. Fields follow 1.0's names in snake_case.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

import msgspec

from actorbus.codecs.a2a.errors import A2AVersion
from actorbus.codecs.tasks import ArtifactUpdate, Message, StatusUpdate, Task, TaskState

_STATE_V10: Final[dict[TaskState, str]] = {
    s: ("TASK_STATE_UNSPECIFIED" if s is TaskState.UNKNOWN else "TASK_STATE_" + s.name)
    for s in TaskState
}
_STATE_FROM_WIRE: Final[dict[str, TaskState]] = {
    **{s.value: s for s in TaskState},
    **{wire: s for s, wire in _STATE_V10.items()},
}


def state_to_wire(state: TaskState, version: A2AVersion) -> str:
    """``TASK_STATE_*`` for 1.0, kebab-case for 0.3."""
    return _STATE_V10[state] if version == "1.0" else state.value


def state_from_wire(value: str) -> TaskState:
    """Either spelling of a state; ValueError for anything else."""
    found = _STATE_FROM_WIRE.get(value)
    if found is None:
        raise ValueError(f"unknown task state {value!r}")
    return found


class _Model(msgspec.Struct, frozen=True, kw_only=True):
    """A2A's own objects (results, requests): immutable, cheap to build, typed."""


class TaskList(_Model, frozen=True, kw_only=True):
    """A ListTasks result (1.0 only)."""

    tasks: list[Task]
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0


StreamEvent = Task | Message | StatusUpdate | ArtifactUpdate
Result = Task | Message | StatusUpdate | ArtifactUpdate | TaskList

# -- requests -------------------------------------------------------------------


class Method(StrEnum):
    """A2A's operations, by their 1.0 JSON-RPC names."""

    SEND_MESSAGE = "SendMessage"
    SEND_STREAMING_MESSAGE = "SendStreamingMessage"
    GET_TASK = "GetTask"
    LIST_TASKS = "ListTasks"
    CANCEL_TASK = "CancelTask"
    SUBSCRIBE_TO_TASK = "SubscribeToTask"
    CREATE_PUSH_CONFIG = "CreateTaskPushNotificationConfig"
    GET_PUSH_CONFIG = "GetTaskPushNotificationConfig"
    LIST_PUSH_CONFIGS = "ListTaskPushNotificationConfigs"
    DELETE_PUSH_CONFIG = "DeleteTaskPushNotificationConfig"
    GET_EXTENDED_AGENT_CARD = "GetExtendedAgentCard"

    @property
    def streaming(self) -> bool:
        """The answer is an SSE stream of events, not one result."""
        return self in (Method.SEND_STREAMING_MESSAGE, Method.SUBSCRIBE_TO_TASK)


# Wire names per version. 1.0 also accepts the names earlier 1.0 drafts used.
METHODS_V10: Final[dict[str, Method]] = {
    **{m.value: m for m in Method},
    "SetTaskPushNotificationConfig": Method.CREATE_PUSH_CONFIG,
    "ListTaskPushNotificationConfig": Method.LIST_PUSH_CONFIGS,
}
METHODS_V03: Final[dict[str, Method]] = {
    "message/send": Method.SEND_MESSAGE,
    "message/stream": Method.SEND_STREAMING_MESSAGE,
    "tasks/get": Method.GET_TASK,
    "tasks/cancel": Method.CANCEL_TASK,
    "tasks/resubscribe": Method.SUBSCRIBE_TO_TASK,
    "tasks/pushNotificationConfig/set": Method.CREATE_PUSH_CONFIG,
    "tasks/pushNotificationConfig/get": Method.GET_PUSH_CONFIG,
    "tasks/pushNotificationConfig/list": Method.LIST_PUSH_CONFIGS,
    "tasks/pushNotificationConfig/delete": Method.DELETE_PUSH_CONFIG,
    "agent/getAuthenticatedExtendedCard": Method.GET_EXTENDED_AGENT_CARD,
}
WIRE_METHOD_V03: Final[dict[Method, str]] = {m: name for name, m in METHODS_V03.items()}


def wire_method(method: Method, version: A2AVersion) -> str | None:
    """The JSON-RPC method name of ``method`` in ``version`` (None: 0.3 has no ListTasks)."""
    return method.value if version == "1.0" else WIRE_METHOD_V03.get(method)


class SendConfig(_Model, frozen=True, kw_only=True):
    """``configuration`` of a send. ``extra`` keeps the keys not modelled here
    (push notification config ...) exactly as they came."""

    accepted_output_modes: list[str] | None = None
    history_length: int | None = None
    blocking: bool | None = None  # 0.3 (and early 1.0)
    return_immediately: bool | None = None  # 1.0
    extra: dict[str, Any] | None = None

    @property
    def returns_immediately(self) -> bool:
        """The client does not want to wait for the task to finish or pause."""
        return bool(self.return_immediately) or self.blocking is False

    @property
    def push_notification_config(self) -> dict[str, Any] | None:
        extra = self.extra or {}
        found = extra.get("taskPushNotificationConfig", extra.get("pushNotificationConfig"))
        return found if isinstance(found, dict) else None


class SendParams(_Model, frozen=True, kw_only=True):
    """SendMessage / SendStreamingMessage (message/send, message/stream)."""

    message: Message
    configuration: SendConfig | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None
    extra: dict[str, Any] | None = None


class TaskRef(_Model, frozen=True, kw_only=True):
    """GetTask, CancelTask, SubscribeToTask (tasks/get, tasks/cancel, tasks/resubscribe)."""

    id: str
    history_length: int | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None
    extra: dict[str, Any] | None = None


class ListTasksParams(_Model, frozen=True, kw_only=True):
    """ListTasks (1.0 only)."""

    context_id: str | None = None
    status: TaskState | None = None
    page_size: int | None = None
    page_token: str | None = None
    history_length: int | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool | None = None
    tenant: str | None = None
    extra: dict[str, Any] | None = None


Params = SendParams | TaskRef | ListTasksParams | dict[str, Any] | None


class A2ARequest(_Model, frozen=True, kw_only=True):
    """A decoded JSON-RPC request: the version-neutral ``method`` and its params.

    Push notification config and extended card methods keep their params as the
    plain object that came (``dict``; None when absent): the gateway answers them
    with an error or passes them on. ``notification`` is true for a request
    without an ``id`` (JSON-RPC says: no answer).
    """

    method: Method
    version: A2AVersion
    id: str | int | None = None
    params: Params = None
    wire_method: str = ""
    notification: bool = False


class A2AResponse(_Model, frozen=True, kw_only=True):
    """A decoded JSON-RPC success response (or SSE frame).

    ``wrapped`` is true when 1.0 put the result in a oneof wrapper
    (``{"task": ...}`` for SendMessage and stream events) rather than bare
    (GetTask/CancelTask return the Task itself).
    """

    id: str | int | None
    result: Result
    wrapped: bool = False
