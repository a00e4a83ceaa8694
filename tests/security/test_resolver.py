"""The did:wba resolver: fetched from where the DID says, checked, kept for its
time to live, and every failure named."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from actorbus.security.identity import Identity
from actorbus.security.resolver import DidResolutionError, DidResolver


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, dict[str, int], Identity]]:
    """A loopback web site serving did:wba documents; yields its DID base, the
    count of fetches per path, and the identity it describes."""
    me = Identity.generate()
    hits: dict[str, int] = {}
    runner: web.AppRunner | None = None

    async def doc(request: web.Request) -> web.StreamResponse:
        hits[request.path] = hits.get(request.path, 0) + 1
        name = request.match_info["name"]
        if name == "huge":
            return web.Response(body=b" " * 300_000, content_type="application/json")
        if name == "missing":
            raise web.HTTPNotFound()
        did = f"{base}:agents:{name}"
        return web.json_response(me.public.did_document(did))

    app = web.Application()
    app.router.add_get("/agents/{name}/did.json", doc)
    runner = web.AppRunner(app)
    await runner.setup()
    site_ = web.TCPSite(runner, "127.0.0.1", 0)
    await site_.start()
    port = runner.addresses[0][1]
    base = f"did:wba:127.0.0.1%3A{port}"
    try:
        yield base, hits, me
    finally:
        await runner.cleanup()


async def test_a_document_is_fetched_once_within_its_ttl(
    site: tuple[str, dict[str, int], Identity],
) -> None:
    base, hits, me = site
    resolver = DidResolver(ttl=60)
    try:
        did = f"{base}:agents:echo"
        doc = await resolver.resolve(did)
        assert doc.id == did
        await resolver.resolve(did)
        assert hits == {"/agents/echo/did.json": 1}
        for name, why in (("missing", "HTTP 404"), ("huge", "too large")):
            with pytest.raises(DidResolutionError, match=why):
                await resolver.resolve(f"{base}:agents:{name}")
        with pytest.raises(DidResolutionError, match="did"):
            await resolver.resolve("did:web:example.com")
    finally:
        await resolver.close()
    expired = DidResolver(ttl=0)
    try:
        await expired.resolve(f"{base}:agents:echo")
        await expired.resolve(f"{base}:agents:echo")
        assert hits["/agents/echo/did.json"] == 3
    finally:
        await expired.close()
    assert me.public.did_document()["id"] == me.did
