"""Protocol selection by a model, with the spec-only router as its floor.

The spec-only router (``services/router/selection.py``) reads requirements
through the phrases of its feature model: wording it has no phrase for gives it
no evidence. A model reads any wording. :class:`ModelRouter` asks one (through
the agent layer's :class:`~actorbus.agents.model.ModelClient`, at temperature 0
from :meth:`ModelRouter.from_env`) to pick one protocol per module, given the
same feature model the spec-only router decides by (what each protocol offers
of each capability, and which capabilities are hard), and keeps the model to
it:

- the answer is structured output (:class:`ProtocolChoice`); a protocol the
  feature model does not name, or one that lacks a hard capability the module
  clearly needs (by the spec-only router's own reading), is refused;
- its evidence is kept only where it quotes the module's text;
- whenever the model cannot answer (an error after the SDK's retries, a
  timeout, an answer that is not a ``ProtocolChoice``) or is refused, the
  decision is the spec-only router's, and ``decided_by`` says why.

So a deployment with a model routes at least as well as one without, and one
without a model loses nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from pydantic import BaseModel, Field

from actorbus.agents.from_env import model_from_env
from actorbus.agents.messages import ChatMessage
from actorbus.agents.model import ModelClient, structured
from actorbus.codecs.errors import ModelError
from actorbus.services.router.evaluate import Scenario
from actorbus.services.router.features import FeatureModel, load
from actorbus.services.router.selection import (
    Decision,
    Module,
    Weights,
    admissible,
    decide_from,
    module_spans,
    needs_of,
)

_LEVELS = ("none", "possible", "native")
GIVE_UP_AFTER = 3  # failed calls in a row after which decide() stops asking
_RATIONALE_CHARS = 600


class ProtocolChoice(BaseModel):
    """What the model answers for one module."""

    protocol: str = Field(description="exactly one of the protocols named")
    evidence: list[str] = Field(
        default_factory=list, description="short phrases quoted verbatim from the module's text"
    )
    rationale: str = Field(description="why, in one or two sentences")


class ModelRouter:
    """Picks each module's protocol with a model; the spec-only decision when the
    model cannot, or picks what the module's hard needs rule out."""

    def __init__(
        self,
        client: ModelClient,
        *,
        features: FeatureModel | None = None,
        weights: Weights | None = None,
    ) -> None:
        self.client = client
        self.features = features or load()
        self.weights = weights or Weights()
        self._instructions = instructions(self.features)

    @classmethod
    def from_env(
        cls,
        model: str | None = None,
        *,
        features: FeatureModel | None = None,
        weights: Weights | None = None,
    ) -> ModelRouter:
        """A router on the model the environment configures (``model_from_env``),
        at temperature 0: the same module gets the same answer."""
        client = model_from_env(model, temperature=0.0)
        return cls(client, features=features, weights=weights)

    async def select(self, module: Module, scenario: str = "") -> Decision:
        """The decision record for ``module`` of a scenario described by ``scenario``."""
        decision, _ = await self._select(module, scenario, ask_model=True)
        return decision

    async def _select(
        self, module: Module, scenario: str, *, ask_model: bool
    ) -> tuple[Decision, bool]:
        """The decision, and whether the model was asked and failed."""
        spans = module_spans(self.features, module, scenario)
        floor = decide_from(module, spans, self.features, self.weights)
        if not ask_model:
            return _fallback(floor, f"the model failed {GIVE_UP_AFTER} times in a row"), False
        own = needs_of((s for s in spans if s.source != "scenario"), self.weights)
        try:
            turn = await self.client.complete(
                [ChatMessage.system(self._instructions), ChatMessage.user(ask(module, scenario))],
                output=ProtocolChoice,
            )
            choice = structured(ProtocolChoice, turn.message.content, self.client.model)
        except ModelError as exc:
            return _fallback(floor, f"the model failed: {exc}"), True
        assert isinstance(choice, ProtocolChoice)
        protocol = _named(choice.protocol, self.features.protocols)
        if protocol is None:
            return _fallback(floor, f"the model named {choice.protocol!r}, not a protocol"), False
        if protocol not in admissible(self.features, own, self.weights):
            return _fallback(floor, f"the model chose {protocol}, which lacks a hard need"), False
        text = " ".join((module.name, *module.tasks, *module.issues)).lower()
        quoted = [e for e in choice.evidence if e.strip() and e.strip().lower() in text]
        decision = Decision(
            module_id=module.id,
            selected_protocol=protocol,
            evidence_spans=quoted or floor.evidence_spans,
            rationale=choice.rationale.strip()[:_RATIONALE_CHARS] or floor.rationale,
            needs=own,
            decided_by="model",
        )
        return decision, False

    async def decide(self, scenarios: Sequence[Scenario]) -> list[list[Decision]]:
        """Every module's decision, one call per module, in order; after
        ``GIVE_UP_AFTER`` failed calls in a row (a model that is not there), the
        rest are the spec-only router's without asking."""
        failed_in_a_row = 0
        out: list[list[Decision]] = []
        for s in scenarios:
            decisions = []
            for m in s.modules:
                ask_model = failed_in_a_row < GIVE_UP_AFTER  # once given up, never again
                decision, failed = await self._select(m, s.description, ask_model=ask_model)
                if failed:
                    failed_in_a_row += 1
                elif ask_model:
                    failed_in_a_row = 0
                decisions.append(decision)
            out.append(decisions)
        return out

    async def close(self) -> None:
        """Close the model client (its HTTP connections)."""
        await self.client.close()


def instructions(features: FeatureModel) -> str:
    """The system message: the task, and the feature model as facts."""
    protocols = ", ".join(features.protocols)
    lines = [
        "You choose the agent communication protocol for one module of a multi-agent "
        f"system. Choose exactly one of: {protocols}.",
        "What each protocol offers of each capability (native, possible through a "
        "general mechanism, or none); a capability marked HARD rules out every "
        "protocol without it when the module needs it:",
    ]
    for cap in features.capabilities.values():
        offers = ", ".join(f"{p} {_LEVELS[cap.levels[p]]}" for p in features.protocols)
        hard = " HARD" if cap.hard else ""
        lines.append(f"- {cap.means} [{features.facets[cap.facet]}]{hard}: {offers}")
    lines.append(
        "Read what the module must do and what it fears; a need stated negatively "
        "(avoid, without, neither ... nor) is not a need. Weigh identity and "
        "confidentiality first, then operation semantics and governance, then "
        "interaction. Answer with JSON only: "
        '{"protocol": "...", "evidence": ["phrases quoted verbatim from the module"], '
        '"rationale": "..."}.'
    )
    return "\n".join(lines)


def ask(module: Module, scenario: str) -> str:
    """The user message: one module, in its scenario."""
    return json.dumps(
        {
            "scenario": scenario,
            "module": module.name,
            "tasks": list(module.tasks),
            "potential_issues": list(module.issues),
        },
        ensure_ascii=False,
    )


def _named(said: str, protocols: Sequence[str]) -> str | None:
    wanted = said.strip().lower()
    return next((p for p in protocols if p.lower() == wanted), None)


def _fallback(floor: Decision, why: str) -> Decision:
    return replace(floor, decided_by=f"spec-only ({why})")
