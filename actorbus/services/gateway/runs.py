"""How the gateway runs a task's actor call, and how an actor keeps a task open.

A *run* is the background asyncio task :meth:`GatewayCore.submit` starts: an ask
(the reply is an artifact, then ``completed``) or a stream (each item an artifact
chunk). A reply (or a stream's item) can instead be one of the models of
:mod:`.tasks`: ``InputRequired``/``AuthRequired`` interrupt the task and wait
for the client, and ``Working`` keeps it open: the task stays ``working`` after
the run, and the actor finishes it later with :class:`~.tasks.GatewayTask`
(updates, a question, the result or a failure). An open task listens at
``gateway-tasks/<task id>`` (an actor the gateway spawns for it and stops when
the task ends); a restarted gateway listens again for the open tasks its
database holds, so the actor can finish a task across a gateway restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, ClassVar, Protocol, cast

import msgspec

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.actors.interim import AuthRequired, InputRequired, Working
from actorbus.actors.system import ActorSystem
from actorbus.codecs.errors import (
    ActorBusError,
    InvalidAddressError,
    RemoteError,
    UnsupportedError,
    ValidationFailedError,
    WrongCallError,
)
from actorbus.codecs.tasks import Message, Part, Task, TaskState, parts_from_content
from actorbus.services.gateway.agents import LiveTask, plain, text_message
from actorbus.services.gateway.settings import CoreSettings
from actorbus.services.gateway.store import Run, TaskStore, now_ms
from actorbus.services.gateway.tasks import TASKS_TYPE, TaskUpdate

log = logging.getLogger("actorbus.gateway")

REJECTED_CODES = frozenset(
    {ValidationFailedError.code, UnsupportedError.code, InvalidAddressError.code}
)
HELD_KEY = "held"  # in Task.metadata["gateway"]: the task is kept open by its actor

Interim = InputRequired | AuthRequired | Working


class TaskChanges(Protocol):
    """How a run changes its task: through the core, which saves and publishes."""

    async def set_state(
        self,
        live: LiveTask,
        state: TaskState,
        message: Message | None = None,
        *,
        publish: bool = True,
        error: dict[str, str] | None = None,
        persist: bool = True,
        run: Run | None = None,
    ) -> None: ...

    async def add_artifact_chunk(
        self, live: LiveTask, artifact_id: str, parts: list[Part]
    ) -> None: ...


class TaskRuns:
    """Runs the gateway's tasks: asks or streams from the actor, follows the tasks
    their actors keep open, and changes each task through ``changes`` (the core).
    ``live`` is the core's table of the tasks in hand, shared."""

    def __init__(
        self,
        system: ActorSystem,
        store: TaskStore,
        settings: CoreSettings,
        live: dict[str, LiveTask],
        changes: TaskChanges,
    ) -> None:
        self.system = system
        self.store = store
        self.settings = settings
        self._live = live
        self.changes = changes

    async def run(self, live: LiveTask, run: Run, content: Any, context_id: str) -> None:
        """Make ``run``'s call (``run.kind``: ask, stream, or a durable tell) and
        change the task as it goes."""
        live.kept_open = False
        kept = False  # this run's own outcome: a later run may change live.kept_open
        intent = run.intent
        try:
            # Not saved: a restart fails submitted and working tasks alike.
            await self.changes.set_state(live, TaskState.WORKING, persist=False)
            if run.kind == "tell":
                await self._tell(live, run.address, intent, content, context_id)
            elif run.kind == "stream":
                kept = await self._stream(live, intent, content, context_id)
            else:
                kept = await self._ask(live, intent, content, context_id)
        except asyncio.CancelledError:
            await self._save_run(_ended(run, "canceled"))
            raise
        except ActorBusError as err:
            await self._fail(live, err, _ended(run, "failed", err))
        except Exception as exc:
            log.exception("gateway task %s failed", live.task.id)
            wrapped = RemoteError(str(exc), remote_type=type(exc).__name__)
            await self._fail(live, wrapped, _ended(run, "failed", wrapped))
        else:
            ended = _ended(run, "completed")
            if live.state.ends_stream or kept:  # saved when it changed
                await self._save_run(ended)
            else:  # answered: the finished task and its run in one commit
                await self.release(live)
                await self.changes.set_state(live, TaskState.COMPLETED, run=ended)
        finally:
            if not kept:
                live.settled.set()

    async def _save_run(self, run: Run) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(self.store.save_run(run))

    async def _fail(self, live: LiveTask, err: ActorBusError, run: Run | None) -> None:
        if live.state.terminal:  # canceled meanwhile: a late answer changes nothing
            if run is not None:
                await self._save_run(run)
            return
        state = TaskState.REJECTED if err.code in REJECTED_CODES else TaskState.FAILED
        err_type = err.remote_type if isinstance(err, RemoteError) else type(err).__name__
        text = err.remote_message if isinstance(err, RemoteError) else str(err)
        message = text_message(
            f"{err.code}: {text}", task_id=live.task.id, context_id=live.task.context_id
        )
        await self.changes.set_state(
            live,
            state,
            message,
            error={"code": err.code, "type": err_type, "message": text},
            run=run,
        )

    async def _ask(self, live: LiveTask, intent: str, content: Any, context_id: str) -> bool:
        """Ask the actor; True when it keeps the task open (it replied Working)."""
        try:
            reply = await self.system.ask(
                live.address,
                content,
                intent=intent,
                session_id=context_id,
                idempotency_key=request_key(live),
                timeout=self.settings.ask_timeout,
            )
        except WrongCallError:  # a handler that streams: its items are the answer
            return await self._stream(live, intent, content, context_id)
        if live.state.terminal:  # canceled while we waited: the late reply is dropped
            return False
        if isinstance(reply, Interim):
            return await self._interim(live, reply)
        await self._answer(live, reply)
        return False

    async def _tell(
        self, live: LiveTask, address: str, intent: str, content: Any, context_id: str
    ) -> None:
        """Store a message for a durable handler: once stored it is handled once,
        whatever happens to the gateway or the actor's host, so the task completes
        saying so (the handler's own answer, if any, goes where it sends it). The
        request's key makes a retried request the same message."""
        key = request_key(live)
        await self.system.tell(
            address,
            content,
            intent=intent,
            durable=True,
            session_id=context_id,
            idempotency_key=key,
            timeout=self.settings.ask_timeout,
        )
        await self._answer(live, f"accepted: {address} handles it once (key {key})")

    async def _answer(self, live: LiveTask, reply: Any) -> None:
        """The actor's reply: an artifact, and an agent message in the history."""
        answer = agent_message(live, reply)
        await self.changes.add_artifact_chunk(live, uuid.uuid4().hex, answer.parts)
        live.task = msgspec.structs.replace(live.task, history=[*(live.task.history or []), answer])

    async def _stream(self, live: LiveTask, intent: str, content: Any, context_id: str) -> bool:
        """Stream from the actor; True when it keeps the task open (Working)."""
        artifact_id = uuid.uuid4().hex
        items = self.system.stream(
            live.address,
            content,
            intent=intent,
            session_id=context_id,
            idempotency_key=request_key(live),
            timeout=self.settings.stream_item_timeout,
        )
        async with contextlib.aclosing(
            cast(AsyncGenerator[Any, None], items)
        ) as it:  # leaving early cancels the producer
            async for item in it:
                if live.state.terminal:
                    return False
                if isinstance(item, Interim):
                    return await self._interim(live, item)
                await self.changes.add_artifact_chunk(
                    live, artifact_id, parts_from_content(plain(item))
                )
        return False

    async def _interim(self, live: LiveTask, reply: Interim) -> bool:
        """The actor asks the client for more (input-required, auth-required), or
        keeps the task open (working) to finish it later: True then."""
        question = None
        if reply.message is not None:
            question = agent_message(live, reply.message)
            live.task = msgspec.structs.replace(
                live.task, history=[*(live.task.history or []), question]
            )
        if isinstance(reply, Working):
            live.kept_open = True
            first = not held(live.task)
            mark_held(live)
            await self.changes.set_state(live, TaskState.WORKING, question)
            if first:  # only now: an update the actor sent at once must find it working
                await self._listen(live.task.id)
            return True
        await self.release(live)  # the client's answer runs the actor afresh
        state = (
            TaskState.INPUT_REQUIRED
            if isinstance(reply, InputRequired)
            else TaskState.AUTH_REQUIRED
        )
        await self.changes.set_state(live, state, question)
        return False

    # -- tasks kept open -----------------------------------------------------------
    async def release(self, live: LiveTask) -> None:
        """The actor no longer keeps the task open (it ended, or waits for the client)."""
        if not held(live.task):
            return
        metadata = {**(live.task.metadata or {})}
        metadata["gateway"] = {k: v for k, v in metadata["gateway"].items() if k != HELD_KEY}
        live.task = msgspec.structs.replace(live.task, metadata=metadata)
        await self._unlisten(live.task.id)

    async def _listen(self, task_id: str) -> None:
        address = f"{TASKS_TYPE}/{task_id}"
        if address not in self.system.local_actors():
            await self.system.spawn(TaskUpdates, task_id, apply=self.apply_update)

    async def _unlisten(self, task_id: str) -> None:
        address = f"{TASKS_TYPE}/{task_id}"
        if address in self.system.local_actors():
            # not awaited from inside that actor's own handler: it would wait for itself
            stop = self.system.stop_actor(address, timeout=2.0)
            self.system.runtime.spawn_task(stop)

    async def relisten(self) -> int:
        """After a restart: listen again for the open tasks of the database."""
        count = 0
        for st in await self.store.unfinished_tasks():
            if held(st.task):
                await self._listen(st.task.id)
                count += 1
        return count

    async def apply_update(self, update: TaskUpdate) -> str:
        """An update from the actor that keeps the task open; the task's new state."""
        live = await self._held_live(update.task_id)
        if update.state == "working":
            message = None if update.message is None else agent_message(live, update.message)
            if update.result is not None:
                await self.changes.add_artifact_chunk(
                    live, uuid.uuid4().hex, parts_from_content(plain(update.result))
                )
            await self.changes.set_state(live, TaskState.WORKING, message)
        elif update.state == "completed":
            if update.result is not None:
                await self._answer(live, update.result)
            await self.release(live)  # saved with the end: nobody keeps it open
            await self.changes.set_state(live, TaskState.COMPLETED)
        elif update.state == "failed":
            await self.release(live)
            await self._fail(live, RemoteError(update.error or "the agent gave up"), None)
        else:
            reply = InputRequired if update.state == "input-required" else AuthRequired
            await self._interim(live, reply(message=update.message))
        if live.state.ends_stream:
            live.settled.set()
        return live.state.value

    async def _held_live(self, task_id: str) -> LiveTask:
        live = self._live.get(task_id)
        if live is None:  # a restarted gateway: the task is in the database
            stored = await self.store.get_task(task_id)
            holder = held_by(stored.task) if stored is not None else None
            if stored is None or holder is None:
                raise UnsupportedError(f"task {task_id} is not kept open here")
            live = LiveTask(
                task=stored.task, agent=stored.agent, protocol=stored.protocol, address=holder
            )
            self._live[task_id] = live
        if live.state is not TaskState.WORKING or not held(live.task):
            raise UnsupportedError(
                f"task {task_id} is {live.state.value}: only a task kept open takes updates"
            )
        return live


class TaskUpdates(Actor):
    """The address an open task listens at (``gateway-tasks/<task id>``): passes
    its actor's updates to the gateway that holds it."""

    type_name: ClassVar[str] = TASKS_TYPE
    advertise = False

    def __init__(self, apply: Callable[[TaskUpdate], Awaitable[str]]) -> None:
        self.apply = apply

    @handler
    async def update(self, update: TaskUpdate) -> str:
        if update.task_id != self.key:
            raise UnsupportedError(f"an update of task {update.task_id} sent to task {self.key}")
        return await self.apply(update)


def held_by(task: Task) -> str | None:
    """The address of the actor keeping ``task`` open, if one is."""
    facts = (task.metadata or {}).get("gateway")
    holder = facts.get(HELD_KEY) if isinstance(facts, dict) else None
    return holder if isinstance(holder, str) and holder else None


def held(task: Task) -> bool:
    return held_by(task) is not None


def mark_held(live: LiveTask) -> None:
    """Mark the task kept open by its actor (saved with its next change, so a
    restarted gateway keeps it open and listens for it again)."""
    metadata = {**(live.task.metadata or {})}
    metadata["gateway"] = {**metadata.get("gateway", {}), HELD_KEY: live.address}
    live.task = msgspec.structs.replace(live.task, metadata=metadata)


def agent_message(live: LiveTask, content: Any) -> Message:
    """``content`` as a message of the agent in the task's conversation."""
    return Message(
        message_id=uuid.uuid4().hex,
        role="agent",
        parts=parts_from_content(plain(content)),
        task_id=live.task.id,
        context_id=live.task.context_id,
    )


def _ended(run: Run, state: str, err: ActorBusError | None = None) -> Run:
    return dataclasses.replace(
        run,
        state=state,
        ended_ms=now_ms(),
        error_code=err.code if err else None,
        error_message=str(err) if err else None,
    )


def request_key(live: LiveTask) -> str:
    """What an actor correlates and deduplicates a protocol request by (its
    envelope's ``context.idempotency_key``): ``<protocol>:<task id>:<message id>``,
    the message being the client's latest (its own message id); the
    conversation (the task's context id) is the envelope's ``session_id``."""
    users = [m for m in live.task.history or () if m.role == "user"]
    message_id = users[-1].message_id if users else ""
    return f"{live.protocol}:{live.task.id}:{message_id}"
