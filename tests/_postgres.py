"""A real PostgreSQL server for the tests: Debian's binaries, a throwaway data
directory, a free loopback port; stopped by the fixture that started it.

As root (PostgreSQL refuses to run as root) it runs as the ``postgres`` user the
Debian package makes. Without the binaries, or as another user without one,
the tests that need it skip, saying what to install.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

INSTALL = "install Debian's postgresql package (make test does, as root)"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _version(path: str) -> int:
    part = Path(path).parts[-3]
    return int(part) if part.isdigit() else 0


def why_not() -> str | None:
    """Why no server can be started here (None: one can)."""
    if _bin_dir() is None:
        return f"no PostgreSQL server binaries: {INSTALL}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start PostgreSQL as its own user"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return f"no postgres user to run the server as: {INSTALL}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields its DSN. Stopped (immediately) on the way out."""
    bins = _bin_dir()
    assert bins is not None
    work = Path(tempfile.mkdtemp(prefix="actorbus-pg-"))
    data, sockets = work / "data", work / "run"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
        shutil.chown(sockets, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=60)

    try:
        run(str(bins / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = (
            f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        run(
            str(bins / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(work / "log"),
            "-w",
            "start",
        )
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            run(str(bins / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(work, ignore_errors=True)
