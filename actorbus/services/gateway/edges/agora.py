"""The Agora edge: each agent (actor type) as an Agora receiver.

Routes (``{agent}`` is the actor type's name in the registry):

- ``POST /agora/{agent}``: ``{body, protocolHash, protocolSources, multiround}``
  -> the actor is asked (intent ``text``, or the actor's only handler) with the
  body -> ``{status: "success", body}``; a ``multiround`` request opens a
  conversation and the reply adds ``conversationId`` and ``conversationExpires``
  (ISO 8601, UTC; each turn moves it :data:`CONVERSATION_TTL` seconds on).
- ``POST /agora/{agent}/conversations/{id}``: a follow-up in that conversation
  (one conversation is one actorbus session: ``context.session_id`` = the id).
  When the actor's last reply was ``InputRequired``, the follow-up answers it.
- ``DELETE /agora/{agent}/conversations/{id}``: closes it (``{status: "success"}``,
  also for an unknown id, as the SDK's receiver does); later follow-ups fail.
- ``GET /agora``: the agents served, with their URLs.

Open conversations live in the gateway's memory (a restart closes them); their
turns are recorded in the database's conversations table like other sessions.

``protocolHash`` (``null``: natural language) is checked: one of
``protocolSources`` (``data:`` URIs, percent-encoded or base64, or http(s) URLs
fetched with a 5 s limit) must hash to it, SHA-1 as 40 hex digits (the spec) or
base64 (the SDK); documents once verified are remembered by hash. The reply
body is the actor's reply as text (other JSON as its JSON text).

Errors, as Agora's SDK needs them, are HTTP 200 with an error body: the spec's
``{"status": "failure", "error": "E_CODE: message"}``, or the SDK's
``{"status": "error", "message": ...}`` when the request's hash was base64 (an
SDK sender); both carry ``"body": null`` too, because the SDK's sender reads
``body`` whatever the status. Bodies are JSON whatever their Content-Type; a
malformed one is an ``E_DECODE`` error reply, never a 500. Unknown agent: 404,
body over the size limit: 413, both with an error body.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, Literal

import aiohttp
from aiohttp import web

from actorbus.codecs.agora import (
    agora_facts,
    body_text,
    decode_request,
    error_reply,
    hash_matches,
    parse_protocol_document,
    read_data_uri,
)
from actorbus.codecs.common import read_json
from actorbus.codecs.errors import (
    ActorBusError,
    ActorNotFoundError,
    AuthError,
    DecodeError,
    MessageTooLargeError,
    RateLimitedError,
    RemoteError,
    ValidationFailedError,
)
from actorbus.services.gateway.agents import Agent, AgentNotFoundError
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.edges import Edge
from actorbus.services.gateway.edges.http import base_url, json_response, read_body, refusal
from actorbus.services.gateway.settings import GatewaySettings
from actorbus.services.gateway.settled import ask_agent, task_outcome

log = logging.getLogger("actorbus.gateway.agora")

PREFIX: Final = "/agora"
CONVERSATION_TTL: Final = 300.0  # seconds a conversation stays open after its last turn
SOURCE_TIMEOUT: Final = 5.0  # seconds to fetch a protocol source
SOURCE_LIMIT: Final = 256 * 1024  # bytes of a protocol document
MAX_CONVERSATIONS: Final = 10_000  # open conversations before expired ones are swept
MAX_PROTOCOLS: Final = 256  # verified protocol documents remembered
Style = Literal["spec", "sdk"]


class UnknownConversationError(ActorNotFoundError):
    """No open conversation of that id (never opened, closed or expired)."""


@dataclass
class Conversation:
    agent: str
    protocol_hash: str | None
    expires: float  # wall clock, seconds


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _error(err: ActorBusError, style: Style, status: int = 200) -> web.Response:
    return json_response({**error_reply(err, style=style), "body": None}, status)


def _style_of(obj: Any) -> Style:
    """SDK senders write base64 hashes: answer them in the SDK's error shape."""
    given = obj.get("protocolHash") if isinstance(obj, dict) else None
    if isinstance(given, str) and len(given) != 40:
        return "sdk"
    return "spec"


class AgoraEdge(Edge):
    name: ClassVar[str] = "agora"

    def __init__(self, core: GatewayCore, settings: GatewaySettings) -> None:
        super().__init__(core, settings)
        self._conversations: dict[str, Conversation] = {}
        self._protocols: dict[str, str] = {}  # hex hash -> verified document
        self._http: aiohttp.ClientSession | None = None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PREFIX, self.list_agents),
            web.post(PREFIX + "/{agent}", self.new_message),
            web.post(PREFIX + "/{agent}/conversations/{cid}", self.follow_up),
            web.delete(PREFIX + "/{agent}/conversations/{cid}", self.close_conversation),
        ]

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def list_agents(self, request: web.Request) -> web.Response:
        base = base_url(request, self.settings.public_url)
        agents = await self.core.agents()
        return json_response(
            {"agents": [{"name": a.name, "url": f"{base}{PREFIX}/{a.name}"} for a in agents]}
        )

    # -- requests ----------------------------------------------------------------------
    async def new_message(self, request: web.Request) -> web.Response:
        return await self._handle(request, None)

    async def follow_up(self, request: web.Request) -> web.Response:
        return await self._handle(request, request.match_info["cid"])

    async def close_conversation(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        conv = self._conversations.get(cid)
        if conv is not None and conv.agent == request.match_info["agent"]:
            del self._conversations[cid]
        return json_response({"status": "success"})

    async def _handle(self, request: web.Request, cid: str | None) -> web.Response:
        try:
            raw = await read_body(request, self.settings)
        except MessageTooLargeError as e:
            too_big = ValidationFailedError(str(e))
            return _error(too_big, "spec", status=413)
        try:
            obj = read_json(raw)
        except DecodeError as e:
            return _error(e, "spec")
        style = _style_of(obj)
        try:
            agent = await self.core.agent(request.match_info["agent"])
        except AgentNotFoundError as e:
            return _error(e, style, status=404)
        try:
            return json_response(await self._answer(agent, obj, cid))
        except (AuthError, RateLimitedError) as e:  # refused before any work: HTTP says so
            return refusal({**error_reply(e, style=style), "body": None}, e)
        except ActorBusError as e:
            return _error(e, style)
        except Exception as exc:
            log.exception("Agora message to %s failed", agent.name)
            internal = RemoteError("internal error in the gateway", remote_type=type(exc).__name__)
            return _error(internal, style)

    async def _answer(self, agent: Agent, obj: Any, cid: str | None) -> dict[str, Any]:
        env = decode_request(obj, conversation_id=cid)
        if self.core.auth is not None:
            self.core.auth.authorize(agent.name, env.intent)
        facts = agora_facts(env)
        digest = facts.get("protocolHash")
        protocol_name = None
        if isinstance(digest, str):
            document = await self._protocol(digest, facts.get("protocolSources") or [])
            with contextlib.suppress(ActorBusError):
                protocol_name = parse_protocol_document(document).name
        now = time.time()
        if cid is not None:
            self._open_conversation(cid, agent, now)
            multiround = True
        else:
            multiround = bool(facts.get("multiround"))
        session = cid or uuid.uuid4().hex
        metadata = {
            "agora": {
                "protocolHash": digest,
                "protocolName": protocol_name,
                "protocolSources": list(facts.get("protocolSources") or []),
                "multiround": multiround,
            }
        }
        task = await ask_agent(
            self.core,
            agent,
            env.content,
            intent=env.intent,
            protocol="agora",
            context_id=session,
            new_session=cid is None,
            metadata=metadata,
        )
        reply: dict[str, Any] = {"status": "success", "body": body_text(task_outcome(task))}
        if multiround:
            expires = time.time() + CONVERSATION_TTL
            self._conversations[session] = Conversation(agent.name, digest, expires)
            if len(self._conversations) > MAX_CONVERSATIONS:
                self._forget_expired(now)
            reply["conversationId"] = session
            reply["conversationExpires"] = _iso(expires)
        return reply

    def _forget_expired(self, now: float) -> None:
        for stale in [k for k, c in self._conversations.items() if c.expires <= now]:
            del self._conversations[stale]

    def _open_conversation(self, cid: str, agent: Agent, now: float) -> None:
        conv = self._conversations.get(cid)
        if conv is None or conv.agent != agent.name:
            raise UnknownConversationError(f"no open conversation {cid!r} with {agent.name}")
        if conv.expires <= now:
            del self._conversations[cid]
            raise UnknownConversationError(f"conversation {cid!r} expired")

    # -- protocol documents ---------------------------------------------------------------
    async def _protocol(self, digest: str, sources: list[Any]) -> str:
        """The protocol document whose SHA-1 is ``digest`` (hex), from a source."""
        known = self._protocols.get(digest)
        if known is not None:
            return known
        problems = []
        for source in sources:
            try:
                text = await self._fetch(source)
            except ActorBusError as e:
                problems.append(str(e))
                continue
            if hash_matches(text, digest):
                if len(self._protocols) >= MAX_PROTOCOLS:  # forget the oldest
                    del self._protocols[next(iter(self._protocols))]
                self._protocols[digest] = text
                return text
            problems.append(f"{str(source)[:60]!r} does not hash to protocolHash")
        why = "; ".join(problems) if problems else "no protocolSources given"
        raise ValidationFailedError(f"unknown protocol {digest}: {why}")

    async def _fetch(self, source: Any) -> str:
        if isinstance(source, str) and source.startswith("data:"):
            return read_data_uri(source)
        if not isinstance(source, str) or not source.startswith(("http://", "https://")):
            raise DecodeError(f"protocol source {str(source)[:60]!r} is not a data: or http(s) URL")
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SOURCE_TIMEOUT))
        try:
            async with self._http.get(source) as resp:
                if resp.status != 200:
                    raise RemoteError(f"{source[:60]!r} answered HTTP {resp.status}")
                raw = await resp.content.read(SOURCE_LIMIT + 1)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise RemoteError(f"{source[:60]!r} could not be fetched: {e}") from None
        if len(raw) > SOURCE_LIMIT:
            raise ValidationFailedError(f"{source[:60]!r} is too large for a protocol document")
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise DecodeError(f"{source[:60]!r} is not UTF-8 text") from None
