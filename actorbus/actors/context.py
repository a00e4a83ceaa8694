"""Which NATS server a command, or ``ActorSystem.connect()`` without a URL, talks
to when it is not told: the one ``actorbus up`` runs on this machine.

``actorbus up`` records the URL it serves (and its pid) in
``$ACTORBUS_HOME/context.json`` and removes it when it stops; a command without
``--url`` takes, in order: ``$ACTORBUS_URL``, ``$NATS_URL`` (the nats CLI's),
then that record while its process lives. So a second terminal needs no URL
copied from the first.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from actorbus import environment as env
from actorbus.security.settings import actorbus_home


def env_url() -> str | None:
    """The URL the environment names, if any."""
    return env.ACTORBUS_URL.get() or env.NATS_URL.get()


def context_file() -> Path:
    return actorbus_home() / "context.json"


def record(url: str, replicas: int | None = None) -> None:
    """Say that this process serves ``url`` (written whole: a reader never sees half);
    ``replicas``: what its streams should have (a cluster's), for the commands."""
    path = context_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    said: dict[str, object] = {"url": url, "pid": os.getpid()}
    if replicas is not None:
        said["replicas"] = replicas
    tmp.write_text(json.dumps(said))
    tmp.replace(path)


def forget(url: str) -> None:
    """Remove the record if it is still this server's (another `up` may have followed)."""
    path = context_file()
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("url") == url:
            path.unlink()


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def _recorded() -> dict[str, object] | None:
    """The record of a running ``actorbus up`` on this machine, if there is one."""
    try:
        data = json.loads(context_file().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    url = data.get("url")
    if isinstance(url, str) and url and _alive(data.get("pid")):
        return data
    return None


def recorded_url() -> str | None:
    """The URL of a running ``actorbus up`` on this machine, if there is one."""
    data = _recorded()
    return None if data is None else str(data["url"])


def recorded_replicas(url: str) -> int | None:
    """The replicas ``actorbus up --cluster`` recorded for ``url``, if that is the
    server it runs (a command on its cluster then makes its streams with them)."""
    data = _recorded()
    if data is None or data["url"] != url:
        return None
    replicas = data.get("replicas")
    return replicas if isinstance(replicas, int) and replicas > 0 else None


DEFAULT_URL = "nats://127.0.0.1:4222"


def default_url() -> str:
    """``$ACTORBUS_URL``, ``$NATS_URL``, the running ``actorbus up``'s URL, else
    NATS's own default (``nats://127.0.0.1:4222``)."""
    return env_url() or recorded_url() or DEFAULT_URL
