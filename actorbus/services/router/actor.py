"""The router as a service actor (``router/main``), asked over the bus like the
registry: which protocol each module of a scenario should speak
(:class:`SelectRequest`), and which instance a message should go to
(:class:`RouteRequest`, fed by :class:`Observation` of how calls went).

Destination state (latencies, weights' turns) lives in this actor: callers that
report what they observed share one view of the instances.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from actorbus.actors.actor import Actor
from actorbus.actors.handlers import handler
from actorbus.codecs.errors import ActorNotFoundError, ValidationFailedError
from actorbus.services.router.destinations import (
    ConsistentHash,
    FirstMatch,
    LatencyAware,
    Policy,
    Weighted,
)
from actorbus.services.router.selection import Module, select

Discover = Callable[..., Awaitable[list[Any]]]
POLICY_NAMES = ("first-match", "weighted", "latency-aware", "consistent-hash")


class ModuleSpec(BaseModel):
    id: str
    name: str = ""
    tasks: list[str] = Field(default_factory=list)
    issues: list[str] = Field(default_factory=list)


class SelectRequest(BaseModel):
    """A scenario: its description and its modules."""

    description: str = ""
    modules: list[ModuleSpec] = Field(min_length=1)


class RouteRequest(BaseModel):
    """Where to send one message: among ``candidates``, or the healthy actors the
    registry knows for ``skill`` or the actor type ``name``; ``key`` (a session or
    trace id) for sticky policies; ``weights`` for the weighted one."""

    candidates: list[str] | None = None
    skill: str | None = None
    name: str | None = None  # an actor type
    key: str | None = None
    policy: str = "latency-aware"
    weights: dict[str, float] | None = None


class RouteDecision(BaseModel):
    destination: str
    order: list[str]  # where retries and hedges go next
    policy: str


class Observation(BaseModel):
    """How one call to ``destination`` went (teaches latency-aware routing)."""

    destination: str
    latency_s: float = Field(ge=0)
    ok: bool = True


class RouterActor(Actor):
    type_name: ClassVar[str] = "router"
    description = "Protocol selection per module and destination routing among instances"
    skills = ("protocol-selection", "destination-routing")

    def __init__(self, discover: Discover | None = None) -> None:
        self.discover = discover  # the hosting system's registry view (skills)
        self.policies: dict[str, Policy] = {
            "first-match": FirstMatch(),
            "latency-aware": LatencyAware(),
            "consistent-hash": ConsistentHash(),
        }
        self.weighted: Weighted | None = None

    @handler
    async def select(self, request: SelectRequest) -> list[dict[str, Any]]:
        return [
            select(
                Module(m.id, m.name, tuple(m.tasks), tuple(m.issues)), request.description
            ).record()
            for m in request.modules
        ]

    @handler
    async def route(self, request: RouteRequest) -> RouteDecision:
        policy = self._policy(request)
        if request.candidates:
            candidates = list(dict.fromkeys(request.candidates))
        elif request.skill or request.name:
            if self.discover is None:
                raise ValidationFailedError("this router has no registry view: give candidates")
            query = {"skill": request.skill} if request.skill else {"name": request.name}
            found = await self.discover(**query)
            candidates = sorted({lst.address for lst in found if lst.address})
            if not candidates:
                wanted = request.skill or request.name
                raise ActorNotFoundError(f"no healthy actor offers {wanted!r}")
        else:
            raise ValidationFailedError("a route request needs candidates, a skill or a type")
        order = policy.order(candidates, request.key)
        return RouteDecision(destination=order[0], order=order, policy=policy.name)

    @handler
    async def observe(self, observation: Observation) -> None:
        for policy in self.policies.values():
            policy.observe(observation.destination, observation.latency_s, observation.ok)

    def _policy(self, request: RouteRequest) -> Policy:
        if request.policy == "weighted":
            if not request.weights:
                raise ValidationFailedError("the weighted policy needs weights")
            if self.weighted is None or self.weighted.weights != request.weights:
                self.weighted = Weighted(request.weights)
            return self.weighted
        policy = self.policies.get(request.policy)
        if policy is None:
            raise ValidationFailedError(
                f"unknown policy {request.policy!r}; known: {', '.join(POLICY_NAMES)}"
            )
        return policy
