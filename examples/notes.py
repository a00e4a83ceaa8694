"""A tool for agents with an effect: notes kept in the actor's state, once each.

A note sent again with the same idempotency key (an agent's run resumed after a
crash repeats the call) is not kept twice.

    actorbus run examples.notes:Notes
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from actorbus import Actor, handler


class Note(BaseModel):
    text: str


class Notebook(BaseModel):
    notes: list[str] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)  # idempotency keys already served


class Notes(Actor):
    """Keeps notes."""

    keyed = True
    state: Notebook

    @handler
    async def keep(self, note: Note) -> str:
        """Keep a note."""
        key = self.envelope.context.idempotency_key
        if key is None or key not in self.state.keys:
            self.state.notes.append(note.text)
            if key is not None:
                self.state.keys = [*self.state.keys[-999:], key]
        return f"{len(self.state.notes)} note(s) kept"

    @handler(intent="list-notes")
    async def all_notes(self, _: str) -> list[str]:
        """Every note kept."""
        return self.state.notes
