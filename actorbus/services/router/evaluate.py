"""ProtocolRouterBench: the router's decisions scored against the benchmark's
ground truth.

Figures, overall and per level (L1-L5): scenario accuracy (every module of a
scenario right), module accuracy, macro-F1 over the protocols, and the
confusion matrix (truth x decision). Beside them, leave-one-level-out: the
router's few weights (``selection.Weights``) tuned on four levels by a small
grid and scored on the fifth, so that overfitting shows as a gap.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from actorbus.services.router.evidence import Span
from actorbus.services.router.features import FeatureModel, load
from actorbus.services.router.selection import Decision, Module, Weights, decide_from, module_spans

# The published baselines (scenario %, module %): the paper's routers and the
# released GPT-4o router.
BASELINES = {
    "spec-only router (paper)": (53.5, 71.2),
    "spec+perf router (paper)": (63.3, 81.7),
    "GPT-4o router (released)": (75.0, 86.7),
}
GRID = {
    "issue": (0.0, 0.5, 1.0),
    "scenario": (0.0, 0.25, 0.5),
    "margin": (0.0, 0.5, 1.0),
}


class BenchmarkError(ValueError):
    """The scenarios file is not ProtocolRouterBench's format (it says where)."""


@dataclass(frozen=True)
class Scenario:
    id: str
    level: str
    description: str
    modules: tuple[Module, ...]
    truth: tuple[str, ...]  # the protocol of each module, in order


def read_scenarios(path: str | Path) -> list[Scenario]:
    """The scenarios of a ProtocolRouterBench file; BenchmarkError naming what is
    wrong (and where) if it is not one."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise BenchmarkError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BenchmarkError(f"{path} is not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise BenchmarkError(f"{path}: expected a list of scenarios")
    return [_scenario(s, i) for i, s in enumerate(raw)]


def _scenario(raw: Any, index: int) -> Scenario:
    where = f"scenario #{index + 1}"
    try:
        sid = str(raw["id"])
        where = f"scenario {sid}"
        modules = []
        truth = []
        for n, m in enumerate(raw["module"], 1):
            modules.append(
                Module(
                    id=str(n),
                    name=str(m.get("name", "")),
                    tasks=tuple(str(t) for t in m.get("tasks", ())),
                    issues=tuple(str(t) for t in m.get("potential_issues", ())),
                )
            )
            gt = raw.get("ground_truth", {}).get(str(n), {})
            truth.append(str(gt.get("module_protocol", "")))
        return Scenario(
            sid, sid.split("-", 1)[0], str(raw.get("description", "")), tuple(modules), tuple(truth)
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise BenchmarkError(f"{where}: missing or malformed {exc}") from None


def decide(
    scenarios: Sequence[Scenario],
    model: FeatureModel,
    weights: Weights,
    evidence: Sequence[Sequence[list[Span]]] | None = None,
) -> list[list[Decision]]:
    """Every module's decision (``evidence``: each module's spans, if extracted)."""
    if evidence is None:
        evidence = extract_all(scenarios, model)
    return [
        [decide_from(m, spans, model, weights) for m, spans in zip(s.modules, ev, strict=True)]
        for s, ev in zip(scenarios, evidence, strict=True)
    ]


def extract_all(scenarios: Sequence[Scenario], model: FeatureModel) -> list[list[list[Span]]]:
    return [[module_spans(model, m, s.description) for m in s.modules] for s in scenarios]


def score(
    scenarios: Sequence[Scenario], decisions: Sequence[Sequence[Decision]], protocols: Sequence[str]
) -> dict[str, Any]:
    """Scenario and module accuracy (%), macro-F1, the confusion matrix."""
    pairs = [
        (t, d.selected_protocol)
        for s, ds in zip(scenarios, decisions, strict=True)
        for t, d in zip(s.truth, ds, strict=True)
    ]
    right_scenarios = sum(
        all(t == d.selected_protocol for t, d in zip(s.truth, ds, strict=True))
        for s, ds in zip(scenarios, decisions, strict=True)
    )
    confusion = {t: {p: 0 for p in protocols} for t in protocols}
    for t, p in pairs:
        if t in confusion:
            confusion[t][p] += 1
    f1s = []
    for p in protocols:
        tp = confusion[p][p]
        fp = sum(confusion[t][p] for t in protocols if t != p)
        fn = sum(confusion[p][q] for q in protocols if q != p)
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return {
        "scenarios": len(scenarios),
        "modules": len(pairs),
        "scenario_accuracy": 100.0 * right_scenarios / max(1, len(scenarios)),
        "module_accuracy": 100.0 * sum(t == p for t, p in pairs) / max(1, len(pairs)),
        "macro_f1": sum(f1s) / len(f1s),
        "confusion": confusion,
    }


def _grid() -> list[Weights]:
    keys = list(GRID)
    return [
        replace(Weights(), **dict(zip(keys, v, strict=True)))
        for v in itertools.product(*GRID.values())
    ]


def leave_one_level_out(
    scenarios: Sequence[Scenario],
    model: FeatureModel,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Tune the weights on four levels (best module accuracy, then scenario
    accuracy; the grid's order breaks ties), score the fifth; every level once."""
    levels = sorted({s.level for s in scenarios})
    grid = _grid()
    evidence = extract_all(scenarios, model)  # the same whatever the weights
    cache: dict[int, list[list[Decision]]] = {}

    def decisions_for(i: int) -> list[list[Decision]]:
        if i not in cache:
            cache[i] = decide(scenarios, model, grid[i], evidence)
        return cache[i]

    folds = {}
    held_pairs: list[tuple[Scenario, list[Decision]]] = []
    for level in levels:
        if progress:
            progress(f"leave out {level}")
        train = [i for i, s in enumerate(scenarios) if s.level != level]
        test = [i for i, s in enumerate(scenarios) if s.level == level]
        best_i, best_key = 0, (-1.0, -1.0)
        for g in range(len(grid)):
            ds = decisions_for(g)
            r = score([scenarios[i] for i in train], [ds[i] for i in train], model.protocols)
            key = (r["module_accuracy"], r["scenario_accuracy"])
            if key > best_key:
                best_i, best_key = g, key
        ds = decisions_for(best_i)
        held = score([scenarios[i] for i in test], [ds[i] for i in test], model.protocols)
        folds[level] = {
            "weights": asdict(grid[best_i]),
            "train_module_accuracy": best_key[0],
            "held_out": {k: v for k, v in held.items() if k != "confusion"},
        }
        held_pairs += [(scenarios[i], ds[i]) for i in test]
    pooled = score([s for s, _ in held_pairs], [d for _, d in held_pairs], model.protocols)
    return {
        "grid": {k: list(v) for k, v in GRID.items()},
        "folds": folds,
        "pooled": {k: v for k, v in pooled.items() if k != "confusion"},
    }


def evaluate(
    path: str | Path,
    *,
    model: FeatureModel | None = None,
    weights: Weights | None = None,
    lolo: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Everything ``actorbus route eval`` reports, as a JSON-ready dict."""
    model = model or load()
    weights = weights or Weights()
    scenarios = read_scenarios(path)
    if progress:
        progress(f"deciding {sum(len(s.modules) for s in scenarios)} modules")
    out = report(path, scenarios, decide(scenarios, model, weights), model)
    out["weights"] = asdict(weights)
    if lolo:
        out["leave_one_level_out"] = leave_one_level_out(scenarios, model, progress)
    return out


def report(
    path: str | Path,
    scenarios: Sequence[Scenario],
    decisions: Sequence[Sequence[Decision]],
    model: FeatureModel,
) -> dict[str, Any]:
    """The scores of ``decisions`` (however they were made), overall and per
    level, beside the published baselines, with every decision and miss."""
    levels = sorted({s.level for s in scenarios})
    per_level = {}
    for level in levels:
        idx = [i for i, s in enumerate(scenarios) if s.level == level]
        r = score([scenarios[i] for i in idx], [decisions[i] for i in idx], model.protocols)
        per_level[level] = r
    return {
        "file": str(path),
        "overall": score(scenarios, decisions, model.protocols),
        "levels": per_level,
        "baselines": {
            k: {"scenario_accuracy": a, "module_accuracy": b} for k, (a, b) in BASELINES.items()
        },
        "decisions": {
            s.id: [d.record() for d in ds] for s, ds in zip(scenarios, decisions, strict=True)
        },
        "misses": [
            {
                "scenario": s.id,
                "module": m.name,
                "truth": t,
                "selected": d.selected_protocol,
                "decided_by": d.decided_by,
            }
            for s, ds in zip(scenarios, decisions, strict=True)
            for m, t, d in zip(s.modules, s.truth, ds, strict=True)
            if t != d.selected_protocol
        ],
    }
