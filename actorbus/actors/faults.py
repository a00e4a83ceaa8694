"""Named points inside a durable turn (and an agent's run, which is one), where a
fault test stops the process.

A turn that commits state runs: the handler, the state write (with the turn's
sends and the message's position), the sends, the ack. Exactly-once is a claim
about a process dying between any two of those, so the tests kill a host
process for real (SIGKILL) at each point: they install a hook in that process
(``tests/_actors.py``) that is called with the point's name. Without a hook a
point costs one global lookup.
"""

from __future__ import annotations

from collections.abc import Callable

BEFORE_STATE_WRITE = "before-state-write"
AFTER_STATE_WRITE = "after-state-write"  # the state written, the sends not yet out
AFTER_SENDS = "after-sends"  # the sends out, the message not yet acked
MODEL_ANSWERED = "model-answered"  # an agent's model answer recorded, its tools not called
TOOLS_BEGUN = "tools-begun"  # the tool calls recorded as begun, not made yet
TOOLS_ANSWERED = "tools-answered"  # the tools' results recorded, the model not asked again

_hook: Callable[[str], None] | None = None


def reached(point: str) -> None:
    if _hook is not None:
        _hook(point)


def install(hook: Callable[[str], None] | None) -> None:
    """Call ``hook(point)`` at every point from now on (None: no more)."""
    global _hook
    _hook = hook
