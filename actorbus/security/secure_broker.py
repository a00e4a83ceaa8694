"""The embedded broker, secured: NATS JWT auth, TLS, and each system's way in.

``ActorSystem.start()`` uses this by default: the server trusts the operator in
``$ACTORBUS_HOME/broker`` (made on first use), presents the development
certificate in ``$ACTORBUS_HOME/tls``, and every system connects with a user of
its own (permissions in :mod:`actorbus.security.broker`) over TLS, limited to
the subjects of the actor types it hosts when it says which
(``SecuritySettings(hosts=...)``; ``actorbus run`` says so for the types it is
given). Another process on the machine joins with
:meth:`SecureBroker.connect_options`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import ssl
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from actorbus.bus.connection import ConnectOptions
from actorbus.bus.probe import server_info, wants_security
from actorbus.codecs.errors import ConnectionLostError
from actorbus.security.keys import write_private
from actorbus.security.settings import SecuritySettings, actorbus_home, default_home

if TYPE_CHECKING:
    from actorbus.security.broker import BrokerAuth, DevCertificates

# A deployment's own NATS user, issued into its home (``actorbus security issue
# --broker``): written by issue_broker_user, read by issued_connect_options.
BROKER_CREDS = "broker.creds"  # its NATS user, limited to its actor types' subjects
BROKER_INFO = "broker.json"  # {"inbox_prefix": ...}: the only inbox it may read
BROKER_CA = "ca.pem"  # whom its TLS trusts

log = logging.getLogger("actorbus.security")


class JoinOptions(TypedDict, total=False):
    connect_options: ConnectOptions
    security: SecuritySettings


class SecureBroker:
    """The operator, accounts and certificates of a machine's brokers."""

    def __init__(self, home: Path | None = None) -> None:
        # Imported here: the JWT and X.509 machinery takes about 0.2 s to import,
        # which a process joining an open bus (a restarted worker) never needs.
        from actorbus.security.broker import BrokerAuth, DevCertificates

        self.home = home or actorbus_home()
        self.auth: BrokerAuth = BrokerAuth(self.home)
        self.tls: DevCertificates = DevCertificates(self.home)

    def server_config(self, namespaces: list[str]) -> str:
        """Config text for nats-server: trust, accounts, TLS."""
        return self.auth.server_config(namespaces) + self.tls.server_config()

    def connect_options(
        self,
        namespace: str,
        name: str,
        base: ConnectOptions | None = None,
        *,
        hosts: Sequence[str] | None = None,
    ) -> ConnectOptions:
        """``base`` (or the defaults) with a new user of ``namespace`` called
        ``name``: its credentials (in memory: every process its own user), the TLS
        context, its inbox prefix. With ``hosts`` (actor types), the user may
        subscribe to those types' subjects and no other type's."""
        creds, prefix = self.auth.user(namespace, name, types=hosts)
        return dataclasses.replace(
            base or ConnectOptions(name=name),
            credentials=creds,
            credentials_file=None,
            tls=self.tls.client_context(),
            inbox_prefix=prefix,
        )


def admin_connect_options(namespace: str, home: Path | None = None) -> ConnectOptions:
    """An admin user of ``namespace`` on this machine's broker (the one whose
    operator keys are in ``home``, by default ``ACTORBUS_HOME``): what maintenance
    that deletes streams needs (``actorbus migrate``). Members may not."""
    broker = SecureBroker(home)
    creds, prefix = broker.auth.user(namespace, "actorbus-admin", admin=True)
    return ConnectOptions(
        name="actorbus-admin",
        credentials=creds,
        tls=broker.tls.client_context(),
        inbox_prefix=prefix,
    )


def issue_broker_user(
    broker: BrokerAuth, ca_file: Path | None, namespace: str, out: Path, types: Iterable[str]
) -> list[Path]:
    """The deployment's NATS user (its subscriptions limited to ``types``), the
    inbox prefix it must use, and the broker's CA."""
    creds, prefix = broker.user(namespace, out.name or "deployment", types=list(types))
    write_private(out / BROKER_CREDS, creds.encode())
    (out / BROKER_INFO).write_text(json.dumps({"inbox_prefix": prefix}) + "\n")
    written = [out / BROKER_CREDS, out / BROKER_INFO]
    if ca_file is not None and ca_file.exists():
        (out / BROKER_CA).write_bytes(ca_file.read_bytes())
        written.append(out / BROKER_CA)
    return written


def issued_connect_options(home: Path, name: str) -> ConnectOptions | None:
    """The way in of a deployment whose home holds a NATS user issued for it
    (``actorbus security issue --broker``), or None."""
    creds = home / BROKER_CREDS
    if not creds.exists():
        return None
    info = json.loads((home / BROKER_INFO).read_text())
    ca = home / BROKER_CA
    tls = ssl.create_default_context(cafile=str(ca)) if ca.exists() else None
    return ConnectOptions(
        name=name,
        credentials_file=str(creds),
        tls=tls,
        inbox_prefix=str(info["inbox_prefix"]),
    )


async def join_options(
    url: str,
    namespace: str,
    name: str,
    timeout: float = 5.0,
    *,
    hosts: Sequence[str] | None = None,
) -> JoinOptions:
    """How a process on this machine joins the server at ``url``: plain connect
    options for an open server; for a secured one (its INFO line says so), a member's
    credentials and TLS from this machine's ``ACTORBUS_HOME``, and end-to-end
    security on. With ``hosts``, the process hosts those actor types and no
    other: its user may subscribe to their subjects only. ConnectionLostError
    when no server answers."""
    if not wants_security(await server_info(url, timeout)):
        # said outright, so ActorSystem.connect() does not ask the server again
        return {"connect_options": ConnectOptions(name=name)}
    security = SecuritySettings(hosts=None if hosts is None else tuple(hosts))
    issued = issued_connect_options(default_home(namespace), name)
    if issued is not None:  # a deployment with its own user, issued offline
        return {"connect_options": issued, "security": security}
    broker = SecureBroker()
    return {
        "connect_options": broker.connect_options(namespace, name, hosts=hosts),
        "security": security,
    }


async def first_join(urls: Sequence[str], namespace: str, name: str) -> JoinOptions:
    """:func:`join_options` for the first of ``urls`` that answers (nothing when
    none does: connecting then says that no server answered)."""
    for url in urls:
        try:
            return await join_options(url, namespace, name)
        except ConnectionLostError:
            continue
    return {}
