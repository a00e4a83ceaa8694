"""Every ActorSystem announces the actor types it hosts in the registry; agents find
each other by skill, tag, protocol or name, and ask by skill."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from _registry import running_registry
from pydantic import BaseModel

from actorbus import Actor, ActorNotFoundError, handler
from actorbus.codecs.uap import ephemeral_service

pytestmark = pytest.mark.transports("nats", "local")


class Text(BaseModel):
    text: str


class Summarizer(Actor):
    """Shortens texts."""

    skills = ("summarize",)
    tags = ("nlp", "en")

    @handler
    async def summarize(self, t: Text) -> str:
        return f"{self.type_name}: {t.text[:5]}"


class TerseSummarizer(Summarizer):
    tags = ("nlp",)


class Translator(Actor):
    tags = ("nlp", "fr")

    @handler
    async def translate(self, t: Text) -> str:
        return t.text[::-1]


class Hidden(Actor):
    advertise = False

    @handler
    async def ping(self, t: Text) -> str:
        return "pong"


async def test_hosted_types_are_announced_with_skills_schemas_and_protocols(make_system) -> None:
    host = await make_system()
    await host.spawn(Summarizer, "s1")
    await host.register(Translator)
    await host.spawn(Hidden, "h")
    await host.directory.announced()  # announcing runs in the background of spawn
    finder = await make_system()
    [listing] = await finder.discover(skill="summarize")
    assert listing.name == "summarizer"
    assert listing.address == "summarizer"
    assert listing.tags == {"nlp", "en"}
    assert "actorbus" in listing.protocols
    assert listing.healthy
    assert listing.service is not None
    info = listing.service.agent_info["actorbus"]  # type: ignore[index]
    assert info["description"] == "Shortens texts."
    assert info["intents"]["Text"]["properties"]["text"]["type"] == "string"
    assert info["system"] == host.system_id
    # skills default to the intents handled (Summarizer declares its own)
    assert [x.name for x in await finder.discover(skill="Text")] == ["translator"]
    assert [x.name for x in await finder.discover(tags=["nlp", "fr"])] == ["translator"]
    assert await finder.discover(name="hidden") == []
    assert {x.name for x in await finder.discover(protocol="actorbus")} == {
        "summarizer",
        "translator",
    }


async def test_ask_by_skill_reaches_a_healthy_instance_of_each_offering_type(make_system) -> None:
    host = await make_system()
    await host.spawn(Summarizer, "a")
    await host.spawn(TerseSummarizer, "b")
    await host.directory.announced()
    caller = await make_system()
    answers = {
        await caller.ask(skill="summarize", message=Text(text="hello world")) for _ in range(4)
    }
    assert answers == {"summarizer: hello", "terse-summarizer: hello"}
    with pytest.raises(ActorNotFoundError, match="skill 'juggle'"):
        await caller.ask(skill="juggle", message=Text(text="x"))
    with pytest.raises(TypeError, match="address or skill"):
        await caller.ask("summarizer/a", Text(text="x"), skill="summarize")


async def test_a_clean_shutdown_deregisters_at_once(make_system) -> None:
    host = await make_system()
    await host.spawn(Translator, "t")
    await host.directory.announced()
    finder = await make_system()
    assert [x.name for x in await finder.discover(name="translator")] == ["translator"]
    await host.close()
    store = await finder.directory.store()
    deadline = time.monotonic() + 5
    while store.services_named("translator"):
        await store.wait_for_change(store.index, max(0.01, deadline - time.monotonic()))
        assert time.monotonic() < deadline, "still registered after the host closed"
    assert await finder.discover(name="translator") == []


async def test_a_service_that_stopped_renewing_is_not_offered(make_system) -> None:
    finder = await make_system()
    store = await finder.directory.store()
    await store.put_service(
        ephemeral_service(
            "stale",
            agent_info={"actorbus": {"address": "stale", "skills": ["nap"]}},
            unhealthy_after=0.3,
            delete_after=60,
        )
    )
    assert [x.name for x in await finder.discover(skill="nap")] == ["stale"]
    await asyncio.sleep(0.4)  # no renewal for longer than unhealthy_after: time is the point
    assert await finder.discover(skill="nap") == []
    [stale] = await finder.discover(skill="nap", healthy=False)
    assert not stale.healthy


async def test_the_registry_http_api_lists_the_systems_actor_types(
    make_system, nats_server: Any, ns: str
) -> None:
    host = await make_system()
    await host.spawn(Summarizer, "x")
    await host.directory.announced()
    async with (
        running_registry(nats_server.url, ns) as registry,
        aiohttp.ClientSession() as http,
        http.get(f"{registry.http_url}/services/summarizer") as resp,
    ):
        assert resp.status == 200
        [svc] = await resp.json()
    assert svc["agent_protocol"] == "actorbus"
    assert svc["ephemeral"] is True
    assert svc["tags"] == ["nlp", "en"]
    assert svc["agent_info"]["actorbus"]["skills"][0]["id"] == "summarize"
