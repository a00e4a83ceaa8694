"""Everything a deployment of several processes needs on the secured broker,
made in one step (``actorbus security deploy``: a compose file's init service,
or an operator before shipping the files to machines).

    <out>/nats.conf                the broker's operator, accounts and TLS, for
                                   nats-server's ``include``
    <out>/ca.pem                   whom clients' TLS trusts
    <out>/authority/               the namespace's authority (keep it offline
                                   once the homes are issued)
    <out>/broker/                  the operator's and accounts' keys, the CA's
                                   key and the nodes' certificate
    <out>/homes/<member>/<ns>/     one member's ACTORBUS_HOME: its identities
                                   and credentials, its NATS user (limited to
                                   its actor types) and the CA; the token
                                   issuer's key for the gateway and registry
    <out>/https/<member>.pem, -key.pem
                                   an HTTPS certificate for a member that
                                   serves HTTP (the gateway)
    <out>/token-clients.json       the gateway's POST /auth/token clients and
                                   their secrets (``--token-clients``)

A member's home is what it mounts (read-only) as ``ACTORBUS_HOME``: nothing in
it is written at run time.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from actorbus.security.broker import BrokerAuth, DevCertificates
from actorbus.security.credentials import DEFAULT_TTL, Authority
from actorbus.security.identity import Identity
from actorbus.security.issued import issue, write_trusted
from actorbus.security.keys import write_private
from actorbus.security.secure_broker import issue_broker_user

READY = "nats.conf"  # written last: its presence says the deployment is complete


@dataclass(frozen=True)
class Member:
    """One process role of the deployment: the actor types it hosts, whether it
    holds the namespace's token issuer key (the gateway issues and the registry
    checks capability tokens), and the host names of the HTTPS it serves."""

    name: str
    types: tuple[str, ...] = ()
    token_issuer: bool = False
    https: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Member:
        """``name[=type,type][+issuer][@host,host]``, e.g. ``gateway=gateway-tasks,
        gateway-push+issuer@gateway``."""
        head, _, https = spec.partition("@")
        head, issuer, _ = head.partition("+issuer")
        name, _, types = head.partition("=")
        if not name:
            raise ValueError(f"a member needs a name: {spec!r}")
        return cls(
            name,
            tuple(t for t in types.split(",") if t),
            bool(issuer),
            tuple(h for h in https.split(",") if h),
        )


def deploy(
    out: Path,
    namespace: str,
    members: Sequence[Member],
    *,
    nats_hosts: Sequence[str] = (),
    mounted_at: Path | None = None,
    token_clients: Sequence[str] = (),
    ttl: float = DEFAULT_TTL,
) -> list[Path]:
    """Write the deployment into ``out`` (see the module docstring); paths in
    ``nats.conf`` are where ``out`` is mounted in the nodes (``mounted_at``).
    Returns what was written."""
    mount = mounted_at or out
    authority = Authority(Identity.load(out / "authority" / "authority.key"), namespace)
    written = [write_trusted(authority.public, out / "authority")]
    broker = BrokerAuth(out / "broker")
    tls = DevCertificates(out / "broker", hosts=nats_hosts)
    shutil.copyfile(tls.ca_file, out / "ca.pem")
    written.append(out / "ca.pem")
    issuer_key: Path | None = None
    for member in members:
        home = out / "homes" / member.name / namespace
        type_keys = out / "authority" / "types"  # one key per type, whichever member hosts it
        written += issue(authority, home, member.types, type_keys=type_keys, ttl=ttl)
        written += issue_broker_user(broker, tls.ca_file, namespace, home, member.types)
        if member.token_issuer:
            key = home / "token-issuer.key"
            if issuer_key is None:
                Identity.load(key)  # made once, shared by every member that issues
                issuer_key = key
            else:
                shutil.copyfile(issuer_key, key)
                key.chmod(0o600)
            written.append(key)
        if member.https:
            cert = out / "https" / f"{member.name}.pem"
            tls.server_certificate(member.https, cert, out / "https" / f"{member.name}-key.pem")
            written += [cert, out / "https" / f"{member.name}-key.pem"]
    clients = {name: secrets.token_urlsafe(24) for name in token_clients}
    write_private(out / "token-clients.json", json.dumps(clients, indent=2).encode())
    written.append(out / "token-clients.json")
    server = broker.server_config([namespace])
    server += (
        "tls {\n"
        f'  cert_file: "{mount / "broker" / "tls" / "server.pem"}"\n'
        f'  key_file: "{mount / "broker" / "tls" / "server-key.pem"}"\n'
        "  timeout: 2\n"
        "}\n"
    )
    (out / READY).write_text(server)  # last: a complete deployment
    written.append(out / READY)
    return written


def ready(out: Path) -> bool:
    return (out / READY).exists()
