"""Replies that leave a task open: a question for the person behind the client,
a demand to authenticate, or "still working, I will finish it later".

Any actor may reply one (or yield it as a stream item); the gateway's edges turn
it into their protocol's task states (A2A ``input-required``, ``auth-required``,
``working``; ACP ``awaiting``; MCP an answer naming its task), and the client's
next message naming the task runs the actor again in the same session. The
registry marks an intent whose reply can be one (``Listing.calls``:
``opens_task``), so an agent never offers it to a model as a tool.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from actorbus.actors.messages import remember


class InputRequired(BaseModel):
    """An actor's reply that asks the outside client for more input."""

    __intent__: ClassVar[str] = "gateway.input-required"
    __opens_task__: ClassVar[bool] = True  # the registry says the intent keeps a task open
    message: Any  # what to ask: text, data (any JSON), or bytes


class AuthRequired(BaseModel):
    """An actor's reply saying the client must authenticate before it goes on."""

    __intent__: ClassVar[str] = "gateway.auth-required"
    __opens_task__: ClassVar[bool] = True
    message: Any


class Working(BaseModel):
    """An actor's reply that keeps the task open (``working``): it finishes the
    task later with :class:`GatewayTask`. ``message`` (optional) is the status
    message the client sees meanwhile."""

    __intent__: ClassVar[str] = "gateway.working"
    __opens_task__: ClassVar[bool] = True
    message: Any = None


remember(InputRequired)
remember(AuthRequired)
remember(Working)
