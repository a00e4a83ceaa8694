"""The canonical feature model (``features.json``): the protocols, the six facets,
each capability with what each protocol offers of it and the phrases that state
a need for it, the priority of facets and the fallback order.

Kept as data so that it can be read, argued about and extended without touching
the selection code; :func:`load` checks it and compiles its phrases once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any


class FeatureModelError(ValueError):
    """The feature model is not well formed (it names what is wrong)."""


@dataclass(frozen=True)
class Capability:
    name: str
    facet: str
    means: str
    levels: dict[str, int]  # protocol -> 0 none, 1 possible, 2 native
    phrases: tuple[re.Pattern[str], ...]  # a feature wanted (or, negated, not wanted)
    risks: tuple[re.Pattern[str], ...]  # a problem feared: a need however it is said
    hard: bool  # a protocol without it cannot serve a module that needs it


@dataclass(frozen=True)
class FeatureModel:
    protocols: tuple[str, ...]
    fallback_order: tuple[str, ...]
    priority: tuple[tuple[str, ...], ...]  # stages of facets, most important first
    facets: dict[str, str]
    facet_weights: dict[str, float]  # what a need of each facet counts in the overall fit
    capabilities: dict[str, Capability]
    negator: re.Pattern[str]  # what, just before a phrase, says the need is the opposite
    negator_anywhere: re.Pattern[str]  # a negator in a list's first item, however far back
    negated_items: re.Pattern[str]  # a negator, an item, "or": the next item is negated too


def _compile(phrase: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(rf"(?<![\w-])(?:{phrase})(?![\w])", re.IGNORECASE)
    except re.error as exc:
        raise FeatureModelError(f"{where}: bad phrase {phrase!r}: {exc}") from None


def parse(raw: dict[str, Any]) -> FeatureModel:
    """A checked feature model from its JSON form; FeatureModelError if not one."""
    try:
        protocols = tuple(raw["protocols"])
        facets = dict(raw["facets"])
        caps = {}
        for name, c in raw["capabilities"].items():
            if c["facet"] not in facets:
                raise FeatureModelError(f"capability {name}: unknown facet {c['facet']!r}")
            levels = {p: int(c["levels"][p]) for p in protocols}
            phrases = tuple(_compile(ph, f"capability {name}") for ph in c["phrases"])
            risks = tuple(_compile(ph, f"capability {name}") for ph in c.get("risks", ()))
            hard = bool(c.get("hard", False))
            caps[name] = Capability(name, c["facet"], c["means"], levels, phrases, risks, hard)
        priority = tuple(tuple(stage) for stage in raw["priority"])
        fallback = tuple(raw["fallback_order"])
        negators = "|".join(raw["negators"])
    except KeyError as exc:
        raise FeatureModelError(f"the feature model lacks {exc}") from None
    unknown = {f for stage in priority for f in stage} - set(facets)
    if unknown:
        raise FeatureModelError(f"priority names unknown facets: {sorted(unknown)}")
    if sorted(fallback) != sorted(protocols):
        raise FeatureModelError("fallback_order must name every protocol once")
    # up to two words between the negator and the phrase, a hyphenated compound one word
    negator = re.compile(rf"(?:^|\W)(?:{negators})\W*(?:[\w'-]+\W+){{0,2}}$", re.IGNORECASE)
    negator_anywhere = re.compile(rf"(?:^|\W)(?:{negators})(?:\W|$)", re.IGNORECASE)
    # "without end-to-end encryption or streaming": a negated item, then the next
    negated_items = re.compile(
        rf"(?:^|\W)(?:{negators})\W+(?:[\w'-]+\W+){{1,5}}(?:and|or|nor|and/or)\W+$",
        re.IGNORECASE,
    )
    weights = {f: float(raw.get("facet_weights", {}).get(f, 1.0)) for f in facets}
    return FeatureModel(
        protocols,
        fallback,
        priority,
        facets,
        weights,
        caps,
        negator,
        negator_anywhere,
        negated_items,
    )


@cache
def load(path: str | None = None) -> FeatureModel:
    """The feature model shipped with actorbus, or the one at ``path``."""
    if path is None:
        text = resources.files(__package__).joinpath("features.json").read_text()
    else:
        text = Path(path).read_text()
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise FeatureModelError(f"the feature model is not JSON: {exc}") from None
    return parse(raw)
