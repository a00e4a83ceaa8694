"""A tool for agents: arithmetic, as an actor anywhere on the bus.

actorbus run examples.calculator:Calculator
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from actorbus import Actor, handler


class Operation(BaseModel):
    op: Literal["add", "subtract", "multiply", "divide"]
    a: float
    b: float


class Calculator(Actor):
    """Does arithmetic on two numbers."""

    @handler
    async def compute(self, operation: Operation) -> float:
        """Apply op to a and b."""
        a, b = operation.a, operation.b
        if operation.op == "add":
            return a + b
        if operation.op == "subtract":
            return a - b
        if operation.op == "multiply":
            return a * b
        return a / b  # a ZeroDivisionError goes back to the model as a readable error
