"""HTTP answers every edge gives the same way: JSON bodies and event streams.

An event stream's headers go out before its first event, so an error after
that cannot be a status code: it goes out as the stream's last frame, in the
protocol's own shape (``error_frame``). A client that goes away ends the
stream quietly; the task it watched goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import msgspec
from aiohttp import web

from actorbus.codecs.errors import (
    ActorBusError,
    AuthError,
    ForbiddenError,
    MessageTooLargeError,
    RateLimitedError,
    RemoteError,
    ReplayError,
)
from actorbus.services.gateway.settings import GatewaySettings

log = logging.getLogger("actorbus.gateway")

# A Host header clients may send: a name, IPv4 or a bracketed IPv6, and a port.
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(:\d{1,5})?")

E = TypeVar("E")

SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """``body`` as a JSON answer (msgspec: faster than aiohttp's json.dumps)."""
    return web.Response(
        body=msgspec.json.encode(body),
        status=status,
        content_type="application/json",
        headers=headers,
    )


async def read_body(request: web.Request, settings: GatewaySettings) -> bytes:
    """The request's body, as every edge reads it: MessageTooLargeError past
    ``max_body`` (each edge answers it in its protocol, with 413), and an HTTP
    408 that closes the connection for a client that takes longer than
    ``body_timeout`` to send it (a slow client holds nothing for long)."""
    try:
        async with asyncio.timeout(settings.body_timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        size = request.content_length or settings.max_body + 1
        raise MessageTooLargeError("the request body", size, settings.max_body) from None
    except TimeoutError:
        raise web.HTTPRequestTimeout(
            text=f"the request body did not arrive within {settings.body_timeout:g} s",
            headers={"Connection": "close"},
        ) from None


def base_url(request: web.Request, public_url: str | None) -> str:
    """The gateway's base URL as its clients reach it (cards, OAuth metadata, token
    audiences): the configured public URL, else the request's scheme and Host.
    A Host that names no host is refused with 400, never echoed into a document."""
    if public_url:
        return public_url.rstrip("/")
    host = request.host
    if not _HOST.fullmatch(host):
        raise web.HTTPBadRequest(
            text=f"the Host header is not a host name ({host.encode('ascii', 'replace')!r}); "
            "the gateway's operator can set --public-url"
        )
    return f"{request.scheme}://{host}"


def refusal(body: Any, err: AuthError | RateLimitedError) -> web.Response:
    """``body`` (the protocol's error) with the HTTP status of a refusal: 401 for
    a caller not proved, 403 for a token that does not cover the request, 409 for
    a replay, 429 with Retry-After for a rate limit, as HTTP clients and proxies
    expect of every edge (the auth middleware adds the ``WWW-Authenticate``)."""
    if isinstance(err, RateLimitedError):
        wait = {"Retry-After": str(int(err.retry_after or 1))}
        return json_response(body, 429, wait)
    if isinstance(err, ReplayError):
        return json_response(body, 409)
    return json_response(body, 403 if isinstance(err, ForbiddenError) else 401)


async def sse_error(request: web.Request, frame: bytes) -> web.StreamResponse:
    """An event stream of one error frame: what a client that asked for a stream
    (and reads only streams) gets when it cannot have one."""
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):
        await response.write(frame)
        await response.write_eof()
    return response


async def serve_events(
    request: web.Request,
    events: AsyncIterator[E],
    frames: Callable[[E], Iterable[bytes]],
    error_frame: Callable[[ActorBusError], bytes],
    what: str,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with an event stream: ``frames`` of each event, then the end; on a
    failure, ``error_frame`` of it as the last frame. ``what`` names the stream
    in the log. ``events`` is closed however the stream ends."""
    response = web.StreamResponse(headers={**SSE_HEADERS, **(headers or {})})
    await response.prepare(request)
    try:
        async for event in events:
            for frame in frames(event):
                await response.write(frame)
    except ConnectionError:
        log.debug("the client of %s went away (the task goes on)", what)
        return response
    except Exception as exc:  # headers are sent: the error goes out as the last frame
        if isinstance(exc, ActorBusError):
            err: ActorBusError = exc
        else:
            log.exception("%s failed", what)
            err = RemoteError("internal error in the gateway", remote_type=type(exc).__name__)
        with contextlib.suppress(ConnectionError):
            await response.write(error_frame(err))
    finally:
        closer = getattr(events, "aclose", None)
        if closer is not None:
            await closer()
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response
