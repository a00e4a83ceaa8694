"""What a system's end-to-end security is set to, and where its keys live:
read by the guard that enforces it, the commands and services that find a
home, and the secure broker set-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from actorbus import environment as env
from actorbus.security.replay import DEFAULT_SKEW_MS

if TYPE_CHECKING:  # types of fields only: a system on an open bus imports no crypto
    from actorbus.security.credentials import Authority
    from actorbus.security.identity import PublicIdentity

Policy = Literal["require", "allow", "off"]
POLICIES: Final = ("require", "allow", "off")


def actorbus_home() -> Path:
    """``$ACTORBUS_HOME``, or ``~/.actorbus``: identities, the development
    authority, the broker's keys and certificates."""
    return Path(env.ACTORBUS_HOME.get() or Path.home() / ".actorbus")


def default_home(namespace: str) -> Path:
    """A namespace's directory in ``actorbus_home()``."""
    return actorbus_home() / namespace


@dataclass(frozen=True)
class SecuritySettings:
    """End-to-end security on the bus.

    ``policy`` is what an actor takes that is not authenticated: ``require``
    refuses it, ``allow`` takes it (authenticated messages are still checked),
    ``off`` checks nothing. An actor type overrides it with ``security = ...``.
    ``seal`` seals content to the recipient whenever its key is known (bodies in
    msgpack; JSON systems are authenticated, not sealed). ``home`` holds the
    identities (``$ACTORBUS_HOME/<namespace>`` by default); ``authority``
    issues this system's credentials (by default the development authority in
    ``home``); ``trusted`` adds authorities whose credentials are accepted.
    ``hosts`` names the actor types the system hosts (None: any): on the
    development broker its NATS user may then subscribe to those types'
    subjects only, so it cannot take a share of another type's messages, and
    hosting another type is refused.
    """

    policy: Policy = "require"
    seal: bool = True
    home: Path | None = None
    authority: Authority | None = None
    trusted: Sequence[PublicIdentity] = field(default_factory=tuple)
    skew_ms: int = DEFAULT_SKEW_MS
    hosts: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {self.policy!r}")
