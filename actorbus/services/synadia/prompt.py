"""Answering one Synadia prompt from an actor: the reply stream, in order.

The protocol's caller (``synadia-ai-agents``) reads a reply as a stream on the
request's reply subject and gives up after 60 s without a message, so the
order and the liveness of what we send matter more than its content:

- a malformed prompt gets an error frame and the end marker, no ack (what the
  official host does: the caller learns at once it was refused);
- otherwise the ack first, then one ``response`` chunk per reply or stream
  item, a ``status`` ack every ``keepalive_interval`` while the actor works
  (so slow actors do not trip the caller's inactivity timeout), an error
  frame when the actor fails (the taxonomy code as ``Nats-Service-Error-Code``)
  and always the end marker last.

One :class:`ReplyWriter` per prompt serialises the frames, so a keep-alive
can never slip between an error frame and the end marker, or after the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from nats.micro.request import Request
from pydantic import BaseModel

from actorbus.actors.system import ActorSystem
from actorbus.bus.tasks import stop_task
from actorbus.codecs.common import content_intent
from actorbus.codecs.envelope import Envelope, EnvelopeContext
from actorbus.codecs.errors import (
    ActorBusError,
    MessageTooLargeError,
    RemoteError,
    WrongCallError,
)
from actorbus.codecs.synadia import (
    ACK_FRAME,
    DEFAULT_KEEPALIVE_INTERVAL_S,
    END_FRAME,
    Frame,
    error_frame,
    reply_frames,
    request_to_envelope,
    status_chunk,
)
from actorbus.services.synadia.targets import Target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptSettings:
    """How a bridged agent waits for its actor."""

    ask_timeout: float = 300.0  # seconds for a plain handler's reply
    item_timeout: float = 300.0  # seconds for each item of a streaming handler
    keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL_S  # seconds between status acks


class ReplyWriter:
    """The frames of one reply, sent in order; nothing after the end marker.

    A frame over the server's ``max_payload`` is refused here as
    :class:`MessageTooLargeError` (413 to the caller) rather than by the
    connection, whose error would say nothing useful to the caller.
    """

    def __init__(self, request: Request, max_payload: int = 0) -> None:
        self._request = request
        self._max_payload = max_payload
        self._lock = asyncio.Lock()
        self.ended = False

    async def send(self, frame: Frame) -> None:
        if 0 < self._max_payload < len(frame.data):
            raise MessageTooLargeError("a reply chunk", len(frame.data), self._max_payload)
        async with self._lock:
            if self.ended:
                return
            await self._request.respond(frame.data, headers=frame.headers)
            self.ended = frame.is_end


async def serve_prompt(
    system: ActorSystem, target: Target, request: Request, settings: PromptSettings
) -> None:
    """Answer ``request`` (a prompt for ``target``) with a whole reply stream."""
    writer = ReplyWriter(request, system.nc.max_payload)
    try:
        try:
            env = request_to_envelope(
                request.data, subject=request.subject, dst=target.address, headers=request.headers
            )
        except ActorBusError as err:  # refused before the ack, as the host does
            await writer.send(error_frame(err))
            return
        await writer.send(ACK_FRAME)
        await _answer(system, target, env, writer, settings)
    except ActorBusError as err:
        await writer.send(error_frame(err))
    except Exception:  # never the internals to an outside caller
        log.exception("synadia prompt for %s failed", target.address)
        await writer.send(error_frame(RemoteError("internal error in the actorbus bridge")))
    finally:
        with contextlib.suppress(Exception):
            await writer.send(END_FRAME)


async def _answer(
    system: ActorSystem,
    target: Target,
    env: Envelope,
    writer: ReplyWriter,
    settings: PromptSettings,
) -> None:
    """The actor's items as response chunks, keep-alives meanwhile; the
    keep-alives stop before anything else (error frame, end marker) is sent."""
    keepalive = asyncio.create_task(_keep_alive(writer, settings.keepalive_interval))
    try:
        items = cast(AsyncGenerator[Any, None], call_actor(system, target, env, settings))
        async with contextlib.aclosing(items) as it:  # leaving early cancels the producer
            async for item in it:
                for frame in reply_frames(item_envelope(item, target, env)):
                    await writer.send(frame)
    finally:
        await stop_task(keepalive, what="synadia keep-alive")


async def _keep_alive(writer: ReplyWriter, interval: float) -> None:
    frame = status_chunk("ack")
    while True:
        await asyncio.sleep(interval)
        await writer.send(frame)


async def call_actor(
    system: ActorSystem, target: Target, env: Envelope, settings: PromptSettings
) -> AsyncIterator[Any]:
    """The actor's reply items: ``stream()`` for a streaming handler, ``ask()``
    for a plain one; when the handler is not known here, ask and fall back to
    a stream if the actor says it streams."""
    intent, content = target.choose_intent(env.intent, env.content)
    session = env.context.session_id
    streams = target.streams(intent)
    if not streams:
        try:
            yield await system.ask(
                target.address,
                content,
                intent=intent,
                session_id=session,
                timeout=settings.ask_timeout,
            )
            return
        except WrongCallError:
            if streams is False:
                raise
    items = system.stream(
        target.address, content, intent=intent, session_id=session, timeout=settings.item_timeout
    )
    async with contextlib.aclosing(cast(AsyncGenerator[Any, None], items)) as it:
        async for item in it:
            yield item


def item_envelope(item: Any, target: Target, request: Envelope) -> Envelope:
    """A reply item as the reply envelope to the prompt (for :func:`reply_frames`)."""
    content = item.model_dump(mode="json") if isinstance(item, BaseModel) else item
    return Envelope(
        src=target.address,
        dst=request.src,
        intent=content_intent(content),
        content=content,
        context=EnvelopeContext(trace_id=request.context.trace_id, parent_id=request.id),
    )
