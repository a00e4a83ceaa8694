"""What an agent and its model say to each other, provider-neutral.

Pydantic models because they live in an agent's persistent state (its
conversation, a durable run's recorded steps) and are sealed there with the
rest of it; each model client converts them to and from its provider's shapes
at its edge, the way the protocol codecs do for the bus's envelope.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One call the model asked for. ``arguments`` is the model's JSON text, kept
    as it came (a model may send JSON that does not parse; the tool says so)."""

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a JSON object; ValueError naming what is wrong if not."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments of {self.name} are not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"the arguments of {self.name} are not a JSON object")
        return value


class ChatMessage(BaseModel):
    """One message of a conversation."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)  # an assistant's
    tool_call_id: str | None = None  # a tool result's: the call it answers
    name: str | None = None  # a tool result's: the tool

    @classmethod
    def system(cls, text: str) -> ChatMessage:
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str) -> ChatMessage:
        return cls(role="user", content=text)

    @classmethod
    def tool_result(cls, call: ToolCall, content: str) -> ChatMessage:
        return cls(role="tool", content=content, tool_call_id=call.id, name=call.name)


class Usage(BaseModel):
    """Tokens one model call took."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ModelTurn(BaseModel):
    """A model's answer to one call: a message (text, tool calls or both)."""

    message: ChatMessage
    usage: Usage = Field(default_factory=Usage)
    model: str = ""  # the model that answered, as the provider names it
    finish_reason: str | None = None
    response_id: str | None = None


class ToolSpec(BaseModel):
    """A tool as the model sees it: a name, what it does, its arguments' schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
