"""``@handler``: typed message handlers, resolved once per class.

A handler's first parameter after ``self`` says which messages it takes: a
pydantic model (dispatched by the model's intent), ``bytes`` or ``dict`` (raw
payloads, intents ``bytes``/``dict`` unless ``intent=`` says otherwise). An
``async def`` returns the reply; an ``async def`` that ``yield``s streams it.
``topic=`` additionally subscribes the handler to a pub/sub topic pattern.
``durable=``/``idempotent=`` override the class's delivery defaults for this
handler's intent (see ``Actor.durable``): a sender that knows the type sends that
intent durably without being told, and the handler's queue skips keys already handled.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel

from actorbus.actors.messages import INTENT_BYTES, INTENT_DICT, INTENT_TEXT, remember

ArgKind = Literal["model", "bytes", "dict", "text", "any"]
F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__actorbus_handler__"


@dataclass(frozen=True, slots=True)
class HandlerOptions:
    intent: str | None = None
    topic: str | None = None
    durable: bool | None = None  # None: the class's default
    idempotent: bool | None = None


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """A resolved handler: what it accepts and how it replies."""

    method: str
    intent: str
    kind: ArgKind
    model: type[BaseModel] | None
    streaming: bool
    topic: str | None
    durable: bool = False
    idempotent: bool = False
    reply_model: type[BaseModel] | None = None  # a one-shot handler's declared reply
    opens_task: bool = False  # may reply a model marked ``__opens_task__`` (gateway tasks)
    # what the handler does, for callers that choose by it (a model offered it as a
    # tool, an MCP client, an A2A card's skill): its docstring's first paragraph
    description: str = ""


@overload
def handler(fn: F) -> F: ...
@overload
def handler(
    *,
    intent: str | None = None,
    topic: str | None = None,
    durable: bool | None = None,
    idempotent: bool | None = None,
) -> Callable[[F], F]: ...


def handler(
    fn: F | None = None,
    *,
    intent: str | None = None,
    topic: str | None = None,
    durable: bool | None = None,
    idempotent: bool | None = None,
) -> F | Callable[[F], F]:
    """Mark an ``async def`` method as a message handler."""

    def mark(f: F) -> F:
        if not (inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)):
            raise TypeError(f"@handler {f.__qualname__} must be 'async def'")
        if intent is not None and (not intent or intent.startswith("$")):
            raise ValueError(f"@handler {f.__qualname__}: intent {intent!r} is reserved or empty")
        opts = HandlerOptions(intent=intent, topic=topic, durable=durable, idempotent=idempotent)
        setattr(f, _MARK, opts)
        return f

    return mark(fn) if fn is not None else mark


def resolve_handlers(cls: type) -> dict[str, HandlerSpec]:
    """Collect the handlers of a class (and its bases) into an intent table."""
    table: dict[str, HandlerSpec] = {}
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            opts = getattr(attr, _MARK, None)
            if not isinstance(opts, HandlerOptions) or name in seen:
                continue
            seen.add(name)  # an override in a subclass wins over the base
            spec = _spec_for(cls, name, attr, opts)
            other = table.get(spec.intent)
            if other is not None:
                raise TypeError(
                    f"{cls.__qualname__}: handlers {other.method!r} and {name!r} "
                    f"both take intent {spec.intent!r}"
                )
            table[spec.intent] = spec
    return table


def _spec_for(cls: type, name: str, fn: Callable[..., Any], opts: HandlerOptions) -> HandlerSpec:
    params = [p for p in inspect.signature(fn).parameters.values()][1:]
    if len(params) != 1:
        raise TypeError(
            f"{cls.__qualname__}.{name}: a handler takes exactly one message parameter after self"
        )
    hints = typing.get_type_hints(fn)
    ann = hints.get(params[0].name, Any)
    streaming = inspect.isasyncgenfunction(fn)
    kind: ArgKind
    model: type[BaseModel] | None = None
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        kind, model = "model", ann
        intent = opts.intent or remember(ann)
    elif ann is bytes:
        kind, intent = "bytes", opts.intent or INTENT_BYTES
    elif ann is dict or typing.get_origin(ann) is dict:
        kind, intent = "dict", opts.intent or INTENT_DICT
    elif ann is str:
        kind, intent = "text", opts.intent or INTENT_TEXT
    elif ann is Any and opts.intent:
        kind, intent = "any", opts.intent
    else:
        raise TypeError(
            f"{cls.__qualname__}.{name}: annotate the message parameter with a pydantic "
            f"model, bytes, dict or str (or give intent= for an untyped one), not {ann!r}"
        )
    ret = hints.get("return")
    if streaming and typing.get_args(ret):
        ret = typing.get_args(ret)[0]  # AsyncIterator[Item] -> Item
    reply_model: type[BaseModel] | None = None
    if isinstance(ret, type) and issubclass(ret, BaseModel):
        remember(ret)
        reply_model = None if streaming else ret
    opens_task = any(getattr(t, "__opens_task__", False) for t in (ret, *typing.get_args(ret)))
    durable = opts.durable if opts.durable is not None else bool(getattr(cls, "durable", False))
    idempotent = opts.idempotent
    if idempotent is None:
        idempotent = bool(getattr(cls, "idempotent", False))
    return HandlerSpec(
        name,
        intent,
        kind,
        model,
        streaming,
        opts.topic,
        durable,
        idempotent,
        reply_model,
        opens_task,
        described(fn),
    )


def described(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring as one line ("" without one);
    reST's double backquotes become Markdown's single ones, which the clients
    reading it (models, MCP hosts, A2A directories) render."""
    doc = inspect.getdoc(fn) or ""
    first = doc.split("\n\n", 1)[0]
    return " ".join(first.split()).replace("``", "`")
