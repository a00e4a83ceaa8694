"""The broker of users' tests: a real nats-server, secured as production is.

By default it runs as ``actorbus up`` does: NATS JWT authentication, TLS, one
account per namespace, and every system in a test authenticates and seals its
messages end to end. So a test exercises the security path its deployment
will run, and finds there what an open broker would hide (an actor type a
member may not host, a message its policy refuses). ``secure=False`` (pytest's
``--actorbus-open``) is the open broker, one flag away.

Each test gets a namespace of its own; a secured broker learns a namespace's
account when a test first asks for it (nats-server reloads its config), so one
server serves a whole session. Keys live in a temporary directory removed with
the broker: nothing of a test run lands in ``~/.actorbus``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

import nats
from nats.aio.client import Client as NATS

from actorbus.actors.options import SystemOptions
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.security.credentials import Authority
from actorbus.security.identity import Identity
from actorbus.security.secure_broker import SecureBroker
from actorbus.security.settings import SecuritySettings


class TestBroker:
    """A nats-server for a test session (JetStream on, temporary store)."""

    __test__ = False  # not a test class, whatever pytest's name patterns say

    def __init__(self, *, secure: bool = True) -> None:
        self.secure = secure
        self._home = Path(tempfile.mkdtemp(prefix="actorbus-test-home-"))
        self._broker = SecureBroker(self._home) if secure else None
        self._authorities: dict[str, Authority] = {}
        self._lock = threading.Lock()
        extra = self._broker.server_config([]) if self._broker is not None else ""
        self.server = EmbeddedServer(ServerConfig(extra=extra))

    @property
    def url(self) -> str:
        return self.server.url

    def start_sync(self) -> None:
        """Start the server (blocking: for a session fixture)."""
        self.server.start_sync()

    def stop_sync(self) -> None:
        """Stop the server and remove its store and keys."""
        self.server.stop_sync()
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_sync()

    async def join(self, namespace: str, name: str = "actorbus") -> SystemOptions:
        """What a system in ``namespace`` connects with: on a secured broker a
        member's credentials and TLS, and end-to-end security (the namespace's
        account added first if it is new); nothing on an open one."""
        if self._broker is None:
            return {}
        await self._known(namespace)
        return {
            "connect_options": self._broker.connect_options(namespace, name),
            "security": SecuritySettings(
                home=self._home / "namespaces" / namespace,
                authority=self._authorities[namespace],
            ),
        }

    async def client(self, namespace: str, name: str = "test-client") -> NATS:
        """A plain nats-py connection of a member of ``namespace``, for what a test
        sends by hand (closed by the caller)."""
        options = (await self.join(namespace, name)).get("connect_options")
        if options is None:
            return await nats.connect(self.url, name=name)
        return await nats.connect(
            self.url,
            name=name,
            user_credentials=options.nats_credentials(),
            tls=options.tls,
            inbox_prefix=options.inbox_prefix,
        )

    async def _known(self, namespace: str) -> None:
        """The namespace's account, on the server from now on."""
        if namespace not in self._authorities:
            await asyncio.to_thread(self._add, namespace)

    def _add(self, namespace: str) -> None:
        # A thread's lock: the session's tests each run in an event loop of their own.
        with self._lock:
            if namespace in self._authorities:
                return
            assert self._broker is not None
            known = [*self._authorities, namespace]  # kept only once the server has it
            self.server.reload_sync(self._broker.server_config(known))
            self._authorities[namespace] = Authority(Identity.generate(), namespace)
