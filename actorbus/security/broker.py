"""The broker's own security: NATS decentralized JWT authentication (nkeys) and TLS.

NATS's model, not a home-made one. An operator signs one account per namespace
(JetStream enabled) and a system account for the server's own use; the
namespace's account signs one user per ActorSystem (``nats-jwt`` builds and
signs the JWTs, ``nkeys`` holds the keys). The server trusts the operator and
has the accounts preloaded (``resolver: MEMORY``), so it needs no account server.

What a system's user may do (:func:`member_permissions`):

- publish in its namespace (``{ns}.>``), to the JetStream API, key-value and ack
  subjects, and to reply inboxes (answers and stream credit travel there; the
  end-to-end layer drops any answer that is not genuine);
- subscribe in its namespace except the durable subjects (``{ns}.d.>``: only
  JetStream reads those, so nobody can answer a durable store with a fake
  publish-ack), and to its own inbox prefix only, so no one reads another
  system's replies;
- never delete, purge or reconfigure a stream (the durable queues, dead letters,
  buckets): that takes the admin user (:meth:`BrokerAuth.admin`), which the
  command line's maintenance commands use;
- a member limited to some actor types (``types``) uses JetStream through an
  allow-list (:func:`_limited_jetstream`): the consumers and acks of its own
  types' durable streams only, so it can neither delete another type's
  consumer nor fetch and ack its messages; it writes the namespace's shared
  buckets by name, and in the handled-keys and attempts buckets only its own
  types' entries (``<type>.…``): another type's handled key, written ahead of its
  message, would have it skipped unhandled; its attempts, dead-lettered.

Anyone without credentials cannot connect at all. TLS (:class:`DevCertificates`):
in development a CA and a server certificate for the loopback names, generated
with ``cryptography``; in production, real certificates.

Seeds and keys are files, 0600, in the home directory (``broker/``); nothing
here logs a seed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import nkeys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from nats_jwt.nkeys_ext import create_account_pair, create_operator_pair, create_user_pair
from nats_jwt.v2.account_claims import AccountClaims
from nats_jwt.v2.operator_claims import OperatorClaims
from nats_jwt.v2.user_claims import UserClaims

from actorbus.security.keys import write_private

SYSTEM_ACCOUNT: Final = "SYS"
INBOX_ROOT: Final = "_INBOX"
MAX_CONTROL_LINE: Final = 65536


def _key_pair(path: Path, *, kind: str) -> nkeys.KeyPair:
    """The nkey in ``path``, created there first if missing."""
    if path.exists():
        return nkeys.from_seed(path.read_bytes().strip())
    pair = {"operator": create_operator_pair, "account": create_account_pair}[kind]()
    write_private(path, pair.seed)
    return pair


@dataclass(frozen=True)
class Grant:
    """Subjects a user may publish and subscribe to (allow and deny lists)."""

    pub_allow: tuple[str, ...]
    pub_deny: tuple[str, ...]
    sub_allow: tuple[str, ...]
    sub_deny: tuple[str, ...]


# The namespace's buckets (``actorbus-{ns}-<name>``) every member writes: the
# credentials, the registry and its renewals and leader, topic keys, keyed
# actors' placement and their hosts' liveness, reader leases, counters. And
# those whose entries are ``<type>.…``, which only the type's hosts write:
# handled idempotency keys, attempts, actor state (sealed to the type's key too). (Each name is
# defined beside its bucket; tests/security/test_broker.py checks the lists.)
SHARED_BUCKETS: Final = (
    "identities",
    "registry",
    "registry-renewals",
    "registry-leader",
    "topic-keys",
    "placement",
    "hosts",
    "readers",
    "stats",
)
PER_TYPE_BUCKETS: Final = ("handled", "attempts", "state")


def member_permissions(
    namespace: str, inbox_prefix: str, types: Sequence[str] | None = None
) -> Grant:
    """What an ordinary member system of ``namespace`` may do (module docstring).
    With ``types``, it may subscribe to those actor types' subjects only (not to
    another type's, so it cannot take a share of that type's messages): topics,
    events, control and host forwarding stay open to it."""
    ns = namespace
    # The Synadia Agent Protocol's subjects (services.synadia): each namespace
    # is an account of its own, so they are the namespace's too. Any member may
    # call its agents; serving them is for members not limited to some types.
    synadia = ("$SRV.>", "agents.>")
    subs: tuple[str, ...] = (f"{ns}.>", *synadia)
    pubs: tuple[str, ...] = (f"{ns}.>",)
    jetstream: tuple[str, ...] = ("$JS.API.>", "$KV.>", "$JS.ACK.>")
    if types is not None:
        per_type = [s for t in types for s in (f"{ns}.a.{t}.>", f"{ns}.any.{t}")]
        subs = (*per_type, f"{ns}.t.>", f"{ns}.sys.>", f"{ns}.ctl.>", f"{ns}.h.>")
        # Everything in the namespace but another type's reminders (setting,
        # replacing or cancelling them is for that type's hosts).
        pubs = (*(f"{ns}.{p}.>" for p in _OPEN_PREFIXES), *(f"{ns}.rem.{t}.>" for t in types))
        jetstream = _limited_jetstream(ns, types)
    return Grant(
        pub_allow=(
            *pubs,
            *jetstream,
            f"{INBOX_ROOT}.>",
            *synadia,
        ),
        pub_deny=(
            "$JS.API.STREAM.DELETE.>",
            "$JS.API.STREAM.PURGE.>",
            "$JS.API.STREAM.MSG.DELETE.>",
            # A new config (max_msgs 1, a short max_age) destroys as surely as a
            # delete; the operator (admin) changes stream settings.
            "$JS.API.STREAM.UPDATE.>",
        ),
        sub_allow=(*subs, f"{inbox_prefix}.>"),
        sub_deny=(f"{namespace}.d.>",),
    )


# The namespace's subject families (``bus/subjects.py``) open to every member's
# publishes: all but ``rem`` (reminders, per type).
_OPEN_PREFIXES: Final = ("a", "any", "d", "dlq", "q", "lazy", "t", "sys", "ctl", "h")


def _limited_jetstream(ns: str, types: Sequence[str]) -> tuple[str, ...]:
    """The JetStream a member limited to ``types`` may use: read-only calls
    anywhere; making a stream (its settings are checked by those who use it);
    consumers and acks of its own types' durable streams and of the namespace's
    shared ones (buckets, dead letters, kept topics); key-value writes in the
    shared buckets and its own types' entries. JetStream's API names
    the stream in every consumer call (``$JS.API.CONSUMER.<op>.<stream>...``, the
    stream one token later for ``MSG.NEXT`` and ``DURABLE.CREATE``) and in every
    ack (``$JS.ACK.<stream>.>``), so another type's consumers and messages are out
    of reach whatever their consumer names."""
    own = [f"actorbus-{ns}-{kind}-{t}" for t in types for kind in ("d", "r")]
    read = [*own, f"actorbus-{ns}-topics"]  # pull consumers, acks: durable readers, history
    watched = [  # ephemeral consumers (key-value watches), no acks
        f"actorbus-{ns}-dlq",
        *(f"KV_actorbus-{ns}-{b}" for b in (*SHARED_BUCKETS, *PER_TYPE_BUCKETS)),
    ]
    return (
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.*",
        "$JS.API.STREAM.NAMES",
        "$JS.API.STREAM.LIST",
        "$JS.API.STREAM.MSG.GET.*",  # history and dead letters: sealed where it matters
        "$JS.API.DIRECT.GET.>",  # key-value reads
        # Any stream: a durable send makes the queue of a type no host started yet.
        # What a stream is made with is checked by its senders and hosts (and
        # only the admin may change or delete one).
        "$JS.API.STREAM.CREATE.*",
        *(f"$JS.API.CONSUMER.*.{s}" for s in (*read, *watched)),
        *(f"$JS.API.CONSUMER.*.{s}.>" for s in (*read, *watched)),
        *(f"$JS.API.CONSUMER.MSG.NEXT.{s}.*" for s in read),
        *(f"$JS.API.CONSUMER.DURABLE.CREATE.{s}.*" for s in read),
        *(f"$JS.ACK.{s}.>" for s in read),
        *(f"$KV.actorbus-{ns}-{bucket}.>" for bucket in SHARED_BUCKETS),
        *(f"$KV.actorbus-{ns}-{bucket}.{t}.>" for bucket in PER_TYPE_BUCKETS for t in types),
    )


def admin_permissions(namespace: str, inbox_prefix: str) -> Grant:
    member = member_permissions(namespace, inbox_prefix)
    return Grant(member.pub_allow, (), member.sub_allow, ())


class BrokerAuth:
    """An operator, its system account, and one account per namespace; issues users."""

    def __init__(self, home: Path) -> None:
        self.dir = home / "broker"
        self.operator = _key_pair(self.dir / "operator.nk", kind="operator")
        self.system = _key_pair(self.dir / "system-account.nk", kind="account")
        self._accounts: dict[str, nkeys.KeyPair] = {}
        self._operator_jwt: str | None = None

    def account(self, namespace: str) -> nkeys.KeyPair:
        pair = self._accounts.get(namespace)
        if pair is None:
            pair = _key_pair(self.dir / f"account-{namespace}.nk", kind="account")
            self._accounts[namespace] = pair
        return pair

    def _account_jwt(self, namespace: str) -> str:
        claims = AccountClaims(self.account(namespace).public_key.decode(), namespace)
        limits = claims.nats.limits
        limits.memory_storage = -1  # JetStream on, no limits of its own
        limits.disk_storage = -1
        limits.streams = -1
        limits.consumer = -1
        return str(claims.encode(self.operator))

    def server_config(self, namespaces: list[str]) -> str:
        """What ``nats-server`` needs to trust this operator and know these
        namespaces' accounts (config text). The same operator's JWT every time:
        a server reloading its config refuses a changed one (adding a namespace
        to a running server is a reload)."""
        if self._operator_jwt is None:
            operator = OperatorClaims(self.operator.public_key.decode(), "actorbus")
            operator.nats.system_account = self.system.public_key.decode()
            self._operator_jwt = str(operator.encode(self.operator))
        system = AccountClaims(self.system.public_key.decode(), SYSTEM_ACCOUNT)
        preload = {self.system.public_key.decode(): system.encode(self.operator)}
        for ns in namespaces:
            preload[self.account(ns).public_key.decode()] = self._account_jwt(ns)
        entries = "\n".join(f"  {k}: {v}" for k, v in preload.items())
        return (
            f"operator: {self._operator_jwt}\n"
            f"system_account: {self.system.public_key.decode()}\n"
            "resolver: MEMORY\n"
            # A member limited to some types carries an allow-list in its JWT, which
            # it presents in its CONNECT line (nats-server's default limit is 4 KB).
            f"max_control_line: {MAX_CONTROL_LINE}\n"
            f"resolver_preload: {{\n{entries}\n}}\n"
        )

    def user(
        self,
        namespace: str,
        name: str,
        *,
        admin: bool = False,
        types: Sequence[str] | None = None,
    ) -> tuple[str, str]:
        """Credentials for one system: (the creds file text, the inbox prefix the
        system must use: the only one it may subscribe to). ``types`` limits what
        it may subscribe to (``member_permissions``)."""
        pair = create_user_pair()
        public = pair.public_key.decode()
        prefix = f"{INBOX_ROOT}.{public[-12:].lower()}"
        if admin:
            grant = admin_permissions(namespace, prefix)
        else:
            grant = member_permissions(namespace, prefix, types)
        claims = UserClaims(public, name)
        perms = claims.nats
        perms.pub.allow.extend(grant.pub_allow)
        perms.pub.deny.extend(grant.pub_deny)
        perms.sub.allow.extend(grant.sub_allow)
        perms.sub.deny.extend(grant.sub_deny)
        perms.resp.max_msgs = -1  # answer any request received, stream frames included
        token = claims.encode(self.account(namespace))
        creds = (
            "-----BEGIN NATS USER JWT-----\n"
            f"{token}\n"
            "------END NATS USER JWT------\n\n"
            "-----BEGIN USER NKEY SEED-----\n"
            f"{pair.seed.decode()}\n"
            "------END USER NKEY SEED------\n"
        )
        return creds, prefix

    def write_user(
        self,
        namespace: str,
        name: str,
        *,
        admin: bool = False,
        types: Sequence[str] | None = None,
    ) -> tuple[Path, str]:
        """``user()`` written to ``broker/<namespace>/<name>.creds`` (0600), for a
        tool that reads a creds file (the ``nats`` CLI, say)."""
        creds, prefix = self.user(namespace, name, admin=admin, types=types)
        path = self.dir / namespace / f"{name}.creds"
        write_private(path, creds.encode())
        return path, prefix


class DevCertificates:
    """A development CA and a server certificate for 127.0.0.1, ::1, localhost
    and ``hosts`` (a compose file's node names), in ``<home>/tls`` (made on
    first use, reused after)."""

    def __init__(self, home: Path, hosts: Sequence[str] = ()) -> None:
        self.hosts = tuple(hosts)
        self.dir = home / "tls"
        self.ca_file = self.dir / "ca.pem"
        self.cert_file = self.dir / "server.pem"
        self.key_file = self.dir / "server-key.pem"
        self.ca_key_file = self.dir / "ca-key.pem"
        files = (self.ca_file, self.ca_key_file, self.cert_file, self.key_file)
        if not all(f.exists() for f in files):
            self._make()

    def _make(self) -> None:
        now = dt.datetime.now(dt.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "actorbus development CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=825))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ca_file.write_bytes(ca.public_bytes(pem))
        write_private(  # to sign more certificates for this machine (compose, tests)
            self.ca_key_file,
            ca_key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        self.server_certificate(self.hosts, self.cert_file, self.key_file)

    def server_certificate(self, hosts: Sequence[str], cert_file: Path, key_file: Path) -> None:
        """A server certificate from this CA for localhost, 127.0.0.1, ::1 and
        ``hosts`` (another service's, the gateway's HTTPS, say)."""
        pem = serialization.Encoding.PEM
        ca = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        ca_key = serialization.load_pem_private_key(self.ca_key_file.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
            *(x509.DNSName(h) for h in hosts),
        ]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=397))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        cert_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        cert_file.write_bytes(cert.public_bytes(pem))
        write_private(
            key_file,
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        )

    def server_config(self) -> str:
        return (
            "tls {\n"
            f'  cert_file: "{self.cert_file}"\n'
            f'  key_file: "{self.key_file}"\n'
            "  timeout: 2\n"
            "}\n"
        )

    def client_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts only this CA, TLS 1.2 at least."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx
