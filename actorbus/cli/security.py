"""``actorbus security``: an offline authority and the credentials it issues.

    actorbus security authority --dir DIR --namespace NS
    actorbus security issue --authority DIR --namespace NS --out HOME [--type T ...]

The authority's directory never has to leave the machine it was made on; what
``issue`` writes (a deployment's home: see ``actorbus.security.issued``) goes to
the machines of one deployment, where ``SecuritySettings(home=HOME)`` (or
``ACTORBUS_HOME``) uses it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from actorbus.cli.common import EXIT_OK, EXIT_USAGE, CliError, stdout
from actorbus.codecs.errors import DecodeError

if TYPE_CHECKING:
    from actorbus.security.credentials import Authority

# What these commands make (broker accounts, JWTs, certificates) is imported when
# one runs: those libraries were a fifth of every other command's start, `run`'s
# included (docs/hosting.md, "Why fork").

AUTHORITY_KEY = "authority.key"
TYPE_KEYS = "types"  # the actor types' identities, beside the authority's


def _authority(directory: Path, namespace: str, *, create: bool) -> Authority:
    from actorbus.security.credentials import Authority
    from actorbus.security.identity import Identity

    path = directory / AUTHORITY_KEY
    if not create and not path.exists():
        raise CliError(f"no authority in {directory} (make one: actorbus security authority)")
    try:
        return Authority(Identity.load(path, create=create), namespace)
    except DecodeError as exc:
        raise CliError(str(exc)) from None


def cmd_authority(args: argparse.Namespace) -> int:
    from actorbus.security.issued import write_trusted

    directory = Path(args.dir)
    authority = _authority(directory, args.namespace, create=True)
    public = write_trusted(authority.public, directory)
    out = stdout()
    out.print(f"authority  {authority.identity.did}")
    out.print(f"key        {escape(str(directory / AUTHORITY_KEY))} (keep it here, offline)")
    out.print(f"public     {escape(str(public))} (what every deployment trusts)")
    return EXIT_OK


def cmd_issue(args: argparse.Namespace) -> int:
    from actorbus.security.broker import BrokerAuth
    from actorbus.security.issued import issue
    from actorbus.security.secure_broker import issue_broker_user

    authority = _authority(Path(args.authority), args.namespace, create=False)
    out_dir = Path(args.out)
    type_keys = Path(args.authority) / TYPE_KEYS
    written = issue(
        authority, out_dir, args.type or [], type_keys=type_keys, ttl=args.ttl_days * 86400.0
    )
    if args.broker:
        broker_home = Path(args.broker)
        written += issue_broker_user(
            BrokerAuth(broker_home),
            broker_home / "tls" / "ca.pem",
            args.namespace,
            out_dir,
            args.type or [],
        )
    out = stdout()
    for path in written:
        out.print(f"wrote {escape(str(path))}")
    out.print(
        f"[dim]use it with SecuritySettings(home={escape(repr(args.out))}) "
        "or ACTORBUS_HOME (the namespace's directory)"
    )
    return EXIT_OK


def cmd_deploy(args: argparse.Namespace) -> int:
    from actorbus.security import deployment

    out_dir = Path(args.out)
    out = stdout()
    if args.if_missing and deployment.ready(out_dir):
        out.print(f"deployment in {escape(str(out_dir))} exists: kept")
        return EXIT_OK
    try:
        members = [deployment.Member.parse(spec) for spec in args.member or []]
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    written = deployment.deploy(
        out_dir,
        args.namespace,
        members,
        nats_hosts=args.nats_host or [],
        mounted_at=Path(args.mounted_at) if args.mounted_at else None,
        token_clients=args.token_client or [],
        ttl=args.ttl_days * 86400.0,
    )
    out.print(f"wrote {len(written)} files into {escape(str(out_dir))}")
    for member in members:
        home = out_dir / "homes" / member.name
        out.print(f"  {member.name:<10} ACTORBUS_HOME={escape(str(home))}")
    return EXIT_OK


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    sec = sub.add_parser(
        "security",
        parents=[common],
        help="an offline authority and the credentials it issues",
        description="Make an authority, and issue credentials to deployments from it.",
    )
    actions = sec.add_subparsers(dest="action", required=True)
    auth = actions.add_parser("authority", help="make (or show) an authority")
    auth.add_argument("--dir", required=True, help="the authority's directory")
    auth.add_argument("--namespace", default="ab", help="the namespace it vouches for (ab)")
    auth.set_defaults(func=cmd_authority)
    iss = actions.add_parser("issue", help="credentials for one deployment")
    iss.add_argument("--authority", required=True, help="the authority's directory")
    iss.add_argument("--namespace", default="ab", help="the namespace (ab)")
    iss.add_argument("--out", required=True, help="the deployment's home to write")
    iss.add_argument("--type", action="append", help="an actor type it hosts (repeatable)")
    iss.add_argument("--ttl-days", type=float, default=30.0, help="validity in days (30)")
    iss.add_argument(
        "--broker",
        metavar="HOME",
        help="the broker's ACTORBUS_HOME: also write a NATS user limited to these types",
    )
    iss.set_defaults(func=cmd_issue)
    dep = actions.add_parser(
        "deploy",
        help="everything a deployment needs on the secured broker, at once",
        description="An authority, the broker's operator, accounts and TLS "
        "(nats.conf to include), and one ACTORBUS_HOME per member: for a compose "
        "file's init service, or an operator shipping the files to machines.",
    )
    dep.add_argument("--out", required=True, help="the directory to write")
    dep.add_argument("--namespace", default="ab", help="the namespace (ab)")
    dep.add_argument(
        "--member",
        action="append",
        metavar="NAME[=TYPE,...][+issuer][@HOST,...]",
        help="a process role: the actor types it hosts, +issuer for the token issuer's "
        "key (gateway, registry), @hosts for an HTTPS certificate (repeatable)",
    )
    dep.add_argument(
        "--nats-host", action="append", help="a NATS node's host name for its certificate"
    )
    dep.add_argument("--mounted-at", help="where --out is mounted in the nodes (nats.conf paths)")
    dep.add_argument(
        "--token-client", action="append", help="a POST /auth/token client to make a secret for"
    )
    dep.add_argument("--ttl-days", type=float, default=30.0, help="validity in days (30)")
    dep.add_argument(
        "--if-missing", action="store_true", help="keep a complete deployment already there"
    )
    dep.set_defaults(func=cmd_deploy)
