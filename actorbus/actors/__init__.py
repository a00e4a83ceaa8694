"""Actors: the Actor base class, @handler, and the ActorSystem runtime."""

from actorbus.actors.actor import Actor, Crash
from actorbus.actors.handlers import handler
from actorbus.actors.ref import ActorRef
from actorbus.actors.system import ActorSystem

__all__ = ["Actor", "ActorRef", "ActorSystem", "Crash", "handler"]
