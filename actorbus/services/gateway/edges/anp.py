"""The ANP edge: each agent (actor type) as an ANP agent with a did:wba identity.

Routes (``{agent}`` is the actor type's name in the registry):

- ``GET /anp/{agent}/ad.json``: the agent description (``protocolType`` ANP, one
  ``StructuredInterface`` of protocol ``openrpc`` with the agent's intents as
  methods, ``didwba`` as the security scheme).
- ``GET /anp/{agent}/did.json``: the DID document of the agent's DID,
  ``did:wba:{host}[%3A{port}]:anp:{agent}`` (host and port of ``--public-url`` or
  of the request), so a did:wba resolver finds it at ``/anp/{agent}/did.json``.
  Every agent's document holds the gateway's one Ed25519 key, generated on the
  first start and kept next to the database (``{db}.anp-key.pem``, mode 0600).
- ``POST /anp/{agent}/rpc``: JSON-RPC 2.0. The ``Authorization: DIDWba v="1.1",
  ...`` header is required: the caller's did:wba document is fetched (HTTPS;
  plain HTTP only for loopback hosts, ``localhost``/``127.0.0.0/8``/``::1``),
  the signature over ``{nonce, timestamp, aud, did}`` checked with ``aud`` = the
  gateway's host name, the timestamp must be within 30 s of the gateway's clock,
  and a nonce is accepted once in that window. The RFC 9421 HTTP message
  signatures anp 1.x clients send by default (``Signature-Input``/``Signature``
  with ``keyid`` = the caller's DID URL, covering ``@method``, ``@target-uri``
  and ``content-digest``) are accepted the same way, the target being
  ``--public-url`` (or the request's scheme and host) plus the path. A failure
  is HTTP 401 (403 for a key not listed under ``authentication``) with
  ``WWW-Authenticate: DIDWba realm=..., error=..., error_description=...`` and a
  JSON-RPC error -32000 (-32001) body. No Bearer token is issued: every request
  is signed.
- ``GET /anp``: the agents served, with their DIDs and description URLs.

A call becomes a gateway task (:meth:`GatewayCore.submit`): ``method`` is the
intent, ``params`` the content (by name; a ``text`` method takes its one string
param, ``{"text": ...}`` or ``{"payload": ...}``), ``params._meta`` the
carried envelope fields (``context.session_id`` picks the session). The caller's
DID is kept in the task's message metadata (``anp.did``). A session whose last
task waits for input (the actor replied ``InputRequired``) is continued by the
next call in it. Answers are JSON-RPC with HTTP 200, errors in ANP's JSON-RPC
form (codes of :data:`actorbus.codecs.anp.RPC_CODE_OF`, ``data.code`` the
actorbus code); bodies are read as JSON whatever their Content-Type.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Final
from urllib.parse import quote, urlsplit

from aiohttp import web

from actorbus.codecs.anp import (
    agent_description,
    decode_request,
    encode_response,
    error_response,
    rpc_error,
)
from actorbus.codecs.common import content_intent, read_json
from actorbus.codecs.envelope import Envelope, EnvelopeContext
from actorbus.codecs.errors import (
    ActorBusError,
    DecodeError,
    MessageTooLargeError,
    RemoteError,
    UnsupportedError,
    ValidationFailedError,
)
from actorbus.security.did import DidDocument, did_document, parse_did, wba_authority
from actorbus.security.didwba import (
    AUTH_SCHEME,
    DidWbaAuthError,
    parse_auth_header,
    verify_auth_header,
)
from actorbus.security.http_signatures import (
    HttpSignature,
    check_content_digest,
    parse_http_signature,
    verify_http_signature,
)
from actorbus.security.keys import load_key
from actorbus.security.multibase import b58encode, b64url, b64url_decode
from actorbus.security.resolver import DidResolutionError, DidResolver
from actorbus.services.gateway.agents import Agent, AgentNotFoundError
from actorbus.services.gateway.auth import Caller, current_caller
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.edges import Edge
from actorbus.services.gateway.edges.http import base_url, json_response, read_body
from actorbus.services.gateway.settings import GatewaySettings
from actorbus.services.gateway.settled import ask_agent, task_outcome

log = logging.getLogger("actorbus.gateway.anp")

PREFIX: Final = "/anp"
# The window every actorbus receiver keeps (security.replay): a header is signed
# for one request, so only clock skew and transit take any of it.
MAX_AGE: Final = 30.0  # seconds a DIDWba timestamp stays valid
MAX_SKEW: Final = 30.0  # seconds a DIDWba timestamp may be ahead of our clock
KEY_SUFFIX: Final = ".anp-key.pem"


def add_key_agreement(doc: dict[str, Any], did: str, keys: Any) -> None:
    """An actor's X25519 key as ANP's E2EE reads it (``X25519KeyAgreementKey2019``,
    the raw key in base58btc)."""
    if not isinstance(keys, dict) or not isinstance(keys.get("x25519"), str):
        return
    raw = b64url_decode(keys["x25519"])
    method = {
        "id": f"{did}#{keys.get('fragment', 'key-x25519-e2ee')}",
        "type": "X25519KeyAgreementKey2019",
        "controller": did,
        "publicKeyMultibase": "z" + b58encode(raw),
    }
    doc["verificationMethod"].append(method)
    doc["keyAgreement"] = [*doc.get("keyAgreement", []), method["id"]]


# -- shared with the Agora edge: one call of an agent as a gateway task -------------


# -- identity -------------------------------------------------------------------------


def agent_did(base: str, agent: str) -> str:
    """``did:wba:{host}[%3A{port}]:anp:{agent}`` for the gateway at ``base``."""
    parts = urlsplit(base)
    authority = wba_authority(parts.hostname or "localhost", parts.port)
    segment = quote(agent, safe="").replace("~", "%7E")
    did = f"did:wba:{authority}:anp:{segment}"
    parse_did(did)  # DecodeError for a host no DID can name
    return did


def audience(base: str) -> str:
    """The ``aud`` DIDWba callers sign: the gateway's host name (no port)."""
    return urlsplit(base).hostname or ""


def openrpc_methods(agent: Agent) -> list[dict[str, Any]]:
    """One OpenRPC method per intent the actor handles."""
    methods = []
    for intent, schema in sorted(agent.intents.items()):
        params: list[dict[str, Any]] = []
        if isinstance(schema, dict):
            required = set(schema.get("required") or ())
            for name, sub in (schema.get("properties") or {}).items():
                params.append({"name": name, "schema": sub, "required": name in required})
        elif intent == "text":
            params = [{"name": "text", "schema": {"type": "string"}, "required": True}]
        methods.append(
            {
                "name": intent,
                "description": f"{agent.name}: the {intent!r} handler",
                "paramStructure": "by-name",
                "params": params,
                "result": {"name": "result", "schema": {}},
            }
        )
    return methods


def _text_content(content: Any) -> Any:
    """A ``text`` method's params: their one string value."""
    if isinstance(content, dict) and len(content) == 1:
        (value,) = content.values()
        if isinstance(value, str):
            return value
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], str):
        return content[0]
    return content


class AnpEdge(Edge):
    name: ClassVar[str] = "anp"

    def __init__(self, core: GatewayCore, settings: GatewaySettings) -> None:
        super().__init__(core, settings)
        self.key_path = Path(str(core.store.path) + KEY_SUFFIX)
        self.key = load_key(self.key_path)
        self.resolver = DidResolver()
        self._nonces: OrderedDict[tuple[str, str], float] = OrderedDict()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PREFIX, self.list_agents),
            web.get(PREFIX + "/{agent}/ad.json", self.description),
            web.get(PREFIX + "/{agent}/did.json", self.did_json),
            web.post(PREFIX + "/{agent}/rpc", self.rpc),
        ]

    async def close(self) -> None:
        await self.resolver.close()

    # -- documents ---------------------------------------------------------------------
    def _urls(self, base: str, agent: str) -> tuple[str, str, str]:
        root = f"{base}{PREFIX}/{agent}"
        return root + "/ad.json", root + "/rpc", root + "/did.json"

    async def list_agents(self, request: web.Request) -> web.Response:
        base = base_url(request, self.settings.public_url)
        out = []
        for a in await self.core.agents():
            ad, rpc, did_url = self._urls(base, a.name)
            did = agent_did(base, a.name)
            out.append({"name": a.name, "did": did, "ad": ad, "rpc": rpc, "didDocument": did_url})
        return json_response({"agents": out})

    async def _agent_or_404(self, request: web.Request) -> Agent | web.Response:
        try:
            return await self.core.agent(request.match_info["agent"])
        except AgentNotFoundError as e:
            return json_response({"error": "not_found", "message": str(e)}, status=404)

    async def description(self, request: web.Request) -> web.Response:
        agent = await self._agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        base = base_url(request, self.settings.public_url)
        ad, rpc, _ = self._urls(base, agent.name)
        try:
            doc = agent_description(
                name=agent.name,
                did=agent_did(base, agent.name),
                url=ad,
                rpc_url=rpc,
                methods=openrpc_methods(agent),
                description=agent.description or f"actorbus agent {agent.name}",
            )
        except DecodeError as e:  # a host a DID cannot name (an IPv6 literal)
            return json_response({"error": "bad_host", "message": str(e)}, status=500)
        return json_response(doc)

    async def did_json(self, request: web.Request) -> web.Response:
        agent = await self._agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        base = base_url(request, self.settings.public_url)
        ad, _, _ = self._urls(base, agent.name)
        did = agent_did(base, agent.name)
        try:
            doc = did_document(
                did,
                self.key.public_key(),
                services=[{"id": f"{did}#ad", "type": "AgentDescription", "serviceEndpoint": ad}],
            )
        except DecodeError as e:
            return json_response({"error": "bad_host", "message": str(e)}, status=500)
        if "e2ee_keys" in agent.intents:  # the actor holds its end-to-end key itself
            with contextlib.suppress(ActorBusError):
                keys = await self.core.system.ask(agent.address, {}, intent="e2ee_keys", timeout=2)
                add_key_agreement(doc, did, keys)
        return json_response(doc)

    # -- authentication ------------------------------------------------------------------
    async def _resolve(self, did: str, realm: str) -> DidDocument:
        """The caller's DID document (``security.resolver``: fetched, kept a while)."""
        try:
            return await self.resolver.resolve(did)
        except DidResolutionError as e:
            raise DidWbaAuthError("invalid_did", str(e), realm=realm) from None

    def _seen_nonce(self, did: str, nonce: str) -> bool:
        """Record a nonce; True if it was used within the replay window."""
        now = time.monotonic()
        while self._nonces:
            first, until = next(iter(self._nonces.items()))
            if until > now:
                break
            del self._nonces[first]
        if (did, nonce) in self._nonces:
            return True
        self._nonces[(did, nonce)] = now + MAX_AGE + MAX_SKEW
        return False

    async def authenticate(
        self, request: web.Request, realm: str, base: str
    ) -> tuple[str, HttpSignature | None]:
        """The caller's DID, proved by its DIDWba header (or, as anp 1.x clients send
        by default, an RFC 9421 HTTP message signature, returned so the body can be
        held to its Content-Digest once read); DidWbaAuthError if not. Needs no
        body: nobody unproved makes the gateway read or parse one."""
        header = request.headers.get("Authorization")
        signed = "Signature-Input" in request.headers and "Signature" in request.headers
        if signed and not (header or "").lower().startswith(AUTH_SCHEME.lower()):
            return await self._http_signature(request, realm, base)
        auth = parse_auth_header(header, realm=realm)
        doc = await self._resolve(auth.did, realm)
        verify_auth_header(
            auth,
            doc,
            aud=realm,
            now=datetime.now(UTC),
            seen_nonce=self._seen_nonce,
            max_age=MAX_AGE,
            max_skew=MAX_SKEW,
        )
        return auth.did, None

    async def _http_signature(
        self, request: web.Request, realm: str, base: str
    ) -> tuple[str, HttpSignature]:
        sig = parse_http_signature(request.headers, realm)
        did = sig.keyid.partition("#")[0]
        doc = await self._resolve(did, realm)
        url = base + request.path_qs
        verify_http_signature(
            sig,
            doc,
            request.method,
            url,
            request.headers,
            realm,
            max_age=MAX_AGE,
            max_skew=MAX_SKEW,
        )
        return did, sig

    def _signed_body(
        self, did: str, sig: HttpSignature, request: web.Request, body: bytes, realm: str
    ) -> None:
        """The body the signature's Content-Digest names, and a nonce not seen before
        (taken only for a request that is whole, so a tampered copy cannot burn it)."""
        check_content_digest(sig, request.headers, body, realm)
        if self._seen_nonce(did, sig.nonce or b64url(sig.signature)):
            raise DidWbaAuthError("invalid_nonce", "the nonce was already used", realm=realm)

    # -- JSON-RPC --------------------------------------------------------------------------
    async def rpc(self, request: web.Request) -> web.Response:
        base = base_url(request, self.settings.public_url)
        realm = audience(base)
        try:  # who is asking, before a byte of the body is read
            caller, sig = await self.authenticate(request, realm, base)
            body = await read_body(request, self.settings)
            if sig is not None:
                self._signed_body(caller, sig, request, body, realm)
        except MessageTooLargeError as e:
            return json_response(rpc_error(None, -32600, str(e)), status=413)
        except DidWbaAuthError as e:
            code = -32001 if e.status == 403 else -32000
            return json_response(
                rpc_error(None, code, str(e), {"code": e.code, "error": e.problem}),
                status=e.status,
                headers={"WWW-Authenticate": e.www_authenticate},
            )
        current_caller.set(Caller(did=caller))  # proved: the same checks as a token's
        try:
            obj: Any = read_json(body)
        except DecodeError:
            return json_response(rpc_error(None, -32700, "parse error: the body is not JSON"))
        rid = obj.get("id") if isinstance(obj, dict) else None
        rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
        if isinstance(obj, list):
            return json_response(rpc_error(None, -32600, "JSON-RPC batches are not supported"))
        try:
            env = decode_request(obj)
        except ActorBusError as e:
            return json_response(rpc_error(rid, -32600, f"invalid request: {e}", {"code": e.code}))
        agent = await self._agent_or_404(request)
        if isinstance(agent, web.Response):
            err = f"no agent {request.match_info['agent']!r}"
            return json_response(rpc_error(rid, -32002, err, {"code": "E_NOT_FOUND"}), status=404)
        try:
            carry = isinstance(obj.get("params"), dict) and "_meta" in obj["params"]
            result = await self._call(env, agent, caller, base, carry=carry)
        except ActorBusError as e:
            return json_response(error_response(e, rid))
        except Exception as exc:
            log.exception("ANP %s on %s failed", env.intent, agent.name)
            internal = RemoteError("internal error in the gateway", remote_type=type(exc).__name__)
            return json_response(error_response(internal, rid))
        if "id" not in obj:  # a notification: the call ran, nobody wants the answer
            return web.Response(status=204)
        result["id"] = rid
        return json_response(result)

    async def _call(
        self, env: Envelope, agent: Agent, caller: str, base: str, *, carry: bool
    ) -> dict[str, Any]:
        method = env.intent
        if method.startswith(("$", "rpc.")):
            raise UnsupportedError(f"method {method!r} is reserved")
        if agent.intents and method not in agent.intents:
            raise UnsupportedError(
                f"method {method!r} not found: {agent.name} offers"
                f" {', '.join(sorted(agent.intents))}"
            )
        content = env.content
        if method == "text":
            content = _text_content(content)
            if not isinstance(content, str):
                raise ValidationFailedError(
                    'method \'text\' takes one string param, e.g. {"text": "..."}'
                )
        session = env.context.session_id or uuid.uuid4().hex
        task = await ask_agent(
            self.core,
            agent,
            content,
            intent=method,
            protocol="anp",
            context_id=session,
            new_session=env.context.session_id is None,
            metadata={"anp": {"did": caller, "request_id": env.id}},
        )
        reply = task_outcome(task)
        out = Envelope(
            src=agent_did(base, agent.name),
            dst=caller,
            intent=content_intent(reply),
            content=reply,
            context=EnvelopeContext(session_id=session, parent_id=env.id),
        )
        return encode_response(out, carry=carry)
