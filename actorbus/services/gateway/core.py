"""The protocol-neutral heart of the gateway: agents, tasks, runs, events.

Edges (one module per outside protocol, see :mod:`.edges`) turn requests into
calls on :class:`GatewayCore` and its events back into their protocol. A task is
the protocol-neutral task model of :mod:`actorbus.codecs.tasks` (``Task``,
``Message``, ``Artifact``); each edge maps it to its protocol's own, and nothing
here names a protocol.

How a task runs:

- ``submit`` creates the task (``submitted``), or continues one that waits for
  input, records the conversation (context id = the envelope's
  ``context.session_id``), and starts a *run*: a background asyncio task that
  calls the actor, so a client that hangs up does not stop the work (it can
  subscribe again) and actor calls are children of the HTTP request's span.
- An *ask* run: ``working``, then ``system.ask(...)``; the reply becomes an
  artifact (and an agent message in the history) and the task ``completed``.
  Asking a streaming handler falls back to a stream run that collects the items.
- A *stream* run: ``working``, then ``system.stream(...)``; each item is an
  artifact update (one artifact, chunks appended; in the task, text that
  follows text joins it: see :func:`~actorbus.codecs.tasks.appended`), then ``completed``.
- A reply (or stream item) :class:`~.tasks.InputRequired` / ``AuthRequired``
  makes the task ``input-required`` / ``auth-required``; the client's next
  message with the task's id continues it (a new run, same session).
- Errors from the actor: ``E_VALIDATION``/``E_UNSUPPORTED``/``E_ADDRESS`` (the
  agent cannot take this input) make the task ``rejected``, anything else
  (``AskTimeoutError``, ``NoRespondersError``, a handler's exception ...)
  ``failed``; the status message says the taxonomy code and message, and the
  task's ``metadata.gateway.error`` has them as fields.
- Cancel: the task is marked ``canceled`` at once and its run is cancelled. A
  stream run closes the actorbus stream, which sends the actor a cancel (its
  generator sees ``CancelledError``); an ask in flight cannot be recalled: its
  late reply is ignored (a canceled task never changes again).
- Every change is saved to the :class:`TaskStore` before it is published to
  subscribers (a stream's artifact chunks at most every ``chunk_save_interval``,
  0.2 s; the state change that ends the stream saves all of them). Tasks a
  previous gateway left ``submitted``/``working`` are marked ``failed`` when the
  gateway starts again (their actor calls died with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import msgspec

from actorbus.actors.system import ActorSystem
from actorbus.codecs.errors import (
    ActorStoppedError,
    UnsupportedError,
)
from actorbus.codecs.tasks import (
    Artifact,
    ArtifactUpdate,
    Message,
    Part,
    StatusUpdate,
    Task,
    TaskState,
    TaskStatus,
    appended,
)
from actorbus.services.gateway.agents import (
    Agent,
    AgentNotFoundError,
    Event,
    LiveTask,
    NotCancelableError,
    TaskNotContinuableError,
    UnknownTaskError,
    iso_now,
    text_message,
)
from actorbus.services.gateway.auth import GatewayAuth
from actorbus.services.gateway.push import Pusher
from actorbus.services.gateway.runs import TaskRuns, held
from actorbus.services.gateway.settings import CoreSettings
from actorbus.services.gateway.store import Run, StoredTask, TaskQuery, TaskStore, now_ms
from actorbus.services.gateway.tasks import check_transition

log = logging.getLogger("actorbus.gateway")


META_KEY: Final = "gateway"  # key of the gateway's facts in Task.metadata


class GatewayCore:
    """Tasks over actors, shared by every edge."""

    def __init__(self, system: ActorSystem, store: TaskStore, settings: CoreSettings) -> None:
        self.system = system
        self.store = store
        self.settings = settings
        self._live: dict[str, LiveTask] = {}
        self.runs = TaskRuns(system, store, settings, self._live, self)
        self._continuing = asyncio.Lock()  # one continuation of a waiting task at a time
        self._closing = False
        self.auth: GatewayAuth | None = None  # who may ask (None: anyone)
        self.exposed: frozenset[str] | None = None  # the agents served (None: all)
        # Awaited with each change before subscribers hear of it (push notifications)
        self.on_change: Callable[[Task, Event], Awaitable[None]] | None = None
        self.pusher: Pusher | None = None  # push notification configs (None: not served)

    # -- lifecycle -----------------------------------------------------------------
    async def recover(self) -> int:
        """Fail the tasks and runs a previous gateway left unfinished; how many tasks."""
        stale = [st for st in await self.store.unfinished_tasks() if not held(st.task)]
        for st in stale:
            status = TaskStatus(
                state=TaskState.FAILED,
                message=text_message(
                    "E_STOPPED: the gateway restarted while this task ran",
                    task_id=st.task.id,
                    context_id=st.task.context_id,
                ),
                timestamp=iso_now(),
            )
            task = msgspec.structs.replace(st.task, status=status)
            await self.store.save_task(task, agent=st.agent, protocol=st.protocol)
        for run in await self.store.unfinished_runs():
            await self.store.save_run(
                dataclasses.replace(
                    run,
                    state="failed",
                    ended_ms=now_ms(),
                    error_code="E_STOPPED",
                    error_message="the gateway restarted",
                )
            )
        kept = await self.runs.relisten()  # tasks their actors keep open: still open
        if kept:
            log.info("gateway: %d task(s) kept open by their actors listen again", kept)
        return len(stale)

    async def close(self) -> None:
        """Refuse new work, stop the runs in flight (their tasks stay ``working`` in the
        store: the next start marks them failed) and end every open event stream."""
        self._closing = True
        runs = [live.run for live in self._live.values() if live.run and not live.run.done()]
        for run in runs:
            run.cancel()
        for live in self._live.values():
            for q in live.subscribers:
                q.put_nowait(None)
        if runs:
            await asyncio.wait(runs, timeout=self.settings.stop_timeout)

    # -- agents --------------------------------------------------------------------
    async def agent(self, name: str) -> Agent:
        """The agent called ``name`` (an actor type), from the registry; one not
        served here is as unknown as one that does not exist."""
        if self.exposed is None or name in self.exposed:
            for listing in await self.system.discover(name=name):
                if listing.address is not None:
                    return Agent.of(listing)
        raise AgentNotFoundError(f"no agent {name!r} in namespace {self.system.namespace}")

    async def agents(self) -> list[Agent]:
        """The agents served, by name."""
        seen: dict[str, Agent] = {}
        exposed = self.exposed
        for listing in await self.system.discover(protocol="actorbus"):
            name = listing.name
            if listing.address is None or name in seen:
                continue
            if exposed is None or name in exposed:
                seen[name] = Agent.of(listing)
        return [seen[k] for k in sorted(seen)]

    # -- tasks ---------------------------------------------------------------------
    async def get(self, task_id: str, agent: str | None = None) -> StoredTask:
        live = self._live.get(task_id)
        if live is not None and (agent is None or live.agent == agent):
            return StoredTask(live.task, live.agent, live.protocol, 0, 0)
        stored = await self.store.get_task(task_id)
        if stored is None or (agent is not None and stored.agent != agent):
            raise UnknownTaskError(f"task {task_id!r} not found")
        return stored

    def live(self, task_id: str) -> LiveTask | None:
        return self._live.get(task_id)

    async def submit(
        self,
        agent: Agent,
        message: Message,
        *,
        protocol: str,
        intent: str,
        content: Any,
        stream: bool,
        watch: bool = False,
        request_id: str | None = None,
        stamped: float | None = None,
        configure: Callable[[Task], Awaitable[None]] | None = None,
    ) -> tuple[LiveTask, AsyncIterator[Event] | None]:
        """Create a task for ``message`` (or continue the one it names) and start its run.

        With ``watch``, also the task's events (the task, then every change),
        subscribed before the run starts so none is missed. ``request_id`` (and
        ``stamped``, its time) is the id the caller's protocol gives the request,
        which it may use once (see ``auth``; a message id, say). ``configure``
        is awaited with the stored task before its run starts (a push config the
        request carried: it hears the first change)."""
        if self._closing:
            raise ActorStoppedError("the gateway is stopping")
        if self.auth is not None:
            self.auth.authorize(agent.name, intent, request_id, stamped=stamped)
        task_id = message.task_id
        if task_id is not None:
            async with self._continuing:  # two answers to one question: the second is refused
                live = await self._continued(task_id, agent)
                self._live[task_id] = live
                context_id = message.context_id or live.task.context_id
                if live.state.interrupted:  # a task kept open stays working
                    await self.set_state(live, TaskState.SUBMITTED, publish=False)
        else:
            context_id = message.context_id or uuid.uuid4().hex
            task_id = uuid.uuid4().hex
            task = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.SUBMITTED, timestamp=iso_now()),
                history=[],
                metadata={META_KEY: {"agent": agent.name, "protocol": protocol}},
            )
            live = LiveTask(task=task, agent=agent.name, protocol=protocol, address=agent.address)
        user = msgspec.structs.replace(message, task_id=task_id, context_id=context_id)
        live.task = msgspec.structs.replace(live.task, history=[*(live.task.history or []), user])
        assert context_id is not None
        intent, content = agent.choose_intent(intent, content)
        # a durable intent is stored first and handled once, also when a stream was asked for
        told = intent in agent.durable
        run = Run(
            id=uuid.uuid4().hex,
            task_id=task_id,
            kind="tell" if told else "stream" if stream else "ask",
            address=agent.durable_address(context_id) if told else live.address,
            intent=intent,
            state="running",
            started_ms=now_ms(),
        )
        # The task, its run and the conversation's turn in one commit: a request
        # costs two (this one and the settled task's), not one per change.
        live.saved_at = asyncio.get_running_loop().time()
        await self.store.save(
            task=(live.task, live.agent, live.protocol),
            run=run,
            conversation=(context_id, agent.name, protocol),
        )
        if configure is not None:
            await configure(live.task)
        self._live[task_id] = live
        live.settled.clear()
        events = self._events(live, first=live.task, queue=self._queue(live)) if watch else None
        live.run = asyncio.create_task(
            self.runs.run(live, run, content, context_id),
            name=f"gateway task {task_id}",
        )
        return live, events

    async def _continued(self, task_id: str, agent: Agent) -> LiveTask:
        live = self._live.get(task_id)
        if live is not None and live.agent != agent.name:
            raise UnknownTaskError(f"task {task_id!r} not found")
        if live is None:
            stored = await self.store.get_task(task_id)
            if stored is None or stored.agent != agent.name:
                raise UnknownTaskError(f"task {task_id!r} not found")
            live = LiveTask(
                task=stored.task,
                agent=stored.agent,
                protocol=stored.protocol,
                address=agent.address,
            )
        # the run that got the actor's Working may still be saving itself: not busy
        busy = live.run is not None and not live.run.done() and not live.kept_open
        kept_open = held(live.task) and live.state is TaskState.WORKING and not busy
        if not (live.state.interrupted or kept_open):
            raise TaskNotContinuableError(
                f"task {task_id} is {live.state.value}: only a task waiting for input, or"
                " one its actor keeps open between runs, takes another message"
            )
        return live

    async def cancel(self, task_id: str, agent: str | None = None) -> Task:
        """Mark the task canceled and stop its run (see the module docstring)."""
        live = self._live.get(task_id)
        if live is None or (agent is not None and live.agent != agent):
            stored = await self.get(task_id, agent)
            if stored.task.status.state.terminal:
                raise NotCancelableError(
                    f"task {task_id} is {stored.task.status.state.value} and cannot be canceled"
                )
            live = LiveTask(
                task=stored.task, agent=stored.agent, protocol=stored.protocol, address=""
            )
        if live.state.terminal:
            raise NotCancelableError(f"task {task_id} is {live.state.value} and cannot be canceled")
        await self.runs.release(live)  # its actor's later updates are refused from now on
        await self.set_state(live, TaskState.CANCELED)
        run = live.run
        if run is not None and not run.done() and run is not asyncio.current_task():
            run.cancel()
        return live.task

    async def find(self, query: TaskQuery) -> tuple[list[StoredTask], int]:
        """Stored tasks as :meth:`TaskStore.list_tasks` finds them, with the live
        state of those still running here."""
        found, total = await self.store.list_tasks(query)
        out = []
        for st in found:
            live = self._live.get(st.task.id)
            out.append(st if live is None else StoredTask(live.task, *_rest(st)))
        return out, total

    async def subscribe(self, task_id: str, agent: str | None = None) -> AsyncIterator[Event]:
        """The task as it is now, then each change until it ends or waits for input.

        Raises UnknownTaskError, or NotCancelableError-like UnsupportedError for a
        task that will not change any more.
        """
        live = self._live.get(task_id)
        if live is None or (agent is not None and live.agent != agent):
            stored = await self.get(task_id, agent)  # UnknownTaskError
            state = stored.task.status.state
            raise UnsupportedError(
                f"task {task_id} is {state.value}: no run is in progress to follow"
                + (" (send a message with its id to continue it)" if state.interrupted else "")
            )
        if live.state.terminal:
            raise UnsupportedError(f"task {task_id} is {live.state.value}: it is finished")
        return self._events(live, first=live.task, queue=self._queue(live))

    @staticmethod
    def _queue(live: LiveTask) -> asyncio.Queue[Event | None]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        live.subscribers.append(queue)
        return queue

    async def _events(
        self, live: LiveTask, first: Task, queue: asyncio.Queue[Event | None]
    ) -> AsyncIterator[Event]:
        try:
            yield first
            if first.status.state.terminal:
                return
            while True:
                event = await queue.get()
                if event is None:  # the gateway is stopping
                    return
                yield event
                if isinstance(event, StatusUpdate) and event.ends_stream:
                    return
        finally:
            with contextlib.suppress(ValueError):
                live.subscribers.remove(queue)

    async def wait_settled(self, live: LiveTask) -> Task:
        """The task once it is terminal or waits for the client; a task its actor
        keeps open (``Working``) as it is after ``ask_timeout``, if not finished by then."""
        settled = asyncio.ensure_future(live.settled.wait())
        try:
            run = live.run
            await asyncio.wait(
                {settled, run} if run is not None else {settled}, return_when="FIRST_COMPLETED"
            )
            if not settled.done() and live.kept_open:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(settled), self.settings.ask_timeout)
            elif not settled.done():
                await settled
        finally:
            settled.cancel()
        return live.task

    # -- changes -------------------------------------------------------------------
    async def _save(self, live: LiveTask, run: Run | None = None) -> None:
        live.saved_at = asyncio.get_running_loop().time()
        await self.store.save(task=(live.task, live.agent, live.protocol), run=run)

    async def _publish(self, live: LiveTask, event: Event) -> None:
        if self.on_change is not None:
            await self.on_change(live.task, event)
        for q in live.subscribers:
            q.put_nowait(event)

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
    ) -> None:
        """Change the task's state; saved (with ``run``, if given) unless ``persist``
        is off for a passing state a restart would treat the same (working)."""
        check_transition(live.task.id, live.state, state)
        status = TaskStatus(state=state, message=message, timestamp=iso_now())
        metadata = live.task.metadata
        if error is not None:
            metadata = {**(metadata or {})}
            metadata[META_KEY] = {**metadata.get(META_KEY, {}), "error": error}
        live.task = msgspec.structs.replace(live.task, status=status, metadata=metadata)
        if persist:
            await self._save(live, run)
        if publish:
            await self._publish(
                live,
                StatusUpdate(task_id=live.task.id, context_id=live.task.context_id, status=status),
            )
        if state.ends_stream:  # finished, or waiting for the client: the store holds it
            live.settled.set()
            self._live.pop(live.task.id, None)

    async def add_artifact_chunk(self, live: LiveTask, artifact_id: str, parts: list[Part]) -> None:
        artifacts = list(live.task.artifacts or [])
        for i, a in enumerate(artifacts):
            if a.artifact_id == artifact_id:
                artifacts[i] = msgspec.structs.replace(a, parts=appended(a.parts, parts))
                append = True
                break
        else:
            artifacts.append(Artifact(artifact_id=artifact_id, parts=parts, name="reply"))
            append = False
        live.task = msgspec.structs.replace(live.task, artifacts=artifacts)
        # Saved with the task's next state (which always follows); a long stream is
        # saved every chunk_save_interval on the way, so a restart shows progress.
        loop_time = asyncio.get_running_loop().time()
        if append and loop_time - live.saved_at >= self.settings.chunk_save_interval:
            await self._save(live)
        await self._publish(
            live,
            ArtifactUpdate(
                task_id=live.task.id,
                context_id=live.task.context_id,
                artifact=Artifact(artifact_id=artifact_id, parts=parts, name="reply"),
                append=append,
            ),
        )


def _rest(st: StoredTask) -> tuple[str, str, int, int]:
    return st.agent, st.protocol, st.created_ms, st.updated_ms
