"""A NATS cluster of embedded servers on loopback, for fault tests and `actorbus up --cluster`.

Every node gets fixed client and route ports (picked free at construction), so a
node that is killed comes back on the same addresses and rejoins its peers with
its own JetStream store. Streams created with ``replicas=3`` survive the loss of
any one node.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nats

from actorbus.bus.server import EmbeddedServer, ServerConfig, ServerStartError
from actorbus.bus.startstop import AsyncStartStop, SyncStartStop


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class EmbeddedCluster(AsyncStartStop, SyncStartStop):
    """``size`` nodes; ``extra`` config for each (authentication, TLS), and the
    ``client`` options (nats-py's) a connection needs to check it is up."""

    def __init__(
        self,
        size: int = 3,
        *,
        store_dir: Path | None = None,
        name: str = "actorbus",
        extra: str = "",
        client: Mapping[str, Any] | None = None,
    ):
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self._owns_dir = store_dir is None
        self.dir = Path(store_dir) if store_dir else Path(tempfile.mkdtemp(prefix="actorbus-cl-"))
        self.size, self.name, self.extra = size, name, extra
        self.client = dict(client or {})
        self.nodes: list[EmbeddedServer] = self._place()

    def _place(self) -> list[EmbeddedServer]:
        """Nodes on newly picked client and route ports."""
        ports = _free_ports(2 * self.size)
        client_ports, route_ports = ports[: self.size], ports[self.size :]
        nodes = []
        for i in range(self.size):
            routes = [f"nats-route://127.0.0.1:{p}" for j, p in enumerate(route_ports) if j != i]
            nodes.append(
                EmbeddedServer(
                    ServerConfig(
                        port=client_ports[i],
                        server_name=f"{self.name}-{i}",
                        store_dir=self.dir / f"node-{i}",
                        cluster_name=self.name,
                        cluster_port=route_ports[i],
                        routes=routes,
                        extra=self.extra,
                    )
                )
            )
        return nodes

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{node.config.port}" for node in self.nodes]

    def start_sync(self, timeout: float = 30.0) -> None:
        """Start every node and wait until JetStream can place replicated streams."""
        self._start_nodes(timeout)
        asyncio.run(wait_for_jetstream(self.urls, timeout, **self.client))

    async def start(self, timeout: float = 30.0) -> None:
        await asyncio.to_thread(self._start_nodes, timeout)
        await wait_for_jetstream(self.urls, timeout, **self.client)

    def _start_nodes(self, timeout: float, attempts: int = 3) -> None:
        """Start the nodes; ports picked free may be taken by another process (an
        outgoing connection's ephemeral port) before a node binds them, and then
        the whole cluster moves to new ports, as its routes name them all."""
        for attempt in range(1, attempts + 1):
            try:
                for node in self.nodes:
                    node.start_sync(timeout)
                return
            except ServerStartError as exc:
                self._stop_nodes()
                if not exc.port_taken or attempt == attempts:
                    self._remove_dir()
                    raise
                self.nodes = self._place()
            except BaseException:
                self.stop_sync()
                raise

    @property
    def running(self) -> bool:
        return all(node.running for node in self.nodes)

    def kill(self, index: int) -> None:
        """SIGKILL one node; its store stays for restart(index)."""
        self.nodes[index].kill()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        self.nodes[index].start_sync(timeout)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

    def stop_sync(self) -> None:
        self._stop_nodes()
        self._remove_dir()

    def _stop_nodes(self) -> None:
        for node in self.nodes:
            node.stop_sync()

    def _remove_dir(self) -> None:
        if self._owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


async def wait_for_jetstream(urls: list[str], timeout: float, **client: Any) -> None:
    """Until the cluster has a JetStream meta leader (account info answers)."""
    deadline = time.monotonic() + timeout
    nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=3, **client)
    try:
        js = nc.jetstream()
        while True:
            try:
                await js.account_info()
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ServerStartError(f"cluster JetStream not ready: {exc!r}") from exc
                await asyncio.sleep(0.2)  # meta leader election takes a moment
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
