"""Key files: private keys kept on disk with 0600 permissions, never logged."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

log = logging.getLogger("actorbus.security")


def load_key(path: Path) -> ed25519.Ed25519PrivateKey:
    """The Ed25519 key in ``path`` (PEM, PKCS#8), generated and saved there (0600,
    written atomically) first. If the file cannot be written the key lives as long
    as the process."""
    with contextlib.suppress(FileNotFoundError):
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if isinstance(loaded, ed25519.Ed25519PrivateKey):
            return loaded
        log.warning("key file %s does not hold an Ed25519 key: a new one replaces it", path)
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        tmp.replace(path)
    except OSError as exc:
        log.warning("key not saved to %s (%s): it lasts until the process stops", path, exc)
    return key


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> bool:
    """Write a secret to ``path``: 0600 from its first byte, atomically, in a
    0700 directory made if missing. With ``exclusive``, a file already there
    wins (False is returned): two processes making the same key at once end up
    holding the same one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if not exclusive:
        tmp.replace(path)
        return True
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    return True
