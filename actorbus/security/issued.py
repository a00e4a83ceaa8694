"""Credentials issued ahead of time by an offline authority: the home of a
deployment that holds no authority key.

    <home>/authority.pub.json     the authority's public identity (trusted)
    <home>/system.key, .jwt       the system's identity and its credential
    <home>/types/<type>.key, .jwt an actor type's identity and its credential

``actorbus security issue`` writes such a home from the authority's; a system
whose home has ``system.jwt`` uses it instead of a development authority.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from actorbus.codecs.errors import AuthError, DecodeError
from actorbus.security.credentials import DEFAULT_TTL, Authority
from actorbus.security.identity import Identity, PublicIdentity
from actorbus.security.keys import write_private

TRUSTED_FILE = "authority.pub.json"
SYSTEM = "system"


def issued(home: Path) -> bool:
    """Whether ``home`` holds credentials issued by an offline authority."""
    return (home / f"{SYSTEM}.jwt").exists()


def write_trusted(authority: PublicIdentity, home: Path) -> Path:
    path = home / TRUSTED_FILE
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(json.dumps(authority.to_json(), indent=2) + "\n")
    return path


def read_trusted(home: Path) -> list[PublicIdentity]:
    path = home / TRUSTED_FILE
    try:
        return [PublicIdentity.from_json(json.loads(path.read_text()))]
    except FileNotFoundError:
        return []
    except (ValueError, DecodeError) as exc:
        raise AuthError(f"{path} is not an authority's public identity: {exc}") from None


def issue(
    authority: Authority,
    out: Path,
    types: Iterable[str] = (),
    *,
    type_keys: Path,
    ttl: float = DEFAULT_TTL,
) -> list[Path]:
    """Write a deployment's home: a system identity of its own, the identity of
    each actor type it hosts, each with its credential, and the authority's public
    identity. Returns what was written.

    An actor type has one identity in a namespace, whichever deployment hosts it:
    messages to the type are sealed to its key, so a host holding another key
    could not open its share of them. The authority keeps the types' identities
    beside its own (``type_keys``, its ``types/`` directory, where a development
    authority keeps them too) and hands every deployment of a type the same one,
    made on its first issue."""
    written = [write_trusted(authority.public, out)]
    for name, acts in [(SYSTEM, ()), *((f"types/{t}", (t,)) for t in types)]:
        # a type's identity is the authority's, made on its first issue
        identity = Identity.load(type_keys / f"{acts[0]}.key") if acts else Identity.generate()
        identity.save(out / f"{name}.key")
        token = authority.issue(identity.public, acts, ttl=ttl)
        write_private(out / f"{name}.jwt", token.encode())
        written += [out / f"{name}.key", out / f"{name}.jwt"]
    return written


def load(home: Path, name: str) -> tuple[Identity, str]:
    """An issued identity and its credential (``system`` or ``types/<type>``);
    AuthError saying how to get one when they are missing."""
    key, jwt = home / f"{name}.key", home / f"{name}.jwt"
    if not (key.exists() and jwt.exists()):
        raise AuthError(
            f"no credential for {name} in {home}: issue one with "
            f"`actorbus security issue --out {home} ...`"
        )
    return Identity.load(key, create=False), jwt.read_text().strip()
