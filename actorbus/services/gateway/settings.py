"""How a gateway runs (:class:`GatewaySettings`)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from actorbus import environment as env
from actorbus.services.face import FaceSettings


def default_db_path(namespace: str) -> Path:
    """``$ACTORBUS_STATE_DIR`` (else the temp dir) ``/actorbus-gateway-{ns}.sqlite3``."""
    base = env.ACTORBUS_STATE_DIR.get() or tempfile.gettempdir()
    return Path(base) / f"actorbus-gateway-{namespace}.sqlite3"


@dataclass(frozen=True)
class GatewaySettings(FaceSettings):
    """How a gateway runs. ``auth`` says who may ask the agents
    (``services/gateway/auth.py``): "required" (a bearer token or a DIDWba
    identity), "open" (anyone), "auto" (required when the bus is secured);
    ``open_agents`` are asked without either ("*": all)."""

    http_host: str = "127.0.0.1"
    http_port: int = 8480  # 0: any free port
    db_path: str | Path | None = None  # None: default_db_path(namespace)
    edges: tuple[str, ...] = ("a2a", "acp", "anp", "agora", "mcp")  # see edges.EDGES
    public_url: str | None = None  # base URL put in agent cards; None: from the request
    ask_timeout: float = 60.0  # seconds an ask run waits for the actor's reply
    stream_item_timeout: float = 300.0  # seconds a stream run waits for each item
    a2a_message_replies: bool = False  # SendMessage answers a Message, not a Task
    # The agent whose card the site root serves (/.well-known/agent-card.json, where
    # A2A clients given only the gateway's URL look); None: the gateway's own card,
    # listing its agents as skills.
    default_agent: str | None = None
    max_body: int = 2 * 1024 * 1024  # bytes of a request body
    # Slow clients are cut off: a connection without a whole request (silent,
    # sending its headers a byte at a time, or idle between requests) is closed
    # after idle_timeout seconds, and a body that takes longer than body_timeout
    # is answered 408 and its connection closed.
    idle_timeout: float = 15.0
    body_timeout: float = 30.0
    stop_timeout: float = 2.0  # seconds runs and connections get on stop
    open_agents: tuple[str, ...] = ()
    # The agents (actor types) served at all; the others are not listed, and are
    # answered as unknown. None: every registered type on an open bus, and only
    # open_agents on a secured one (name the rest here; "*": all).
    expose: tuple[str, ...] | None = None
    token_secrets: Mapping[str, str] = field(default_factory=dict)  # token endpoint clients
    # With no token_secrets: the clients of the namespace's token-clients.json in
    # ACTORBUS_HOME, made with a client "dev" on a development home (clients.py).
    # What `actorbus gateway` does when given no --token-clients.
    development_clients: bool = False
    # The OAuth scopes each client may have ("agent:<name>", "agent:*",
    # "gateway:status"); a client not named here may have any.
    token_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A token-bearing request must carry an id a replay can be told by: its
    # protocol's (A2A messageId, MCP session and request id, ACP created_at) or an
    # Idempotency-Key header. "optional" lets requests without one through.
    request_ids: Literal["required", "optional"] = "required"
    # A2ACP's rate limits, messages a minute: per caller, per caller and agent, in all
    rate_limits: tuple[int, int, int] = (1000, 100, 10_000)
    # A2A push notifications (services/gateway/push.py): delivered from a durable
    # queue, retried after each delay of push_backoff, then dead-lettered. Webhook
    # URLs must be https on public addresses unless push_urls="any" (logged).
    js_replicas: int = 1  # replicas of the durable streams it creates (3 on a cluster)
    push_notifications: bool = True
    push_urls: Literal["public", "any"] = "public"
    push_backoff: tuple[float, ...] = (1.0, 5.0, 30.0, 120.0, 600.0)
    push_timeout: float = 10.0  # seconds a webhook gets to answer one POST


@dataclass(frozen=True)
class CoreSettings:
    """The task core's share of the settings (:class:`~.core.GatewayCore`)."""

    ask_timeout: float = 60.0  # seconds an ask run waits for the actor's reply
    stream_item_timeout: float = 300.0  # seconds a stream run waits for each item
    stop_timeout: float = 2.0  # seconds runs get to wind down on stop
    chunk_save_interval: float = 0.2  # seconds between saves of a stream's artifact chunks
