"""Agora's protocol documents and their hashes: what a ``protocolHash`` names.

A protocol document is front matter (``name``, ``description``, ``multiround``)
between ``---`` lines, then the text; ``protocolHash`` is the SHA-1 of the
whole document, written as 40 hex digits (the spec) or base64 (the SDK): both
are accepted and normalised to hex (:func:`normalize_hash`, :func:`hash_matches`).
Used by the Agora codec (:mod:`actorbus.codecs.agora`, which re-exports these)
and the gateway's Agora edge.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any, Literal

import msgspec

from actorbus.codecs.common import json_text
from actorbus.codecs.errors import DecodeError

HashStyle = Literal["hex", "base64"]

# -- protocolHash ---------------------------------------------------------------------

_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_B64_SHA1 = re.compile(r"[A-Za-z0-9+/_-]{27}=?")


def protocol_hash(document: str, *, style: HashStyle = "hex") -> str:
    """The SHA-1 of a protocol document: 40 hex digits (spec) or base64 (SDK)."""
    digest = hashlib.sha1(document.encode()).digest()  # Agora's choice; not for security
    return digest.hex() if style == "hex" else base64.b64encode(digest).decode()


def hash_style(given: str) -> HashStyle:
    """Which form a (valid) protocolHash was written in, to answer in the same."""
    return "hex" if _HEX40.fullmatch(given) else "base64"


def normalize_hash(given: Any) -> str:
    """A protocolHash as 40 lowercase hex digits, from hex or base64 (standard or
    URL-safe, padded or not); DecodeError if it is neither."""
    if isinstance(given, str) and _HEX40.fullmatch(given):
        return given.lower()
    if isinstance(given, str) and _B64_SHA1.fullmatch(given):
        text = given.replace("-", "+").replace("_", "/").rstrip("=") + "="
        try:
            return base64.b64decode(text, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    raise DecodeError(f"not a SHA-1 protocolHash (40 hex digits or base64): {given!r:.80}")


def _in_style(hex_digest: str, style: str) -> str:
    return hex_digest if style == "hex" else base64.b64encode(bytes.fromhex(hex_digest)).decode()


def hash_matches(document: str, given: Any) -> bool:
    """Whether ``given`` (hex or base64) is the hash of ``document``."""
    try:
        return normalize_hash(given) == protocol_hash(document)
    except DecodeError:
        return False


# -- protocol documents ---------------------------------------------------------------


class ProtocolDocument(msgspec.Struct, frozen=True):
    """A parsed protocol document; ``text`` is the whole document (what is hashed)."""

    name: str
    description: str
    multiround: bool
    body: str
    text: str

    @property
    def hash(self) -> str:
        return protocol_hash(self.text)


_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*)|\s*)$")
_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})


def _scalar(text: str) -> Any:
    """A YAML plain/quoted scalar, as far as front-matter needs."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        return inner.replace("''", "'") if text[0] == "'" else _unescape(inner)
    text = re.sub(r"\s+#.*$", "", text)
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    if lowered in ("null", "~", ""):
        return None
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return text


def _unescape(text: str) -> str:
    try:
        value = msgspec.json.decode(f'"{text}"'.encode())
    except msgspec.DecodeError:
        return text
    return value if isinstance(value, str) else text


def _block(lines: list[str], style: str) -> str:
    """A ``|`` (literal) or ``>`` (folded) block; ``-`` strips the final newline."""
    stripped = [ln.strip() for ln in lines]
    text = "\n".join(stripped) if style.startswith("|") else " ".join(s for s in stripped if s)
    return text if style.endswith("-") or not text else text + "\n"


def parse_front_matter(text: str) -> dict[str, Any]:
    """``key: value`` lines (plain, quoted, ``|``/``>`` blocks, indented
    continuations, comments). PyYAML is not a dependency, and front-matter in
    protocol documents is exactly this much YAML; anything more is a DecodeError."""
    out: dict[str, Any] = {}
    key: str | None = None
    pending: list[str] = []
    style = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t" and key is not None:
            pending.append(line)
            continue
        if key is not None:
            out[key] = _finish(out[key], pending, style)
        match = _KEY_LINE.match(line)
        if match is None:
            raise DecodeError(f"front-matter line is not 'key: value': {line!r:.80}")
        key, raw = match.group(1), (match.group(2) or "")
        style = raw.strip() if raw.strip() in ("|", ">", "|-", ">-") else ""
        out[key] = None if style else _scalar(raw)
        pending = []
    if key is not None:
        out[key] = _finish(out[key], pending, style)
    return out


def _finish(value: Any, pending: list[str], style: str) -> Any:
    if style:
        return _block(pending, style)
    if not pending:
        return value
    return " ".join([str(value or ""), *(ln.strip() for ln in pending)]).strip()


def _split_document(text: str) -> tuple[str, str]:
    """(front-matter, body). Front-matter sits between two ``---`` lines (the
    first may be left out, as some documents do)."""
    lines = text.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == "---"]
    if not marks:
        raise DecodeError("a protocol document needs front-matter and a '---' line")
    if lines[: marks[0]] and any(ln.strip() for ln in lines[: marks[0]]):
        start, end = 0, marks[0]  # front-matter first, then ---
    elif len(marks) >= 2:
        start, end = marks[0] + 1, marks[1]
    else:
        raise DecodeError("a protocol document's front-matter is not closed by '---'")
    return "".join(lines[start:end]), "".join(lines[end + 1 :])


def parse_protocol_document(text: Any) -> ProtocolDocument:
    """A protocol document -> its name, description, multiround flag and body,
    with the SDK's defaults for missing keys."""
    if not isinstance(text, str):
        raise DecodeError(f"a protocol document is text, not {type(text).__name__}")
    front, body = _split_document(text)
    meta = parse_front_matter(front)
    multiround = meta.get("multiround", False)
    if not isinstance(multiround, bool):
        raise DecodeError(f"front-matter multiround is not true/false: {multiround!r:.40}")
    return ProtocolDocument(
        name=str(meta.get("name") or "Unnamed protocol"),
        description=str(meta.get("description") or "No description provided"),
        multiround=multiround,
        body=body.strip("\n"),
        text=text,
    )


def protocol_document(name: str, description: str, body: str, *, multiround: bool = False) -> str:
    """A protocol document in the SDK's layout (front-matter fenced by ``---``)."""
    quoted = json_text(description)
    return (
        f"---\nname: {json_text(name)}\ndescription: {quoted}\n"
        f"multiround: {'true' if multiround else 'false'}\n---\n\n{body}\n"
    )
