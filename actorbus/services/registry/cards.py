"""Fetching a service's capability document when its registrant did not send one.

The spec (4.2.3.2): a third party registering a service may leave ``agent_info``
out; the registry then asks the service and fills it in. Where to ask:

- ``agent_info_url`` when given (absolute, or a path on the service's own
  ``protocol://host:port``);
- otherwise, for ``agent_protocol`` ``a2a``, the A2A well-known card:
  ``/.well-known/agent-card.json``, then the pre-0.3 ``/.well-known/agent.json``,
  under the service's ``path`` first (if it has one) and at the root.

The document is stored the way the spec shows ``agent_info``: an A2A card under
``a2a_agent_card``, an ACP manifest under ``acp_agent_manifest``, an MCP server
description under ``mcp_server_info`` (a document already wrapped so is kept as
is); other protocols' documents are stored as they come.

When every source fails, registration still succeeds: the service is stored
with ``agent_info_error`` saying what was tried and why it failed, and the
leader tries again every ``card_retry_interval`` until it works (a service
registered by a third party may well be down at that moment; refusing it would
lose the registration).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from actorbus.codecs.errors import ActorBusError
from actorbus.codecs.uap import ServiceResponse

INFO_KEYS = {"a2a": "a2a_agent_card", "acp": "acp_agent_manifest", "mcp": "mcp_server_info"}
WELL_KNOWN = ("/.well-known/agent-card.json", "/.well-known/agent.json")
MAX_DOCUMENT_BYTES = 1024 * 1024


class AgentInfoFetchError(ActorBusError):
    """No source of a service's agent_info answered with a JSON object."""

    code = "E_UAP_AGENT_INFO"


def base_url(svc: ServiceResponse) -> str | None:
    """``protocol://host:port`` of an HTTP(S) service, or None."""
    scheme = (svc.protocol or "http").lower()
    if scheme not in ("http", "https") or not svc.host:
        return None
    host = f"[{svc.host}]" if ":" in svc.host and not svc.host.startswith("[") else svc.host
    return f"{scheme}://{host}" + (f":{svc.port}" if svc.port else "")


def agent_info_sources(svc: ServiceResponse) -> list[str]:
    """The URLs to try, in order; empty when agent_info is present or nothing fits."""
    if svc.agent_info:
        return []
    base = base_url(svc)
    url = (svc.agent_info_url or "").strip()
    if url:
        if url.startswith(("http://", "https://")):
            return [url]
        return [base + "/" + url.lstrip("/")] if base else []
    if (svc.agent_protocol or "").lower() != "a2a" or base is None:
        return []
    prefixes = [base]
    sub = (svc.path or "").strip().rstrip("/")
    if sub and sub != "/":
        prefixes.insert(0, base + "/" + sub.lstrip("/"))
    return [p + w for p in prefixes for w in WELL_KNOWN]


def wrap_agent_info(agent_protocol: str | None, document: dict[str, Any]) -> dict[str, Any]:
    """``document`` as the ``agent_info`` of a service of that protocol."""
    key = INFO_KEYS.get((agent_protocol or "").lower())
    if key is None or set(document) == {key}:
        return document
    return {key: document}


class AgentInfoFetcher:
    """Fetches agent cards over one aiohttp session (created on first use)."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"Accept": "application/json"},
            )
        return self._session

    async def fetch(self, svc: ServiceResponse) -> dict[str, Any]:
        """The service's agent_info, wrapped for its protocol; AgentInfoFetchError
        naming every URL tried and why each failed."""
        sources = agent_info_sources(svc)
        if not sources:
            raise AgentInfoFetchError("no agent_info_url, and no A2A address to find a card at")
        failures: list[str] = []
        for url in sources:
            try:
                document = await self._get(url)
            except AgentInfoFetchError as exc:
                failures.append(str(exc))
                continue
            return wrap_agent_info(svc.agent_protocol, document)
        raise AgentInfoFetchError("; ".join(failures))

    async def _get(self, url: str) -> dict[str, Any]:
        try:
            async with self.session().get(url) as resp:
                if resp.status != 200:
                    raise AgentInfoFetchError(f"GET {url}: HTTP {resp.status}")
                raw = await resp.content.read(MAX_DOCUMENT_BYTES + 1)
        except TimeoutError:
            raise AgentInfoFetchError(f"GET {url}: no answer within {self.timeout:g}s") from None
        except aiohttp.ClientError as exc:
            raise AgentInfoFetchError(f"GET {url}: {exc or type(exc).__name__}") from None
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise AgentInfoFetchError(f"GET {url}: document over {MAX_DOCUMENT_BYTES} bytes")
        try:
            document = json.loads(raw)
        except ValueError:
            raise AgentInfoFetchError(f"GET {url}: not JSON") from None
        if not isinstance(document, dict):
            raise AgentInfoFetchError(f"GET {url}: not a JSON object")
        return document

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
