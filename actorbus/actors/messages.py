"""Typed messages: how a Python value becomes (intent, content) and back.

A pydantic model's intent is its ``__intent__`` class attribute, or else its class
name. Every model that appears in a handler signature or is sent is remembered
by intent, so a reply arriving as plain data is rebuilt as the model the caller
knows, without the caller having to say which.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from actorbus.codecs.errors import ValidationFailedError
from actorbus.codecs.wire import validation_summary

# Reserved intents (user intents never start with '$').
INTENT_ERROR = "$error"
INTENT_END = "$end"
INTENT_ITEMS = "$items"  # a stream frame of several items: [[intent, content], ...]
INTENT_CANCEL = "$cancel"
INTENT_NONE = "$none"
INTENT_BYTES = "bytes"
INTENT_DICT = "dict"
INTENT_TEXT = "text"
INTENT_DATA = "data"

M = TypeVar("M", bound=BaseModel)

log = logging.getLogger("actorbus.messages")

_models: dict[str, type[BaseModel]] = {}
_lock = threading.Lock()


_intents: dict[type[BaseModel], str] = {}


def intent_of(model: type[BaseModel]) -> str:
    explicit = model.__dict__.get("__intent__")
    return explicit if isinstance(explicit, str) else model.__name__


_ambiguous: set[str] = set()


def remember(model: type[BaseModel]) -> str:
    """The model's intent; the model is remembered so replies can be rebuilt as it.

    Two different models with one intent (say, two classes named ``Answer``) make
    the intent ambiguous: replies of that intent then come back as plain data
    unless the caller passes ``returns=``, rather than as the wrong model.
    """
    intent = _intents.get(model)
    if intent is None:
        intent = intent_of(model)
        with _lock:
            other = _models.get(intent)
            if other is not None and other is not model and intent not in _ambiguous:
                _ambiguous.add(intent)
                log.warning(
                    "intent %r is used by %s.%s and %s.%s; replies of this intent are "
                    "returned as plain data unless ask(returns=...) is given "
                    "(set __intent__ on the models to tell them apart)",
                    intent,
                    other.__module__,
                    other.__qualname__,
                    model.__module__,
                    model.__qualname__,
                )
            _models[intent] = model
            _intents[model] = intent
    return intent


def known_model(intent: str) -> type[BaseModel] | None:
    return None if intent in _ambiguous else _models.get(intent)


def to_content(value: Any, intent: str | None = None) -> tuple[str, Any]:
    """A value to send -> (intent, plain-data content)."""
    cls = type(value)
    known = _intents.get(cls)  # a model sent before: no isinstance() through pydantic's ABC
    if known is not None:
        return intent or known, cls.__pydantic_serializer__.to_python(value)
    if isinstance(value, BaseModel):
        # The serializer itself: model_dump() is the same call behind argument handling.
        return intent or remember(cls), cls.__pydantic_serializer__.to_python(value)
    if value is None:
        return intent or INTENT_NONE, None
    if isinstance(value, bytes | bytearray | memoryview):
        return intent or INTENT_BYTES, bytes(value)
    if isinstance(value, dict):
        return intent or INTENT_DICT, value
    if isinstance(value, str):
        return intent or INTENT_TEXT, value
    return intent or INTENT_DATA, value


def from_content(intent: str, content: Any, returns: type[Any] | None = None) -> Any:
    """Plain-data content -> the value a caller gets (a model where one is known)."""
    model = returns if returns is not None else known_model(intent)
    if model is None or not (isinstance(model, type) and issubclass(model, BaseModel)):
        return content
    return validate(model, content, intent)


def validate(model: type[M], content: Any, intent: str) -> M:
    try:
        # The validator itself: model_validate() is the same call behind argument handling.
        return model.__pydantic_validator__.validate_python(content)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise ValidationFailedError(
            f"payload of intent {intent!r} does not match {model.__name__}: "
            f"{validation_summary(exc)}"
        ) from exc
