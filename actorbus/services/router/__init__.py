"""The router: which protocol each module speaks (spec-only, deterministic
selection on the canonical feature model), scored on ProtocolRouterBench."""

from actorbus.services.router.evaluate import BenchmarkError, evaluate, read_scenarios
from actorbus.services.router.features import FeatureModel, FeatureModelError, load
from actorbus.services.router.selection import Decision, Module, Weights, select

__all__ = [
    "BenchmarkError",
    "Decision",
    "FeatureModel",
    "FeatureModelError",
    "Module",
    "Weights",
    "evaluate",
    "load",
    "read_scenarios",
    "select",
]
