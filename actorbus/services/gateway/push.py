"""Push notifications: a task's changes POSTed to the URLs its client registered,
delivered from a durable queue.

A client registers a config (URL, token or ``Authorization`` credentials) for a
task; the configs live in the gateway's SQLite file beside the task. Every change
of a task that has configs (its status, each artifact chunk) becomes one
:class:`Notice` per config, sent durably (JetStream) to the ``gateway-push``
actor type, keyed by task, before subscribers hear of the change. That actor,
hosted lazily by every gateway of the namespace (one reads at a time), POSTs
each notice in order per task; a failure (no answer, a 5xx, 408, 429) is retried
on ``GatewaySettings.push_backoff``, then dead-lettered (``actorbus dlq ls``);
an answer that says the URL will never take it (another 4xx, or a URL that now
resolves to a private address) is dead-lettered at once. A gateway that dies
leaves its notices in the queue for the next one.

A notification is what A2A's SDKs send: for a config made in A2A 1.0, the
event as a ``StreamResponse`` (``application/a2a+json``); for 0.3, the whole
task. ``Authorization: <scheme> <credentials>`` when the config has them, else
``X-A2A-Notification-Token`` with its token.

Webhook URLs come from clients, so the gateway would POST wherever it is told:
by default (``push_urls="public"``) a URL must be https and its host must
resolve to public addresses only, checked when the config is made and again at
each delivery; ``push_urls="any"`` (tests, a trusted network) lifts that and is
logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal
from urllib.parse import urlsplit

import aiohttp
import aiosqlite
import msgspec
from pydantic import BaseModel

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.actors.system import ActorSystem
from actorbus.codecs.a2a import V03, V10, stream_event
from actorbus.codecs.a2a.wire import task_to_wire
from actorbus.codecs.errors import ActorBusError, ValidationFailedError
from actorbus.codecs.tasks import Task
from actorbus.services.gateway.agents import Event

log = logging.getLogger("actorbus.gateway.push")

PUSH_TYPE: Final = "gateway-push"
TOKEN_HEADER: Final = "X-A2A-Notification-Token"
A2A_MEDIA_TYPE: Final = "application/a2a+json"
MAX_CONFIGS: Final = 20  # per task: a client cannot make one change fan out without end

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS push_configs (
    task_id TEXT NOT NULL,
    id TEXT NOT NULL,
    url TEXT NOT NULL,
    token TEXT,
    auth_scheme TEXT,
    auth_credentials TEXT,
    version TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (task_id, id)
);
"""


class PushUrlError(ValidationFailedError):
    """A webhook URL the gateway will not POST to."""


@dataclass(frozen=True)
class PushConfig:
    """Where and how one client wants a task's changes."""

    task_id: str
    id: str
    url: str
    token: str | None = None
    auth_scheme: str | None = None
    auth_credentials: str | None = None
    version: str = "1.0"  # the A2A version of the notifications' shape

    def headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type}
        if self.auth_scheme and self.auth_credentials:
            headers["Authorization"] = f"{self.auth_scheme} {self.auth_credentials}"
        elif self.token:
            headers[TOKEN_HEADER] = self.token
        return headers


async def check_push_url(url: str, mode: Literal["public", "any"]) -> None:
    """Raise :class:`PushUrlError` unless the gateway may POST to ``url``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PushUrlError(f"a push notification URL must be an http(s) URL: {url!r}")
    if mode == "any":
        return
    if parts.scheme != "https":
        raise PushUrlError(
            f"push notification URLs must be https: {url!r} (the gateway's push_urls='any' "
            "allows http and private hosts)"
        )
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, parts.port or 443)
    except OSError as e:
        raise PushUrlError(
            f"cannot resolve the push notification host {parts.hostname!r}: {e}"
        ) from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise PushUrlError(
                f"{parts.hostname!r} resolves to {address}, not a public address: the gateway "
                "does not POST to its own network (push_urls='any' allows it)"
            )


class PushConfigs:
    """The ``push_configs`` table of the gateway's database, and which tasks have
    configs (kept in memory, so a change of a task without any costs nothing)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db
        self.tasks: set[str] = set()

    @classmethod
    async def open(cls, db: aiosqlite.Connection) -> PushConfigs:
        await db.executescript(_SCHEMA)
        await db.commit()
        configs = cls(db)
        async with db.execute("SELECT DISTINCT task_id FROM push_configs") as cur:
            configs.tasks = {row[0] async for row in cur}
        return configs

    async def put(self, config: PushConfig) -> PushConfig:
        """Store ``config`` (an id is made when it has none; the same id replaces)."""
        if not config.id:
            config = dataclasses.replace(config, id=uuid.uuid4().hex)
        existing = await self.list(config.task_id)
        if len(existing) >= MAX_CONFIGS and all(c.id != config.id for c in existing):
            raise ValidationFailedError(
                f"task {config.task_id} has {MAX_CONFIGS} push notification configs already"
            )
        await self.db.execute(
            "INSERT OR REPLACE INTO push_configs VALUES (?, ?, ?, ?, ?, ?, ?, "
            "CAST(strftime('%s', 'now') AS INTEGER) * 1000)",
            (
                config.task_id,
                config.id,
                config.url,
                config.token,
                config.auth_scheme,
                config.auth_credentials,
                config.version,
            ),
        )
        await self.db.commit()
        self.tasks.add(config.task_id)
        return config

    async def list(self, task_id: str) -> list[PushConfig]:
        if task_id not in self.tasks:
            return []
        async with self.db.execute(
            "SELECT task_id, id, url, token, auth_scheme, auth_credentials, version "
            "FROM push_configs WHERE task_id = ? ORDER BY created_ms, id",
            (task_id,),
        ) as cur:
            return [PushConfig(*row) async for row in cur]

    async def get(self, task_id: str, config_id: str) -> PushConfig | None:
        return next((c for c in await self.list(task_id) if c.id == config_id), None)

    async def delete(self, task_id: str, config_id: str) -> bool:
        cur = await self.db.execute(
            "DELETE FROM push_configs WHERE task_id = ? AND id = ?", (task_id, config_id)
        )
        await self.db.commit()
        if not await self.list(task_id):
            self.tasks.discard(task_id)
        return (cur.rowcount or 0) > 0


class Notice(BaseModel):
    """One notification waiting in the durable queue."""

    task_id: str
    config_id: str
    url: str
    headers: dict[str, str]
    body: bytes


class PushRefusedError(ValidationFailedError):
    """The webhook said it will never take this notification: dead-lettered at
    once, not retried (the durable reader gives up on validation errors)."""


_RETRIED: Final = frozenset({408, 425, 429})


class PushDelivery(Actor):
    """POSTs the notices of one task, in order; a failure raises, so the durable
    queue retries it on ``retry_backoff`` (set from the gateway's settings)."""

    type_name: ClassVar[str] = PUSH_TYPE
    durable = True
    keyed = True
    advertise = False  # a gateway's own worker, not an agent
    idle_timeout = 60.0
    retry_backoff: ClassVar[tuple[float, ...] | None] = (1.0, 5.0, 30.0, 120.0, 600.0)

    def __init__(
        self, session: aiohttp.ClientSession, urls: Literal["public", "any"], timeout: float
    ) -> None:
        self.session = session
        self.urls = urls
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    @handler
    async def deliver(self, notice: Notice) -> None:
        try:
            await check_push_url(notice.url, self.urls)  # a host may resolve elsewhere now
        except PushUrlError as e:
            raise PushRefusedError(str(e)) from None
        async with self.session.post(
            notice.url, data=notice.body, headers=notice.headers, timeout=self.timeout
        ) as resp:
            if resp.status < 300:
                return
            why = f"{notice.url} answered {resp.status} for task {notice.task_id}"
            if 400 <= resp.status < 500 and resp.status not in _RETRIED:
                raise PushRefusedError(why)
            raise ConnectionError(why)


def delivery_class(backoff: tuple[float, ...]) -> type[PushDelivery]:
    """The delivery actor with the gateway's retry schedule."""
    return type("PushDelivery", (PushDelivery,), {"type_name": PUSH_TYPE, "retry_backoff": backoff})


def notice_for(config: PushConfig, body: bytes, content_type: str) -> Notice:
    return Notice(
        task_id=config.task_id,
        config_id=config.id,
        url=config.url,
        headers=config.headers(content_type),
        body=body,
    )


class Pusher:
    """The gateway's side: the configs, and one durable notice per config for each
    change of a task (``GatewayCore.on_change``)."""

    def __init__(
        self, system: ActorSystem, configs: PushConfigs, urls: Literal["public", "any"]
    ) -> None:
        self.system = system
        self.configs = configs
        self.urls = urls
        self.store_timeout = 5.0  # a change waits at most this long for the queue

    async def add(self, config: PushConfig) -> PushConfig:
        await check_push_url(config.url, self.urls)
        return await self.configs.put(config)

    async def on_change(self, task: Task, event: Event) -> None:
        """Queue the change for every config of its task (nothing when it has none)."""
        if task.id not in self.configs.tasks:
            return
        for config in await self.configs.list(task.id):
            if config.version == V10:
                body = msgspec.json.encode(stream_event(None, event, V10)["result"])
                notice = notice_for(config, body, A2A_MEDIA_TYPE)
            else:  # 0.3: the whole task, as its SDK's sender does
                body = msgspec.json.encode(task_to_wire(task, V03))
                notice = notice_for(config, body, "application/json")
            try:
                await self.system.tell(
                    f"{PUSH_TYPE}/{task.id}", notice, durable=True, timeout=self.store_timeout
                )
            except ActorBusError as e:  # the task goes on; the client can still poll it
                log.error("push notification for task %s to %s lost: %s", task.id, config.url, e)


def config_fields(raw: Any) -> dict[str, Any]:
    """The plain fields of a 1.0 (flat) or 0.3 (nested ``pushNotificationConfig``)
    config as sent: id, url, token, and authentication's scheme and credentials."""
    if not isinstance(raw, dict):
        raise ValidationFailedError("a push notification config must be an object")
    inner = raw.get("pushNotificationConfig")
    source = inner if isinstance(inner, dict) else raw
    auth = source.get("authentication")
    scheme = credentials = None
    if isinstance(auth, dict):
        schemes = auth.get("schemes")
        first = schemes[0] if isinstance(schemes, list) and schemes else None
        scheme = auth.get("scheme") or first  # 1.0 names one scheme, 0.3 a list
        credentials = auth.get("credentials")
    fields = {
        "id": source.get("id") or "",
        "url": source.get("url"),
        "token": source.get("token") or None,
        "auth_scheme": scheme or None,
        "auth_credentials": credentials or None,
    }
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise ValidationFailedError(f"push notification config `{name}` must be a string")
    if not fields["url"]:
        raise ValidationFailedError("a push notification config needs a `url`")
    return fields


__all__ = [
    "PUSH_TYPE",
    "Notice",
    "PushConfig",
    "PushConfigs",
    "PushDelivery",
    "PushRefusedError",
    "PushUrlError",
    "Pusher",
    "check_push_url",
    "config_fields",
    "delivery_class",
    "notice_for",
]
