"""The messages of the stacks that take pydantic models (actorbus, FastStream,
AutoGen): one definition, so each stack carries the same payload."""

from __future__ import annotations

from pydantic import BaseModel


class Question(BaseModel):
    text: str


class Answer(BaseModel):
    text: str


class Pull(BaseModel):
    """A worker's pull: the question it answered (None: its first) and the answer."""

    worker: int
    question: int | None = None
    answer: str | None = None


class Next(BaseModel):
    """The coordinator's reply: the next question (None: the queue is empty)."""

    question: int | None = None
    text: str | None = None  # the question as it crosses the edge (actorbus with a codec)
