"""Turning arbitrary names into legal JetStream key-value keys, and back.

KV keys allow only ``[-/_=.A-Za-z0-9]`` and use ``.`` as a token separator, while
the names people give services, routes or actor keys may hold spaces, dots or
any Unicode. One token per name:

- a name made only of ``[A-Za-z0-9_-]`` is its own token (readable in
  ``nats kv ls``);
- anything else becomes ``=`` followed by its UTF-8 bytes in unpadded
  base64url. Plain tokens never contain ``=``, so the mapping is one to one.
"""

from __future__ import annotations

import base64
import binascii
import re

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_MARK = "="


def encode_token(name: str) -> str:
    """A single KV key token for ``name`` (non-empty), injective and reversible."""
    if not name:
        raise ValueError("an empty name cannot be a key-value key")
    if _PLAIN.fullmatch(name):
        return name
    return _MARK + base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    """The name :func:`encode_token` made ``token`` from."""
    if not token.startswith(_MARK):
        return token
    data = token[1:]
    try:
        return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"not an encoded key token: {token!r}") from exc


def key(*parts: str) -> str:
    """A dotted key whose first part is a literal prefix and the rest are names:
    ``key("svc", "my service")`` -> ``"svc.=bXkgc2VydmljZQ"``."""
    prefix, *names = parts
    return ".".join([prefix, *(encode_token(n) for n in names)])
