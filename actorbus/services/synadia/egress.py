"""Calling agents served by the official Synadia host SDK (or any protocol agent).

An agent of the protocol is found by its ``$SRV.INFO.agents`` reply and
prompted on its ``prompt`` subject; its reply is a stream of frames on our
inbox, ended by an empty message. :class:`SynadiaAgent` does this for an
actorbus caller (an actor uses ``self.system.nc``): messages go out through
the codec (:func:`~actorbus.codecs.synadia.encode_request`), so an actorbus
agent on the other side gets every envelope field back; frames are checked by
:class:`~actorbus.codecs.synadia.ReplyStream`, so a peer breaking the stream
rules is a :class:`ProtocolError`, and error frames become the taxonomy's
typed errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from pydantic import BaseModel

from actorbus.codecs.common import content_intent
from actorbus.codecs.envelope import Envelope, EnvelopeContext
from actorbus.codecs.errors import (
    ActorNotFoundError,
    AskTimeoutError,
    NoRespondersError,
)
from actorbus.codecs.synadia import (
    CLIENT_INACTIVITY_TIMEOUT_S,
    DEFAULT_SESSION,
    DISCOVERY_SUBJECT,
    SENDER_KEY,
    ReplyStream,
    SynadiaAgentInfo,
    agent_token,
    chunk_to_envelope,
    encode_request,
    parse_service_info,
    request_headers,
    subject_token,
)

#: answers a mid-stream question (the query chunk's data) with the reply text
QueryHandler = Callable[[dict[str, Any]], Awaitable[str]]

_NO_RESPONDERS = "503"


async def discover_agents(
    nc: Client, *, max_wait: float = 1.0, stall: float = 0.1
) -> list[SynadiaAgentInfo]:
    """Every protocol agent answering ``$SRV.INFO.agents``: replies are read until
    ``stall`` seconds pass without one (or ``max_wait`` in all)."""
    found: list[SynadiaAgentInfo] = []
    async for info in _info_replies(nc, max_wait, stall):
        found.append(info)
    return found


async def find_agent(
    nc: Client,
    agent: str,
    *,
    owner: str | None = None,
    session: str | None = DEFAULT_SESSION,
    timeout: float = 2.0,
) -> SynadiaAgentInfo:
    """The first instance of ``agent`` (of ``owner``, in ``session``) to answer
    discovery: no waiting for the others. ActorNotFoundError when none does."""
    want = _Wanted(agent, owner, session)
    async for info in _info_replies(nc, timeout, timeout):
        if want.matches(info):
            return info
    raise ActorNotFoundError(f"no Synadia agent {want} answered $SRV.INFO within {timeout}s")


class _Wanted:
    def __init__(self, agent: str, owner: str | None, session: str | None) -> None:
        self.agent = agent_token(agent)
        self.owner = subject_token(owner) if owner is not None else None
        self.session = subject_token(session, "session") if session is not None else None

    def matches(self, info: SynadiaAgentInfo) -> bool:
        s = info.subject
        meta = info.metadata
        agent, owner = (s.agent, s.owner) if s else (meta.get("agent"), meta.get("owner"))
        session = s.session if s else meta.get("session", DEFAULT_SESSION)
        return (
            agent == self.agent and self.owner in (None, owner) and self.session in (None, session)
        )

    def __str__(self) -> str:
        return f"{self.agent}.{self.owner or '*'}.{self.session or '*'}"


async def _info_replies(
    nc: Client, max_wait: float, stall: float
) -> AsyncGenerator[SynadiaAgentInfo, None]:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    try:
        await nc.publish(DISCOVERY_SUBJECT, b"", reply=inbox)
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await sub.next_msg(timeout=min(stall, left))
            except nats.errors.TimeoutError:
                return
            if _is_no_responders(msg):
                return
            with contextlib.suppress(msgspec.DecodeError):
                info = parse_service_info(msgspec.json.decode(msg.data))
                if info is not None:
                    yield info
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


def _is_no_responders(msg: Msg) -> bool:
    return not msg.data and (msg.headers or {}).get("Status") == _NO_RESPONDERS


class SynadiaAgent:
    """A protocol agent, called from actorbus: ``stream()`` its reply items,
    or ``ask()`` for the whole reply.

    ``agent``/``owner``/``session`` name it (found with :func:`find_agent` on
    first use), or ``info`` gives a discovered one. ``src`` is the caller's
    address, put in the envelope an actorbus agent sees; ``sender`` is sent
    as the ``Agent-Sender`` header. ``timeout`` bounds the wait for each frame
    (the client SDK's 60 s; agents send a keep-alive every 30 s).
    """

    def __init__(
        self,
        nc: Client,
        agent: str | None = None,
        *,
        owner: str | None = None,
        session: str | None = DEFAULT_SESSION,
        info: SynadiaAgentInfo | None = None,
        src: str = "",
        sender: str | None = None,
        timeout: float = CLIENT_INACTIVITY_TIMEOUT_S,
        on_query: QueryHandler | None = None,
    ) -> None:
        if agent is None and info is None:
            raise TypeError("give the agent's name or its discovered info")
        self.nc = nc
        self._name, self._owner, self._session = agent, owner, session
        self._info = info
        self.src, self.sender, self.timeout, self.on_query = src, sender, timeout, on_query

    async def info(self) -> SynadiaAgentInfo:
        if self._info is None:
            assert self._name is not None
            self._info = await find_agent(
                self.nc, self._name, owner=self._owner, session=self._session
            )
        return self._info

    def request_envelope(
        self, message: Any, info: SynadiaAgentInfo, *, intent: str | None, session_id: str | None
    ) -> Envelope:
        content = message.model_dump(mode="json") if isinstance(message, BaseModel) else message
        meta = {"protocol_hint": "synadia", SENDER_KEY: self.sender} if self.sender else None
        return Envelope.model_validate(
            {
                "src": self.src,
                "dst": info.actor_type or (info.subject.agent if info.subject else ""),
                "intent": intent or content_intent(content),
                "content": content,
                "context": EnvelopeContext(session_id=session_id),
                **({"meta": meta} if meta else {}),
            }
        )

    async def stream(
        self,
        message: Any,
        *,
        intent: str | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Any]:
        """The reply's items (response chunks as content: text, JSON data an
        actorbus agent sent, bytes), in order, until the end marker. An error
        frame raises its typed error after the items before it."""
        info = await self.info()
        request = self.request_envelope(message, info, intent=intent, session_id=session_id)
        wait = self.timeout if timeout is None else timeout
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            await self.nc.publish(
                info.prompt_subject,
                encode_request(request),
                reply=inbox,
                headers=request_headers(request),
            )
            reader = ReplyStream()
            while not reader.ended:
                try:
                    msg = await sub.next_msg(timeout=wait)
                except nats.errors.TimeoutError:
                    raise AskTimeoutError(info.prompt_subject, request.intent, wait) from None
                if _is_no_responders(msg):
                    if self._name is not None:  # that instance is gone: find another next time
                        self._info = None
                    raise NoRespondersError(info.prompt_subject, request.intent)
                event = reader.feed(msg.data, msg.headers)
                if event.kind == "response" and event.chunk is not None:
                    yield chunk_to_envelope(event.chunk, request).content
                elif event.kind == "query" and event.chunk is not None:
                    await self._answer(event.chunk["data"])
            if reader.failed is not None:
                raise reader.failed
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _answer(self, query: dict[str, Any]) -> None:
        """A mid-stream question: answered by ``on_query``, else left to time out
        on the agent's side (the protocol lets the agent decide what then)."""
        if self.on_query is not None:
            answer = await self.on_query(query)
            await self.nc.publish(query["reply_subject"], answer.encode())

    async def ask(
        self,
        message: Any,
        *,
        intent: str | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """The whole reply: the one item, text items joined (an agent streaming
        tokens), else the list of items; None for a reply without items."""
        items = [
            item
            async for item in self.stream(
                message, intent=intent, session_id=session_id, timeout=timeout
            )
        ]
        if not items:
            return None
        if len(items) == 1:
            return items[0]
        if all(isinstance(i, str) for i in items):
            return "".join(items)
        return items
