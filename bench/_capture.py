"""Loopback packet capture with tcpdump (Debian's ``tcpdump``), for the watermark
probes of ``bench/safety.py``: every byte on the given TCP ports while a block
runs, as the ProtocolBench paper's probe captures them.

Needs the ``tcpdump`` binary and the right to capture (root, or CAP_NET_RAW);
:func:`unavailable` says why not, and the probes that need it are then
reported as skipped, with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

READY_S = 5.0


def unavailable() -> str | None:
    """Why a capture cannot run here (None: it can)."""
    if shutil.which("tcpdump") is None:
        return "tcpdump is not installed (apt-get install tcpdump)"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "capturing on loopback needs root (or CAP_NET_RAW)"
    return None


class Capture:
    """``async with Capture(ports, file) as c: ...`` then ``c.data``: the pcap bytes."""

    def __init__(self, ports: Sequence[int], file: Path) -> None:
        self.ports = list(ports)
        self.file = file
        self.data = b""
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Capture:
        wanted = " or ".join(f"port {p}" for p in self.ports)
        self._proc = await asyncio.create_subprocess_exec(
            "tcpdump", "-i", "lo", "-nn", "-U", "--immediate-mode", "-s", "0", "-w", str(self.file),
            f"tcp and ({wanted})",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self._proc.stderr is not None
        try:  # it says so once the capture is open: nothing sent after is missed
            async with asyncio.timeout(READY_S):
                while b"listening on" not in await self._proc.stderr.readline():
                    if self._proc.returncode is not None:
                        raise RuntimeError("tcpdump exited before capturing")
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._settle()
        await self._stop()
        with contextlib.suppress(FileNotFoundError):
            self.data = self.file.read_bytes()

    async def _settle(self, quiet_s: float = 0.2, most_s: float = 3.0) -> None:
        """Until the capture file has stopped growing (what was sent last is in)."""
        loop = asyncio.get_running_loop()
        deadline, size, since = loop.time() + most_s, -1, loop.time()
        while loop.time() < deadline:
            now_size = self.file.stat().st_size if self.file.exists() else 0
            if now_size != size:
                size, since = now_size, loop.time()
            elif loop.time() - since >= quiet_s:
                return
            await asyncio.sleep(0.05)

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            async with asyncio.timeout(5):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
