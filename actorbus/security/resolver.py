"""did:wba documents of outside identities, fetched and kept for a while.

A DID names where its document lives (``did_document_url``); the document is
fetched over HTTPS (plain HTTP only for loopback hosts, where tests and local
development run), bounded in size and time, parsed and checked against the DID,
and reused for ``ttl`` seconds so a busy caller costs one fetch, not one per
request. Every failure is a :class:`DidResolutionError` saying what happened.
"""

from __future__ import annotations

import ipaddress
import ssl
import time
from typing import Any, Final

import aiohttp

from actorbus.codecs.common import read_json
from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.did import DidDocument, parse_did, parse_did_document

DOC_TTL: Final = 30.0  # seconds a resolved DID document is reused
DOC_LIMIT: Final = 256 * 1024  # bytes of a DID document
RESOLVE_TIMEOUT: Final = 5.0  # seconds to fetch a DID document
_CACHE: Final = 1024


class DidResolutionError(AuthError):
    """A DID whose document could not be had: malformed, unreachable, too large,
    not a DID document, or not this DID's."""


def is_loopback(host: str) -> bool:
    """Whether did:wba documents of ``host`` may be fetched over plain HTTP."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class DidResolver:
    """Resolves did:wba DIDs, with a time-to-live cache; ``close()`` when done."""

    def __init__(
        self,
        ttl: float = DOC_TTL,
        timeout: float = RESOLVE_TIMEOUT,
        limit: int = DOC_LIMIT,
        *,
        tls: ssl.SSLContext | None = None,
        loopback_http: bool = True,
    ) -> None:
        self.ttl = ttl
        self.timeout = timeout
        self.limit = limit
        self.tls = tls  # whom HTTPS trusts (default: the system's CAs)
        self.loopback_http = loopback_http  # plain HTTP for loopback hosts (development)
        self._http: aiohttp.ClientSession | None = None
        self._docs: dict[str, tuple[float, DidDocument, dict[str, Any]]] = {}

    async def resolve(self, did: str) -> DidDocument:
        """The DID's document, parsed and checked."""
        return (await self._entry(did))[1]

    async def resolve_json(self, did: str) -> dict[str, Any]:
        """The same document as the JSON object it was (for a library that reads
        DID documents itself)."""
        return (await self._entry(did))[2]

    async def _entry(self, did: str) -> tuple[float, DidDocument, dict[str, Any]]:
        now = time.monotonic()
        cached = self._docs.get(did)
        if cached is not None and cached[0] > now:
            return cached
        try:
            parsed = parse_did(did)
        except DecodeError as e:
            raise DidResolutionError(str(e)) from None
        url = parsed.document_url
        if self.loopback_http and is_loopback(parsed.host):
            url = "http://" + url.removeprefix("https://")
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(ssl=self.tls if self.tls is not None else True),
            )
        try:
            async with self._http.get(url, allow_redirects=False) as resp:
                if resp.status != 200:
                    raise DidResolutionError(f"{url} answered HTTP {resp.status}")
                raw = bytearray()
                async for chunk in resp.content.iter_chunked(65536):  # read() may stop short
                    raw += chunk
                    if len(raw) > self.limit:
                        raise DidResolutionError("the DID document is too large")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise DidResolutionError(f"the DID document {url} could not be fetched: {e}") from None
        try:
            obj = read_json(bytes(raw))
            doc = parse_did_document(obj, did)
        except DecodeError as e:
            raise DidResolutionError(str(e)) from None
        entry = (now + self.ttl, doc, obj)
        self._docs[did] = entry
        if len(self._docs) > _CACHE:
            for stale in [k for k, (until, _, _) in self._docs.items() if until <= now]:
                del self._docs[stale]
        return entry

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
