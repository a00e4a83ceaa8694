"""Prepare an offline build of the compose stack, where no image registry is
reachable: a base image made from Debian's packages, the Python wheels the
actorbus image installs, and the Phoenix image, all built on this host.

    python compose/offline.py            # then, as it prints:
    PYTHON_IMAGE=actorbus-base:bookworm docker-compose -p actorbus \
        -f compose/docker-compose.yml -f compose/offline.yml up -d --build

1. The base image: ``debootstrap --variant=minbase`` of Debian bookworm with
   python3, python3-venv and ca-certificates (about 30 s, as root), imported
   with ``docker import``. Skipped when the image exists.
2. The wheels: ``pip wheel`` of actorbus and the extras the image installs,
   into ``compose/wheels/``, which ``compose/Dockerfile`` installs from with no
   index. Built by this host's Python, so it must be the base image's minor
   version (bookworm: 3.11).
3. The tracing UI: Arize Phoenix's wheels into ``compose/wheels/phoenix/``
   and an image of them on the base (``compose/Dockerfile.phoenix``, about a
   minute), tagged ``actorbus-phoenix:local``. Skipped when the image exists.

``compose/offline.yml`` then runs the NATS nodes from the actorbus image (the
nats-server binary of its ``server`` extra) and Phoenix in place of Jaeger.
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
EXTRAS = "server,gateway,registry,router,otlp,agents"
BUILD_REQUIRES = ("setuptools>=77", "wheel")  # pyproject.toml's [build-system]
DEBIAN_PYTHON = {"bookworm": (3, 11)}
# The Phoenix the image holds: actorbus.services.trace_ui's PHOENIX_REQUIREMENT
# (this script runs without actorbus installed; a test keeps the two equal).
PHOENIX_REQUIREMENT = "arize-phoenix>=20.26,<21"
PHOENIX_WHEELS = WHEELS / "phoenix"


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


def pip_wheel(into: Path, *requirements: str) -> None:
    say(f"pip wheel {requirements[0]} into {into.relative_to(REPO)}")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(into), *requirements)


def check_python(suite: str) -> None:
    """Wheels with compiled code are for one Python: the image's."""
    want = DEBIAN_PYTHON[suite]
    if sys.version_info[:2] != want:
        sys.exit(
            f"offline: wheels must be built by Python {want[0]}.{want[1]} "
            f"(the {suite} image's); this is {sys.version.split()[0]}"
        )


def wheels(suite: str) -> None:
    """The wheels of actorbus[EXTRAS] and everything it needs, for the image."""
    check_python(suite)
    WHEELS.mkdir(exist_ok=True)
    # With BUILD_REQUIRES: the image builds actorbus from its source, with no index.
    pip_wheel(WHEELS, f"{REPO}[{EXTRAS}]", *BUILD_REQUIRES)
    say(f"{len(list(WHEELS.glob('*.whl')))} wheels ready")


def phoenix_image(tag: str, base: str, suite: str) -> None:
    """Arize Phoenix on the base image, from wheels built on this host."""
    if image_exists(tag):
        say(f"tracing UI image {tag} exists")
        return
    check_python(suite)
    start = time.monotonic()
    PHOENIX_WHEELS.mkdir(parents=True, exist_ok=True)
    pip_wheel(PHOENIX_WHEELS, PHOENIX_REQUIREMENT)
    say(f"docker build {tag} (about a minute)")
    run(
        "docker",
        "build",
        "--quiet",
        "--file",
        str(REPO / "compose" / "Dockerfile.phoenix"),
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--build-arg",
        f"PHOENIX_REQUIREMENT={PHOENIX_REQUIREMENT}",
        "--build-arg",
        f"BUILT_FOR={tag}",
        "--tag",
        tag,
        str(PHOENIX_WHEELS),
        stdout=subprocess.DEVNULL,
    )
    # The build stage stays behind as an untagged image of a gigabyte: not needed.
    prune = [
        "docker",
        "image",
        "prune",
        "--force",
        "--filter",
        f"label=org.actorbus.built-for={tag}",
    ]
    run(*prune, stdout=subprocess.DEVNULL)
    say(f"tracing UI image {tag} made in {time.monotonic() - start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="actorbus-base:bookworm", help="base image tag")
    parser.add_argument("--suite", default="bookworm", choices=sorted(DEBIAN_PYTHON))
    parser.add_argument("--no-wheels", action="store_true", help="only the base image")
    parser.add_argument(
        "--phoenix", default="actorbus-phoenix:local", help="the tracing UI image's tag"
    )
    parser.add_argument("--no-phoenix", action="store_true", help="no tracing UI image")
    args = parser.parse_args(argv)
    base_image(args.base, args.suite)
    if not args.no_wheels:
        wheels(args.suite)
    if not args.no_phoenix:
        phoenix_image(args.phoenix, args.base, args.suite)
    print(
        f"PYTHON_IMAGE={args.base} PHOENIX_IMAGE={args.phoenix} docker-compose -p actorbus "
        "-f compose/docker-compose.yml -f compose/offline.yml up -d --build"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
