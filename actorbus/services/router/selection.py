"""Protocol selection, spec-only and deterministic (ProtocolBench appendix G.9):
one protocol per module, with the evidence and a rationale.

The pipeline, for each module:

1. **Evidence**: the phrases of the module's name, tasks and feared issues (and,
   weighted less, of the scenario's description) that state a need for a
   capability of the feature model, or say a capability is not wanted
   (``evidence.extract``).
2. **Needs**: each capability's need, the weighted sum of its spans (a negated
   one counts against), bounded so that repetition cannot outvote substance.
   The scenario's description speaks of every module, so it counts only in the
   narrative tie-break.
3. **Hard constraints**: a capability marked hard (a DID identity, end-to-end
   confidentiality) that the module clearly needs removes every protocol that
   lacks it.
4. **Fit**: each remaining protocol scored on the module's own needs (need x what
   the protocol offers of it, x the facet's weight: identity and confidentiality
   count most, then operation semantics and governance, then interaction); a
   protocol ahead of the rest by more than the margin is chosen.
5. **Priority** (a tie): the facets in their fixed order (identity and
   confidentiality; operation semantics and governance; interaction and
   long-running work), each stage keeping the best of the tied.
6. **Narrative, then fallback**: still tied, the needs of the module and of its
   scenario's description decide; then the model's stable fallback order.

The same input gives the same decision record; nothing is random, nothing is
looked up, and the rationale names capabilities and quotes evidence only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actorbus.services.router.evidence import Span, extract
from actorbus.services.router.features import FeatureModel, load

_DIGITS = re.compile(r"\d")


@dataclass(frozen=True)
class Weights:
    """How much each source of evidence counts, and what a clear lead is."""

    name: float = 1.0
    task: float = 1.0
    issue: float = 0.5
    scenario: float = 0.25
    margin: float = 0.5  # a stage's leader must be ahead by more than this
    cap: float = 3.0  # most any one capability's need can count
    hard_need: float = 1.0  # the need at which a hard capability prunes

    def of(self, source: str) -> float:
        return float(getattr(self, source))


@dataclass(frozen=True)
class Module:
    """One module of a scenario, as the router reads it."""

    id: str
    name: str
    tasks: tuple[str, ...] = ()
    issues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """The decision record of one module."""

    module_id: str
    selected_protocol: str
    evidence_spans: list[str]
    rationale: str
    needs: dict[str, float] = field(default_factory=dict)
    decided_by: str = ""  # the facet stage, "narrative" or "fallback"

    def record(self) -> dict[str, Any]:
        """The fixed JSON the appendix specifies."""
        return {
            "module_id": self.module_id,
            "selected_protocol": self.selected_protocol,
            "evidence_spans": self.evidence_spans,
            "rationale": self.rationale,
        }


def module_spans(model: FeatureModel, module: Module, scenario: str) -> list[Span]:
    spans = extract(model, module.name, "name")
    for task in module.tasks:
        spans += extract(model, task, "task")
    for issue in module.issues:
        spans += extract(model, issue, "issue")
    if scenario:
        spans += extract(model, scenario, "scenario")
    return spans


def needs_of(spans: Iterable[Span], weights: Weights) -> dict[str, float]:
    raw: dict[str, float] = {}
    for s in spans:
        raw[s.capability] = raw.get(s.capability, 0.0) + (-1 if s.negated else 1) * weights.of(
            s.source
        )
    return {c: max(-weights.cap, min(weights.cap, v)) for c, v in raw.items() if v}


def _score(
    model: FeatureModel, needs: Mapping[str, float], protocol: str, facets: Sequence[str] | None
) -> float:
    """How well ``protocol`` serves ``needs`` (only those of ``facets``, if given),
    each facet weighted as the model says."""
    total = 0.0
    for name, need in needs.items():
        cap = model.capabilities[name]
        if facets is None or cap.facet in facets:
            total += need * cap.levels[protocol] * model.facet_weights[cap.facet]
    return total


def _leaders(scores: Mapping[str, float], margin: float) -> list[str]:
    best = max(scores.values())
    return [p for p, v in scores.items() if v >= best - margin]


def select(
    module: Module,
    scenario: str = "",
    *,
    model: FeatureModel | None = None,
    weights: Weights | None = None,
) -> Decision:
    """The protocol for ``module`` of a scenario described by ``scenario``."""
    model = model or load()
    return decide_from(module, module_spans(model, module, scenario), model, weights or Weights())


def decide_from(
    module: Module, spans: list[Span], model: FeatureModel, weights: Weights
) -> Decision:
    """``select`` on evidence already extracted (the evaluator extracts it once
    and decides under many weights)."""
    own = needs_of((s for s in spans if s.source != "scenario"), weights)
    candidates = admissible(model, own, weights)
    if own:  # the module's own needs, all facets: a clear best fit decides
        candidates = _leaders({p: _score(model, own, p, None) for p in candidates}, weights.margin)
        if len(candidates) == 1:
            return _decision(model, module, candidates[0], spans, own, "fit")
    for stage in model.priority:  # a tie: the facets in their fixed order
        if not any(model.capabilities[c].facet in stage for c in own):
            continue
        scores = {p: _score(model, own, p, stage) for p in candidates}
        candidates = _leaders(scores, 0.0)
        if len(candidates) == 1:
            return _decision(model, module, candidates[0], spans, own, " and ".join(stage))
    if len(candidates) > 1:  # the narrative: the module's needs and its scenario's
        every = needs_of(spans, weights)
        candidates = _leaders({p: _score(model, every, p, None) for p in candidates}, 0.0)
        if len(candidates) == 1:
            return _decision(model, module, candidates[0], spans, every, "narrative")
    chosen = next(p for p in model.fallback_order if p in candidates)
    return _decision(model, module, chosen, spans, own, "fallback")


def admissible(model: FeatureModel, needs: Mapping[str, float], weights: Weights) -> list[str]:
    """The protocols a module with these (own) needs may get: none that lacks a
    hard capability it clearly needs (all of them, if every one lacks some)."""
    return [
        p
        for p in model.protocols
        if not any(
            model.capabilities[c].hard
            and need >= weights.hard_need
            and model.capabilities[c].levels[p] == 0
            for c, need in needs.items()
        )
    ] or list(model.protocols)


def _decision(
    model: FeatureModel,
    module: Module,
    protocol: str,
    spans: list[Span],
    needs: dict[str, float],
    decided_by: str,
) -> Decision:
    evidence = []
    for s in spans:
        if s.source != "scenario" and s.text not in evidence:
            evidence.append(s.text)
    return Decision(
        module_id=module.id,
        selected_protocol=protocol,
        evidence_spans=evidence,
        rationale=_rationale(model, protocol, spans, needs, decided_by),
        needs=needs,
        decided_by=decided_by,
    )


def _rationale(
    model: FeatureModel,
    protocol: str,
    spans: list[Span],
    needs: dict[str, float],
    decided_by: str,
) -> str:
    """Why, in words: the needs that set ``protocol`` ahead of the runner-up,
    quoted from the evidence, and what each protocol offers of them. No numbers
    (evidence with digits is not quoted)."""
    if decided_by == "fallback":
        return (
            f"No capability need told the protocols apart; {protocol} is the first of the "
            "stable fallback order."
        )
    facets = None if decided_by in ("narrative", "fit") else decided_by.split(" and ")
    others = [p for p in model.protocols if p != protocol]
    runner_up = max(others, key=lambda p: _score(model, needs, p, facets))

    def advantage(name: str) -> float:
        cap = model.capabilities[name]
        gap = cap.levels[protocol] - cap.levels[runner_up]
        return needs[name] * gap * model.facet_weights[cap.facet]

    reasons = []
    for name in sorted(needs, key=advantage, reverse=True):
        cap = model.capabilities[name]
        if advantage(name) <= 0 or (facets is not None and cap.facet not in facets):
            continue
        quoted = [
            f"'{s.text}'"
            for s in spans
            if s.capability == name and s.source != "scenario" and not _DIGITS.search(s.text)
        ]
        said = f" ({', '.join(dict.fromkeys(quoted))})" if quoted else ""
        offer = ("lacks it", "can provide it", "provides it natively")
        verb = "needs" if needs[name] > 0 else "avoids"
        reasons.append(
            f"the module {verb} {cap.means}{said}: {protocol} "
            f"{offer[cap.levels[protocol]]}, {runner_up} {offer[cap.levels[runner_up]]}"
        )
    where = {"fit": "the best fit to every need", "narrative": "the narrative as a whole"}.get(
        decided_by, f"the {decided_by.replace('_', ' ')} facets"
    )
    if not reasons:
        return f"Decided on {where}; {protocol} ahead of {runner_up}."
    return f"Decided on {where}, ahead of {runner_up}: " + "; ".join(reasons[:3]) + "."
