"""One question to an agent, through a gateway task, answered when it settles.

For the edges whose protocol has no task of its own (ANP's JSON-RPC calls,
Agora's messages): the ask still runs as a task of the core, so it is stored,
traced, cancellable and bounded like any other, and a session's task waiting
for input is continued by the next question in that session.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from actorbus.codecs.common import rebuild_error
from actorbus.codecs.errors import RemoteError
from actorbus.codecs.tasks import Message, Task, TaskState, content_from_parts, parts_from_content
from actorbus.services.gateway.agents import Agent, TaskNotContinuableError
from actorbus.services.gateway.core import META_KEY, GatewayCore
from actorbus.services.gateway.store import TaskQuery


async def ask_agent(
    core: GatewayCore,
    agent: Agent,
    content: Any,
    *,
    intent: str,
    protocol: str,
    context_id: str,
    new_session: bool,
    metadata: dict[str, Any] | None = None,
) -> Task:
    """Ask ``agent`` through a gateway task and wait until it settles.

    In a session that is not new, its task waiting for input (if any) is continued."""
    waiting = None if new_session else await _waiting_task(core, agent, context_id)
    message = Message(
        message_id=uuid.uuid4().hex,
        role="user",
        parts=parts_from_content(content),
        context_id=context_id,
        task_id=waiting,
        metadata=metadata,
    )
    try:
        live, _ = await core.submit(
            agent, message, protocol=protocol, intent=intent, content=content, stream=False
        )
    except TaskNotContinuableError:  # answered meanwhile by a concurrent call: a new task
        message = msgspec.structs.replace(message, task_id=None)
        live, _ = await core.submit(
            agent, message, protocol=protocol, intent=intent, content=content, stream=False
        )
    return await core.wait_settled(live)


async def _waiting_task(core: GatewayCore, agent: Agent, context_id: str) -> str | None:
    for state in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED):
        found, _ = await core.find(
            TaskQuery(agent=agent.name, context_id=context_id, state=state, limit=1)
        )
        if found:
            return found[0].task.id
    return None


def task_outcome(task: Task) -> Any:
    """What a settled task answers: the reply's content, or the actor's question
    (input-required); raises the task's error for a failed, rejected or canceled one."""
    state = task.status.state
    if state is TaskState.COMPLETED:
        if not task.artifacts:
            return None
        parts = task.artifacts[-1].parts
        if len(parts) > 1 and all(p.kind == "text" for p in parts):  # a stream's chunks
            return "".join(str(p.value) for p in parts)
        return content_from_parts(parts)[0]
    if state.interrupted:
        message = task.status.message
        return content_from_parts(message.parts)[0] if message is not None else None
    facts = ((task.metadata or {}).get(META_KEY) or {}).get("error")
    if isinstance(facts, dict) and isinstance(facts.get("code"), str):
        raise rebuild_error(facts["code"], str(facts.get("message", "")), facts.get("type"))
    raise RemoteError(f"the task ended {state.value}", remote_type="TaskError")
