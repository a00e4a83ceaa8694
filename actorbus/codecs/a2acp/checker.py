"""A2ACP's constants, error codes, and its JSON Schema compiled into a checker
that names every violation; JSON bytes and timestamps as the spec writes them."""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from actorbus.codecs.common import (
    EPOCH,
    format_timestamp as format_timestamp,
)
from actorbus.codecs.errors import (
    DecodeError,
    EncodeError,
    MessageTooLargeError,
    MissingExtraError,
)

if TYPE_CHECKING:
    import jsonschema

PROTOCOL = "a2acp"
PROTOCOL_VERSION = "1.0"
SUPPORTED_MAJORS = frozenset({0, 1})  # "support N-1 major versions"
MESSAGE_TYPES = ("request", "response", "event", "error")
MessageType = Literal["request", "response", "event", "error"]

DEFAULT_DOMAIN = "actorbus"
DEFAULT_AGENT_VERSION = "1.0.0"

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_PAYLOAD_BYTES = 900 * 1024
HANDSHAKE_TIMEOUT_S = 5.0
CONTRACT_VALIDATION_TIMEOUT_S = 2.0
ROUTING_TIMEOUT_S = 30.0

INTENT_INITIATE_HANDSHAKE = "initiate_handshake"
INTENT_ACCEPT_HANDSHAKE = "accept_handshake"
# The spec's examples end a collaboration but name no intent; this one is ours.
INTENT_TERMINATE = "terminate_collaboration"

EXTENSION_KEY = "actorbus"
FACTS_KEY = "a2acp"  # meta extra holding A2ACP-only facts
TOKEN_KEY = "auth_token"  # meta extra holding security.auth_token

INTENT_ERROR = "$error"
ENCRYPTED = "aes256"

# -- error codes ----------------------------------------------------------------

#: The spec's error codes and whether a retry may help.
ERROR_CODES: dict[str, bool] = {
    "CAPABILITY_NOT_FOUND": False,
    "SCHEMA_MISMATCH": False,
    "AUTH_FAILED": False,
    "TIMEOUT": True,
    "INTERNAL_ERROR": True,
    "RATE_LIMIT_EXCEEDED": True,
    "CONTRACT_VIOLATION": False,
    "SECURITY_POLICY_VIOLATION": False,
}
#: Seconds suggested for a retryable error that did not say how long to wait.
DEFAULT_RETRY_AFTER = 1

#: actorbus taxonomy code -> A2ACP code (an unknown code is INTERNAL_ERROR).
TAXONOMY_TO_A2ACP: dict[str, str] = {
    "E_TIMEOUT": "TIMEOUT",
    "E_EXPIRED": "TIMEOUT",
    "E_CONN": "INTERNAL_ERROR",
    "E_STOPPED": "INTERNAL_ERROR",
    "E_HANDLER": "INTERNAL_ERROR",
    "E_INTERNAL": "INTERNAL_ERROR",
    "E_ENCODE": "INTERNAL_ERROR",
    "E_CANCELLED": "INTERNAL_ERROR",
    "E_NO_RESPONDERS": "CAPABILITY_NOT_FOUND",
    "E_UNSUPPORTED": "CAPABILITY_NOT_FOUND",
    "E_NOT_FOUND": "CAPABILITY_NOT_FOUND",
    "E_ADDRESS": "CAPABILITY_NOT_FOUND",
    "E_DECODE": "SCHEMA_MISMATCH",
    "E_VALIDATION": "SCHEMA_MISMATCH",
    "E_TOO_LARGE": "SCHEMA_MISMATCH",
    "E_AUTH": "AUTH_FAILED",
    "E_RATE_LIMIT": "RATE_LIMIT_EXCEEDED",
    "E_PROTOCOL": "CONTRACT_VIOLATION",
}
#: A2ACP code -> actorbus taxonomy code (unknown codes become E_HANDLER remote errors).
A2ACP_TO_TAXONOMY: dict[str, str] = {
    "CAPABILITY_NOT_FOUND": "E_UNSUPPORTED",
    "SCHEMA_MISMATCH": "E_VALIDATION",
    "AUTH_FAILED": "E_AUTH",
    "TIMEOUT": "E_TIMEOUT",
    "INTERNAL_ERROR": "E_HANDLER",
    "RATE_LIMIT_EXCEEDED": "E_RATE_LIMIT",
    "CONTRACT_VIOLATION": "E_PROTOCOL",
    "SECURITY_POLICY_VIOLATION": "E_AUTH",
}


# -- the schema, compiled -----------------------------------------------------------

_ANNOTATIONS = frozenset(
    {"$schema", "$id", "title", "description", "default", "format", "definitions", "examples"}
)
Check = Callable[[Any], bool]


@functools.cache
def a2acp_schema() -> dict[str, Any]:
    """The A2ACP message schema (draft-07) shipped in ``actorbus/codecs/schemas``."""
    text = (
        importlib.resources.files("actorbus.codecs")
        .joinpath("schemas/a2acp.schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _jsonschema_validator() -> jsonschema.Draft7Validator:
    """The reference validator: slow, used to explain a rejection and in tests
    (jsonschema comes with the [protocols] extra; the checks themselves do not need it)."""
    try:
        import jsonschema as validators
    except ImportError as exc:
        raise MissingExtraError.needs(
            "jsonschema", "protocols", "explaining an A2ACP rejection"
        ) from exc
    validator: jsonschema.Draft7Validator = validators.Draft7Validator(a2acp_schema())
    return validator


def _is_type(value: Any, name: str) -> bool:
    """draft-07 type semantics as jsonschema applies them (a bool is not a number)."""
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return name == "number" or isinstance(value, int) or value.is_integer()


def _same(a: Any, b: Any) -> bool:
    """JSON equality for enum/const: 1 and 1.0 are equal, True is neither."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


class Compiler:
    """Writes a schema as one Python predicate, as fastjsonschema does.

    Only the keywords this schema uses are known (type, required, properties,
    enum, const, pattern, minimum, local $ref, if/then); any other keyword
    raises here, so the schema cannot grow a rule the checker would skip.
    The generated code returns False at the first rule broken.
    """

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {"_is_type": _is_type, "_same": _same, "_M": _MISSING}
        self.functions: dict[str, str] = {}  # $ref or id(node) -> function name
        self.names = 0

    def predicate(self, node: Mapping[str, Any]) -> Check:
        entry = self.function(node)
        namespace = dict(self.consts)
        exec("\n".join(self.lines), namespace)  # source built from the schema only
        check: Check = namespace[entry]
        return check

    def function(self, node: Mapping[str, Any], key: str | None = None) -> str:
        key = key or f"node{id(node)}"
        if key not in self.functions:
            name = self.functions[key] = f"_f{len(self.functions)}"
            body: list[str] = []
            self.node(node, "v", body, "    ")
            self.lines += [f"def {name}(v):", *body, "    return True", ""]
        return self.functions[key]

    def const(self, value: Any) -> str:
        self.names += 1
        name = f"_c{self.names}"
        self.consts[name] = value
        return name

    def node(self, node: Mapping[str, Any], var: str, out: list[str], pad: str) -> None:
        for key, value in node.items():
            if key in _ANNOTATIONS or key == "then":
                continue
            emit = getattr(self, "kw_" + key.lstrip("$"), None)
            if emit is None:
                raise ValueError(f"the A2ACP schema checker does not know the keyword {key!r}")
            emit(value, node, var, out, pad)

    def kw_type(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        if value == "object":
            out.append(f"{pad}if type({var}) is not dict: return False")
        elif value == "string":
            out.append(f"{pad}if type({var}) is not str: return False")
        else:
            names = self.const((value,) if isinstance(value, str) else tuple(value))
            out.append(f"{pad}if not any(_is_type({var}, n) for n in {names}): return False")

    def kw_required(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        names = self.const(tuple(value))
        out.append(f"{pad}if type({var}) is dict:")
        out.append(f"{pad}    for n in {names}:")
        out.append(f"{pad}        if n not in {var}: return False")

    def kw_properties(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        out.append(f"{pad}if type({var}) is dict:")
        for i, (name, sub) in enumerate(value.items()):
            item = f"{var}_{i}"
            out.append(f"{pad}    {item} = {var}.get({name!r}, _M)")
            out.append(f"{pad}    if {item} is not _M:")
            inner: list[str] = []
            self.node(sub, item, inner, pad + "        ")
            out.extend(inner or [f"{pad}        pass"])

    def kw_enum(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        if all(isinstance(o, str) for o in value):
            names = self.const(frozenset(value))
            out.append(f"{pad}if type({var}) is not str or {var} not in {names}: return False")
        else:
            names = self.const(tuple(value))
            out.append(f"{pad}if not any(_same({var}, o) for o in {names}): return False")

    def kw_const(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        out.append(f"{pad}if not _same({var}, {self.const(value)}): return False")

    def kw_pattern(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        search = self.const(re.compile(value).search)
        out.append(f"{pad}if type({var}) is str and {search}({var}) is None: return False")

    def kw_minimum(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        limit = self.const(value)
        out.append(f"{pad}if _is_type({var}, 'number') and {var} < {limit}: return False")

    def kw_ref(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        prefix = "#/definitions/"
        if not value.startswith(prefix):
            raise ValueError(f"the A2ACP schema checker only follows local refs, not {value!r}")
        target = self.root["definitions"][value[len(prefix) :]]
        out.append(f"{pad}if not {self.function(target, value)}({var}): return False")

    def kw_if(self, value: Any, node: Any, var: str, out: list[str], pad: str) -> None:
        condition = self.function(value)
        then = self.function(node.get("then", {}))
        out.append(f"{pad}if {condition}({var}) and not {then}({var}): return False")


_MISSING = object()


@functools.cache
def fast_checker() -> Check:
    schema = a2acp_schema()
    return Compiler(schema).predicate(schema)


def schema_errors(obj: Any) -> list[str]:
    """Every way ``obj`` breaks the schema, as ``$.json.path: reason`` (jsonschema's word)."""
    found = sorted(
        _jsonschema_validator().iter_errors(obj),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]),
    )
    return [f"{_json_path(e.absolute_path)}: {e.message}" for e in found]


def _json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def validate_message(obj: Any) -> dict[str, Any]:
    """``obj`` checked against the A2ACP schema; DecodeError names the first problem."""
    if fast_checker()(obj):
        assert isinstance(obj, dict)
        return obj
    problems = schema_errors(obj)
    if not problems:  # the compiled check is stricter than the schema: trust the schema
        assert isinstance(obj, dict)
        return obj
    raise DecodeError(f"not a valid A2ACP message: {problems[0]}")


# -- JSON bytes --------------------------------------------------------------------

_json_decoder = msgspec.json.Decoder()
_json_encoder = msgspec.json.Encoder()


def loads(data: bytes | str) -> dict[str, Any]:
    """A wire message: size-checked (1 MB), parsed and schema-validated."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageTooLargeError("A2ACP message", len(data), MAX_MESSAGE_BYTES)
    try:
        obj = _json_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"A2ACP message is not JSON: {exc}") from exc
    return validate_message(obj)


def dumps(message: Mapping[str, Any]) -> bytes:
    """A message as compact UTF-8 JSON."""
    try:
        return _json_encoder.encode(message)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"A2ACP message cannot be written as JSON: {exc}") from exc


# -- timestamps ----------------------------------------------------------------------
#
# format_timestamp (imported above) is the shared one in actorbus.codecs.common.


def parse_timestamp(text: str) -> int:
    """ISO 8601 -> Unix milliseconds; a time without an offset is read as UTC."""
    try:
        t = datetime.fromisoformat(text)
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"timestamp {text!r:.60} is not ISO 8601") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        delta = t - EPOCH
    except OverflowError as exc:
        raise DecodeError(f"timestamp {text!r:.60} is out of range") from exc
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
