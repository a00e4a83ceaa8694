"""Request/reply over one wildcard inbox, with timers instead of wait_for.

nats-py's ``request()`` does per call: two subject validations, a NUID, an
``os.urandom`` token, a done-callback closure and ``asyncio.wait_for``. Every
``ask`` pays for it, so the system keeps its own multiplexer: one subscription
on ``{inbox_prefix}.{id}.*``, a counter for tokens, and one ``call_later``
timer per request.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actorbus.bus.client import Client

NO_RESPONDERS_STATUS = "503"


class RequestTimeout(Exception):
    """No reply before the deadline (the caller turns it into a typed error)."""


class NoResponders(Exception):
    """The server said nobody is subscribed on the subject."""


class RequestMux:
    def __init__(self, nc: Client, prefix: str) -> None:
        self.nc = nc
        self.prefix = prefix if prefix.endswith(".") else prefix + "."
        self._pending: dict[str, asyncio.Future[Msg]] = {}
        self._tokens = itertools.count(1)
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(self.prefix + "*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject[len(self.prefix) :], None)
        if future is not None and not future.done():
            future.set_result(msg)

    @staticmethod
    def _expire(future: asyncio.Future[Msg]) -> None:
        if not future.done():
            future.set_exception(RequestTimeout())

    def new_inbox(self) -> tuple[str, asyncio.Future[Msg]]:
        """Reserve a reply subject; the caller publishes with it and awaits the future."""
        token = format(next(self._tokens), "x")
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._pending[token] = future
        return self.prefix + token, future

    def discard(self, inbox: str) -> None:
        """Forget a reserved inbox whose reply is no longer awaited."""
        self._pending.pop(inbox[len(self.prefix) :], None)

    async def request(self, subject: str, body: bytes, headers: Any, timeout: float) -> Msg:
        inbox, future = self.new_inbox()
        timer = asyncio.get_running_loop().call_later(timeout, self._expire, future)
        try:
            await self.nc.publish(subject, body, reply=inbox, headers=headers)
            msg = await future
        finally:
            timer.cancel()
            self._pending.pop(inbox[len(self.prefix) :], None)
        if not msg.data and msg.headers and msg.headers.get("Status") == NO_RESPONDERS_STATUS:
            raise NoResponders()
        return msg

    def fail_all(self, exc: BaseException) -> None:
        """Wake every waiting request with ``exc`` (the connection is gone for good)."""
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)
