"""The token endpoints' clients: the operator's file, or one made for development.

A client is an id and a secret (HTTP Basic or form fields at ``/oauth/token``),
optionally limited to some scopes. In production the operator lists them in a
JSON file (``--token-clients``; ``actorbus security deploy --token-client``
writes one). On a development machine nobody has written one yet, and a
gateway on the development bus would serve tokens to nobody: there the
namespace's ``token-clients.json`` in ``ACTORBUS_HOME`` is made with one client,
``dev``, next to the development authority (whoever can read that directory
already holds the keys every local process trusts).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Final

from actorbus.security.keys import write_private
from actorbus.services.gateway.oauth import valid_scope

FILE_NAME: Final = "token-clients.json"
DEVELOPMENT_CLIENT: Final = "dev"


def read_token_clients(path: Path) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """The clients' secrets in ``path``, and the scopes of those it limits.

    The file is ``{"id": "secret"}`` or ``{"id": {"secret": "...", "scopes":
    ["agent:NAME", "agent:*", "gateway:status"]}}``; ValueError says what is wrong."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    wrong = ValueError(
        f"{path} must be a JSON object of client ids to a secret, or to "
        '{"secret": "...", "scopes": ["agent:NAME", ...]}'
    )
    if not isinstance(data, dict):
        raise wrong
    found: dict[str, str] = {}
    scopes: dict[str, tuple[str, ...]] = {}
    for name, entry in data.items():
        if isinstance(entry, str):
            found[name] = entry
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("secret"), str):
            raise wrong
        found[name] = entry["secret"]
        granted = entry.get("scopes")
        if granted is not None:
            if not isinstance(granted, list) or not all(valid_scope(str(g)) for g in granted):
                raise ValueError(
                    f"{path}: the scopes of {name!r} must be a list of "
                    "agent:NAME, agent:* or gateway:status"
                )
            scopes[name] = tuple(str(g) for g in granted)
    return found, scopes


def development_clients(home: Path) -> tuple[Path, bool] | None:
    """The clients file of the namespace whose home is ``home``, made with a client
    ``dev`` when missing and the home holds the development authority (not when
    it holds issued credentials: that is no development machine). (path, whether
    it was made now), or None."""
    path = home / FILE_NAME
    if path.exists():
        return path, False
    if not (home / "authority.key").exists():
        return None
    made = {DEVELOPMENT_CLIENT: secrets.token_urlsafe(24)}
    # exclusive: of two gateways starting at once, both serve the first one's
    return path, write_private(path, json.dumps(made, indent=2).encode(), exclusive=True)
