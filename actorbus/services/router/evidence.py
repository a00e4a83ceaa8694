"""Evidence extraction: the phrases of a module's text that state a need for a
capability of the feature model (or, after a negator such as "avoid" or
"without", that state the module does *not* want it).

Deterministic and literal: a span is a piece of the input, found by the model's
phrases; nothing is inferred that the text does not say.
"""

from __future__ import annotations

from dataclasses import dataclass

from actorbus.services.router.features import FeatureModel


@dataclass(frozen=True)
class Span:
    capability: str
    text: str  # the words as the input has them
    source: str  # "name", "task", "issue" or "scenario"
    negated: bool  # said as something to avoid


def extract(model: FeatureModel, text: str, source: str) -> list[Span]:
    """Every capability phrase in ``text`` (one span per capability and place)."""
    spans = []
    for cap in model.capabilities.values():
        taken: list[tuple[int, int]] = []
        for pattern, is_risk in [(p, True) for p in cap.risks] + [(p, False) for p in cap.phrases]:
            for m in pattern.finditer(text):
                if any(a < m.end() and m.start() < b for a, b in taken):
                    continue  # the same words found by a longer phrase already
                taken.append((m.start(), m.end()))
                # an issue is a problem feared: "X without backpressure" needs it
                negated = not is_risk and source != "issue" and _negated(model, text, m.start())
                spans.append(Span(cap.name, m.group(0), source, negated))
    return spans


def _negated(model: FeatureModel, text: str, at: int) -> bool:
    """Whether the words just before ``at``, in the same clause, say "not this"
    ("avoid", "without", a glued "non-")."""
    if text[max(0, at - 4) : at].lower() == "non-":
        return True
    before = text[max(0, at - 40) : at]
    clause = before.rsplit(";", 1)[-1].rsplit(".", 1)[-1].rsplit(",", 1)[-1]
    return bool(model.negator.search(clause))
