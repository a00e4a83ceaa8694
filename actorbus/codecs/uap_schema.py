"""The UAP schema as shipped with the spec, and requests checked against it: the
first problem named by its JSON path (:class:`UapValidationError`). jsonschema
comes with the ``registry`` extra and is imported when a request is validated.
The records themselves are :mod:`actorbus.codecs.uap`."""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from actorbus.codecs.errors import MissingExtraError, ValidationFailedError

if TYPE_CHECKING:
    import jsonschema
    import jsonschema.exceptions

RequestDefinition = Literal[
    "CreateServiceRequest", "UpdateServiceRequest", "CreateRouteRequest", "UpdateRouteRequest"
]


class UapValidationError(ValidationFailedError):
    """A request that does not match the UAP schema (or a rule beside it).

    ``path`` is a JSON path into the request body (``$`` is the body itself),
    ``reason`` says what is wrong there. Remote callers get a
    ``ValidationFailedError`` with the same message.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@functools.cache
def uap_schema() -> dict[str, Any]:
    """The spec's JSON schema (draft-07), as shipped in ``actorbus/codecs/schemas``."""
    text = (
        importlib.resources.files("actorbus.codecs")
        .joinpath("schemas/uap-schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _validator(definition: str) -> jsonschema.Draft7Validator:
    try:
        import jsonschema as validators
    except ImportError as exc:
        raise MissingExtraError.needs("jsonschema", "registry", "validating UAP requests") from exc
    root = uap_schema()
    if definition not in root["definitions"]:
        raise KeyError(f"the UAP schema has no definition {definition!r}")
    wrapper = {"definitions": root["definitions"], "$ref": f"#/definitions/{definition}"}
    validator: jsonschema.Draft7Validator = validators.Draft7Validator(wrapper)
    return validator


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
)


def json_type(value: Any) -> str:
    """The JSON type name of ``value`` (a bool is a boolean, not an integer)."""
    for py, name in _JSON_TYPES:
        if isinstance(value, py):
            return name
    return type(value).__name__


def json_path(parts: Iterable[str | int]) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _explain(err: jsonschema.exceptions.ValidationError) -> UapValidationError:
    where = list(err.absolute_path)
    if err.validator == "required" and isinstance(err.instance, dict):
        required = err.validator_value if isinstance(err.validator_value, list) else []
        missing = [p for p in required if p not in err.instance]
        if missing:
            return UapValidationError(json_path([*where, missing[0]]), "is required")
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
        extra = sorted(k for k in err.instance if k not in allowed)
        if extra:
            return UapValidationError(
                json_path([*where, extra[0]]),
                f"is not a field of this object (allowed: {', '.join(allowed)})",
            )
    if err.validator == "type":
        return UapValidationError(
            json_path(where), f"must be {err.validator_value}, not {json_type(err.instance)}"
        )
    return UapValidationError(json_path(where), err.message)


def validate_request(definition: RequestDefinition, body: Any) -> dict[str, Any]:
    """``body`` checked against a request definition of the UAP schema; the first
    problem (by position in the body) raised as :class:`UapValidationError`."""
    errors = list(_validator(definition).iter_errors(body))
    if errors:
        errors.sort(key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]))
        raise _explain(errors[0])
    assert isinstance(body, dict)
    return dict(body)
