"""compose/docker-compose.yml read as Docker Compose reads it: variable
interpolation, the services with their healthchecks, replicas, ports and
mounts, and validation against the Compose specification's JSON schema
(``compose/compose-spec.json``, a copy, so a clean clone needs nothing else).
tests/test_compose.py checks the file with these; tests/test_compose_engine.py
runs it on a real engine."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE_DIR = REPO / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
# The Compose specification's JSON schema (compose-spec/compose-spec,
# schema/compose-spec.json at commit 170098b, Apache-2.0), kept in the repository
# so that a clean clone validates without network or a Docker installation.
SCHEMA_FILE = COMPOSE_DIR / "compose-spec.json"
DOCKERFILE = COMPOSE_DIR / "Dockerfile"
DOCKERIGNORE = COMPOSE_DIR.parent / ".dockerignore"

LOOPBACK = "127.0.0.1"
OWN_HOSTS = ("0.0.0.0", "127.0.0.1", "localhost")


# -- interpolation: ${VAR}, ${VAR:-default}, ... as the Compose spec defines it --

_REFERENCE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?", re.S)


class InterpolationError(ValueError):
    """A reference Compose would refuse (or one this reader does not support)."""


@dataclass(frozen=True)
class Reference:
    """One ``$NAME`` / ``${NAME...}`` in the file; ``default`` None when it has none."""

    name: str
    default: str | None


def _parse_braced(body: str) -> tuple[str, str, str]:
    m = _BRACED.fullmatch(body)
    if m is None:
        raise InterpolationError(f"invalid interpolation ${{{body}}}")
    arg = m["arg"] or ""
    if "${" in arg:
        raise InterpolationError(f"nested interpolation is not supported: ${{{body}}}")
    return m["name"], m["op"] or "", arg


def interpolate_str(text: str, env: Mapping[str, str]) -> str:
    """Resolve references in one string against ``env`` (unset means absent)."""

    def one(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        if m["named"]:
            return env.get(m["named"], "")
        name, op, arg = _parse_braced(m["braced"])
        value = env.get(name)
        if op == ":-":
            return value if value else arg
        if op == "-":
            return arg if value is None else value
        if op == ":+":
            return arg if value else ""
        if op == "+":
            return "" if value is None else arg
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            raise InterpolationError(f"{name}: {arg or 'required'}")
        return value or ""

    return _REFERENCE.sub(one, text)


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Resolve references in every string value (keys are left as they are)."""
    if isinstance(value, str):
        return interpolate_str(value, env)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def references(value: Any) -> Iterator[Reference]:
    """Every variable reference in the (uninterpolated) document."""
    if isinstance(value, str):
        for m in _REFERENCE.finditer(value):
            if m["named"]:
                yield Reference(m["named"], None)
            elif m["braced"] is not None:
                name, op, arg = _parse_braced(m["braced"])
                yield Reference(name, arg if op in (":-", "-") else None)
    elif isinstance(value, dict):
        for v in value.values():
            yield from references(v)
    elif isinstance(value, list):
        for v in value:
            yield from references(v)


# -- loading and validating ----------------------------------------------------


def load_raw(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The YAML as written (anchors and ``<<`` merges resolved, no interpolation)."""
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path} is not a mapping"
    return doc


def load(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose model after interpolation with ``env`` (default: no variables
    set, so every default applies, whatever the caller's environment holds)."""
    doc = interpolate(load_raw(path), env or {})
    assert isinstance(doc, dict)
    return doc


def schema_errors(doc: Mapping[str, Any]) -> list[str]:
    """What the Compose spec's JSON schema says is wrong with ``doc`` (none: valid).

    The schema declares draft-07 by a URI (https, no ``#``) that jsonschema does
    not map to a draft, so the Draft 7 validator is named here rather than
    looked up (the lookup would fall back to the newest draft)."""
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]


# -- one service, read -----------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    source: str  # bind: a host path; volume: the volume's name
    target: str
    kind: str  # "bind" or "volume"
    read_only: bool


@dataclass
class Service:
    """The parts of a compose service the local run and the checks need."""

    name: str
    spec: dict[str, Any]

    @property
    def command(self) -> list[str]:
        cmd = self.spec.get("command")
        if cmd is None:
            return []
        return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]

    @property
    def replicas(self) -> int:
        return int((self.spec.get("deploy") or {}).get("replicas", 1))

    @property
    def expose(self) -> list[int]:
        return [int(str(p).split("/")[0]) for p in self.spec.get("expose", [])]

    @property
    def published(self) -> list[tuple[str, int]]:
        """(host part, container port) of every ``ports:`` entry."""
        out: list[tuple[str, int]] = []
        for entry in self.spec.get("ports", []):
            if isinstance(entry, dict):
                out.append((str(entry.get("published", "")), int(entry["target"])))
                continue
            host, _, container = str(entry).split("/")[0].rpartition(":")
            out.append((host, int(container)))
        return out

    @property
    def environment(self) -> dict[str, str]:
        env = self.spec.get("environment") or {}
        if isinstance(env, list):
            pairs = (item.split("=", 1) for item in env)
            return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}
        return {str(k): "" if v is None else str(v) for k, v in env.items()}

    @property
    def healthcheck(self) -> list[str] | None:
        """The healthcheck's exec form (``CMD`` dropped); None if it has none."""
        hc = self.spec.get("healthcheck") or {}
        test = hc.get("test")
        if not test or hc.get("disable") in (True, "true"):
            return None
        if isinstance(test, str):
            return ["/bin/sh", "-c", test]
        kind, *rest = (str(t) for t in test)
        if kind == "NONE":
            return None
        if kind == "CMD-SHELL":
            return ["/bin/sh", "-c", " ".join(rest)]
        assert kind == "CMD", f"{self.name}: healthcheck test starts with {kind!r}"
        return rest

    @property
    def healthcheck_timeout(self) -> float:
        return _duration((self.spec.get("healthcheck") or {}).get("timeout", "30s"))

    @property
    def depends_on(self) -> dict[str, str]:
        deps = self.spec.get("depends_on") or {}
        if isinstance(deps, list):
            return dict.fromkeys(deps, "service_started")
        return {k: (v or {}).get("condition", "service_started") for k, v in deps.items()}

    @property
    def mounts(self) -> list[Mount]:
        out: list[Mount] = []
        for entry in self.spec.get("volumes", []):
            if isinstance(entry, dict):
                out.append(
                    Mount(
                        str(entry.get("source", "")),
                        str(entry["target"]),
                        str(entry.get("type", "volume")),
                        bool(entry.get("read_only", False)),
                    )
                )
                continue
            source, target, *mode = str(entry).split(":")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            out.append(Mount(source, target, kind, "ro" in ",".join(mode).split(",")))
        return out

    @property
    def builds_actorbus_image(self) -> bool:
        build = self.spec.get("build") or {}
        return isinstance(build, dict) and build.get("dockerfile") == "compose/Dockerfile"


def services(doc: Mapping[str, Any]) -> dict[str, Service]:
    return {name: Service(name, spec) for name, spec in doc["services"].items()}


def _duration(text: Any) -> float:
    """Compose durations: ``1m30s``, ``500ms``, ``10s``."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(text)):
        total += float(number) * units[unit]
    return total


def dockerfile_workdir(path: Path = DOCKERFILE) -> str:
    """The final stage's WORKDIR: where service commands run in the image."""
    workdir = "/"
    for line in path.read_text().splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            workdir = "/"
        elif len(words) == 2 and words[0].upper() == "WORKDIR":
            workdir = words[1]
    return workdir


# -- the loopback mapping --------------------------------------------------------
