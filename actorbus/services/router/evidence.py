"""Evidence extraction: the phrases of a module's text that state a need for a
capability of the feature model (or, after a negator such as "avoid" or
"without", that state the module does *not* want it).

Deterministic and literal: a span is a piece of the input, found by the model's
phrases; nothing is inferred that the text does not say.
"""

from __future__ import annotations

import re
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
                negated = (
                    not is_risk and source != "issue" and _negated(model, text, m.start(), m.end())
                )
                spans.append(Span(cap.name, m.group(0), source, negated))
    return spans


_ITEM_WORDS = 5  # an earlier item of a list is short: "without end-to-end encryption"
_CONNECTOR = r"(?:and|or|nor|and/or)"
_NEXT_ITEM = re.compile(r"^\W*$")  # the phrase right after a comma: an item, if a list goes on
# the list's last item: "..., sessions or streaming" (an item or two, then the connector)
_LAST_ITEM = re.compile(rf"^\W*(?:[\w'-]+\W+){{0,3}}?{_CONNECTOR}\W+$", re.IGNORECASE)
_LIST_GOES_ON = re.compile(rf"^[^.;,]{{0,30}},|^\W*(?:\w+\W+){{0,2}}?{_CONNECTOR}\b", re.IGNORECASE)


def _negated(model: FeatureModel, text: str, at: int, end: int) -> bool:
    """Whether the words just before ``at``, in the same clause, say "not this"
    ("avoid", "without", "neither ... nor", a glued "non-"). A negation carries
    over the items of a list: in "without encryption, sessions, or streaming"
    none of the three is wanted, while in "no caching, streaming matters" the
    streaming is."""
    if text[max(0, at - 4) : at].lower() == "non-":
        return True
    before = text[max(0, at - 160) : at]
    parts = before.rsplit(";", 1)[-1].rsplit(".", 1)[-1].split(",")
    own = parts[-1]
    if model.negator.search(own) or model.negated_items.search(own):
        return True
    if len(parts) == 1:
        return False
    last_item = bool(_LAST_ITEM.match(own))
    if not last_item and not (_NEXT_ITEM.match(own) and _LIST_GOES_ON.match(text[end : end + 60])):
        return False  # "no caching, streaming matters": not an item of that list
    for part in reversed(parts[:-1]):
        words = part.split()
        if len(words) > _ITEM_WORDS:
            return bool(model.negator.search(part))  # where the list begins
        if model.negator_anywhere.search(part):
            return True
    return False
