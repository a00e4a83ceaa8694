"""Tools an agent offers its model, and plain Python functions as tools.

A tool is a :class:`~actorbus.agents.messages.ToolSpec` (what the model sees)
and a call. What a call returns goes back to the model as the tool's result
text; what it raises goes back too, as a result the model can read and act on
(``error: ...``), never as a failure of the agent's turn. A call is cancelled at
its tool's ``timeout``.

Each call carries a :class:`ToolContext` whose ``idempotency_key`` is made of
the agent's run and the step: a run resumed after a crash calls an unfinished
tool again with the same key, so a tool with effects can refuse the repeat
(actor tools pass it on as the message's idempotency key).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from actorbus.agents.messages import ToolSpec

_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


@dataclass(frozen=True)
class ToolContext:
    """What a tool call knows besides its arguments."""

    idempotency_key: str  # "<agent address>:<run>:<step>:<call>": the same on a resumed run
    run_id: str
    agent: Any = None  # the calling Agent actor (bus tools send through it)


@runtime_checkable
class Tool(Protocol):
    """Anything an agent can offer its model."""

    @property
    def spec(self) -> ToolSpec: ...

    @property
    def timeout(self) -> float | None:
        """Seconds one call may take; None: the agent's ``tool_timeout``."""
        ...

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Run the tool; the result is shown to the model (see :func:`result_text`)."""
        ...


def tool_name(text: str) -> str:
    """A name every provider accepts (letters, digits, ``_`` and ``-``, 64 at most)."""
    return _NAME.sub("_", text).strip("_")[:64] or "tool"


def result_text(value: Any) -> str:
    """A tool's result as the text the model reads: text as it is, models and
    other values as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str)


class FunctionTool:
    """A Python function (async or not) as a tool; made by :func:`tool`.

    The arguments' JSON schema comes from the signature's type hints (pydantic
    validates them, and a mismatch goes back to the model naming the field), the
    description from the docstring. A parameter annotated :class:`ToolContext`
    receives the call's context and is not shown to the model. A plain function
    runs in a worker thread so it cannot stall the agent's event loop."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        approval: bool = False,
    ) -> None:
        self.fn = fn
        self.timeout = timeout
        self.needs_approval = approval  # a person approves each call (the run pauses)
        hints = typing.get_type_hints(fn)
        fields: dict[str, Any] = {}
        self._context_param: str | None = None
        for param in inspect.signature(fn).parameters.values():
            ann = hints.get(param.name, Any)
            if ann is ToolContext:
                self._context_param = param.name
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (ann, default)
        self.arguments: type[BaseModel] = create_model(
            f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        doc = inspect.getdoc(fn) or ""
        self.spec = ToolSpec(
            name=tool_name(name or fn.__name__),
            description=description if description is not None else doc.split("\n\n")[0],
            parameters=self.arguments.model_json_schema(),
        )

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        try:
            parsed = self.arguments.model_validate(arguments)
        except ValidationError as exc:
            raise ValueError(_validation_text(self.spec.name, exc)) from None
        kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = context
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        return await asyncio.to_thread(functools.partial(self.fn, **kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The function itself, so a decorated function can still be called."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.spec.name}>"


def _validation_text(name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
    )
    return f"invalid arguments for {name}: {problems}"


@overload
def tool(fn: Callable[..., Awaitable[Any]] | Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    approval: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    approval: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a function a tool: ``@tool`` or ``@tool(name=..., timeout=...)``;
    ``approval=True``: a person approves each call before it runs.

    ::

        @tool
        async def weather(city: str, unit: Literal["C", "F"] = "C") -> str:
            \"\"\"The weather in a city now.\"\"\"
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "timeout": timeout,
        "approval": approval,
    }
    if fn is not None:
        return FunctionTool(fn, **options)
    return lambda f: FunctionTool(f, **options)
