"""The Synadia Agent Protocol for NATS: actor types served as protocol agents
(:class:`SynadiaBridge`) and protocol agents called from actorbus
(:class:`SynadiaAgent`). The message shapes live in :mod:`actorbus.codecs.synadia`."""

from actorbus.services.synadia.egress import SynadiaAgent, discover_agents, find_agent
from actorbus.services.synadia.prompt import PromptSettings
from actorbus.services.synadia.proxy import SynadiaProxy
from actorbus.services.synadia.service import BridgedAgent, BridgeSettings, SynadiaBridge
from actorbus.services.synadia.targets import Target

__all__ = [
    "BridgeSettings",
    "BridgedAgent",
    "PromptSettings",
    "SynadiaAgent",
    "SynadiaBridge",
    "SynadiaProxy",
    "Target",
    "discover_agents",
    "find_agent",
]
