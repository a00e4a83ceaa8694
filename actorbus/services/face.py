"""How a service's HTTP face is secured: what the gateway, the registry and the
router share in their settings (each says, in its own, what needs a token)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class FaceSettings:
    """Tokens and HTTPS for a service's HTTP face.

    - ``auth``: "required", "open", or "auto" (required when the bus is secured);
      the tokens are the namespace's issuer's (``issuer_key``, by default
      ``<ACTORBUS_HOME>/<namespace>/token-issuer.key``, which a gateway's token
      endpoints sign with), saying ``<token_domain>-auth-service`` issued them.
    - ``tls``: HTTPS "on", "off" (logged on a secured bus), or "auto" (on when
      the bus is secured), with ``tls_cert``/``tls_key``, else the development
      certificate of ``ACTORBUS_HOME``.
    """

    auth: Literal["auto", "required", "open"] = "auto"
    token_domain: str = "actorbus"
    issuer_key: str | Path | None = None
    tls: Literal["auto", "on", "off"] = "auto"
    tls_cert: str | Path | None = None
    tls_key: str | Path | None = None
