"""Finding Arize Phoenix, or installing it into a venv of its own."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from actorbus import environment as env

PHOENIX_REQUIREMENT = "arize-phoenix>=20.26,<21"
"""What :func:`ensure_phoenix_venv` installs (tested with 20.26.1)."""

DEFAULT_PROJECT = "actorbus"
"""The Phoenix project actorbus's spans are filed under."""

DEFAULT_TRACE_VENV = ".venv-trace"
"""Where :func:`ensure_phoenix_venv` puts Phoenix, relative to the working directory."""

ENV_PHOENIX_PYTHON = env.ACTORBUS_PHOENIX_PYTHON.name
ENV_TRACE_VENV = env.ACTORBUS_TRACE_VENV.name
ENV_CHROMIUM = "ACTORBUS_CHROMIUM"

LOOPBACK = "127.0.0.1"

# Runs inside Phoenix's interpreter: switch its OTLP gRPC receiver off (it would
# listen on every interface, [::]:port, whatever PHOENIX_HOST says), then run the
# `phoenix` command. If a later Phoenix renames the class the receiver stays on,
# on the free port start_phoenix chose for it, and the log says so.
BOOTSTRAP = """\
import inspect
import sys
try:
    from phoenix.server import grpc_server as _grpc

    _init = _grpc.GrpcServer.__init__
    if "disabled" not in inspect.signature(_init).parameters:
        raise TypeError("GrpcServer takes no `disabled` argument")

    def _no_grpc(self, *args, **kwargs):
        kwargs["disabled"] = True
        _init(self, *args, **kwargs)

    _grpc.GrpcServer.__init__ = _no_grpc
    print("actorbus: Phoenix OTLP/gRPC receiver disabled", file=sys.stderr, flush=True)
except Exception as exc:
    print(f"actorbus: could not disable Phoenix OTLP/gRPC: {exc!r}", file=sys.stderr, flush=True)
sys.argv = ["phoenix", *sys.argv[1:]]
from phoenix.server.main import main

main()
"""

_VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n    print(m.version('arize-phoenix'))\n"
    "except m.PackageNotFoundError:\n    pass\n"
)

PROJECT_ATTRIBUTE = "openinference.project.name"

STOP_TIMEOUT = 10.0
"""Seconds :meth:`PhoenixServer.stop` waits after SIGTERM before SIGKILL."""

HEX_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


class TraceUIError(RuntimeError):
    """Phoenix or Chromium is missing, did not start, or did not answer."""


# -- finding and installing Phoenix ---------------------------------------------


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def phoenix_version(python: str | os.PathLike[str] | None = None) -> str | None:
    """The arize-phoenix version installed for ``python`` (default: this one), or None."""
    if python is None or Path(python) == Path(sys.executable):
        try:
            return importlib.metadata.version("arize-phoenix")
        except importlib.metadata.PackageNotFoundError:
            return None
    if not Path(python).exists():
        return None
    try:
        out = subprocess.run(
            [os.fspath(python), "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = out.stdout.strip()
    return version or None


def absolute_of(python: str | os.PathLike[str]) -> Path:
    """An interpreter's absolute path (a bare name is looked up on PATH); not resolved,
    since a venv's python is a symlink to the base interpreter."""
    text = os.fspath(python)
    if os.sep not in text and (found := shutil.which(text)):
        return Path(found)
    return Path(text).absolute()


def default_venv() -> Path:
    return Path(env.ACTORBUS_TRACE_VENV.get() or DEFAULT_TRACE_VENV)


def find_phoenix(extra: Iterable[str | os.PathLike[str]] = ()) -> Path | None:
    """A Python interpreter that has arize-phoenix, or None.

    Looks at ``$ACTORBUS_PHOENIX_PYTHON``, the running interpreter, the venv at
    ``$ACTORBUS_TRACE_VENV`` (default ``./.venv-trace``), then ``extra``
    (interpreters or venv directories), in that order.
    """
    candidates: list[Path] = []
    if configured := env.ACTORBUS_PHOENIX_PYTHON.get():
        candidates.append(Path(configured))
    candidates.append(Path(sys.executable))
    candidates.append(_venv_python(default_venv()))
    for item in extra:
        path = Path(item)
        candidates.append(_venv_python(path) if path.is_dir() else path)
    seen: set[Path] = set()
    for candidate in map(absolute_of, candidates):
        if candidate in seen:
            continue
        seen.add(candidate)
        if phoenix_version(candidate) is not None:
            return candidate
    return None


def ensure_phoenix_venv(
    venv: str | os.PathLike[str] | None = None,
    *,
    requirement: str = PHOENIX_REQUIREMENT,
    base_python: str | None = None,
    quiet: bool = True,
) -> Path:
    """Create a venv with Phoenix in it unless it is there already; its Python.

    Default place ``$ACTORBUS_TRACE_VENV`` or ``./.venv-trace``. Phoenix gets a
    venv of its own so its ~150 packages never touch actorbus's: about 830 MB
    and one to three minutes of ``pip install`` the first time.
    """
    path = Path(venv).absolute() if venv is not None else default_venv().absolute()
    python = _venv_python(path)
    if phoenix_version(python) is not None:
        return python
    if not python.exists():
        subprocess.run([base_python or sys.executable, "-m", "venv", os.fspath(path)], check=True)
    ignore = path / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")  # the venv never shows up in `git status`
    pip = [os.fspath(python), "-m", "pip", "install", *(["--quiet"] if quiet else [])]
    subprocess.run([*pip, requirement], check=True)
    if phoenix_version(python) is None:
        raise TraceUIError(f"installed {requirement!r} into {path} but cannot find it there")
    return python
