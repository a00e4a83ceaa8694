"""A small newsroom in several processes: a chief asks a researcher, who
streams findings, and queues the article for an editor that may not run yet."""

from collections.abc import AsyncIterator

from pydantic import BaseModel

from actorbus import Actor, handler


class Brief(BaseModel):
    topic: str


class Finding(BaseModel):
    text: str


class Article(BaseModel):
    topic: str
    body: str


class Researcher(Actor):
    @handler
    async def research(self, brief: Brief) -> AsyncIterator[Finding]:
        for angle in ("what it is", "why it matters", "how to start"):
            yield Finding(text=f"{brief.topic}: {angle}")


class Chief(Actor):
    @handler
    async def assign(self, brief: Brief) -> str:
        findings = [f.text async for f in self.stream("researcher/1", brief, returns=Finding)]
        article = Article(topic=brief.topic, body="\n".join(findings))
        # durable: stored in JetStream now, handled when an editor runs
        await self.tell("editor/desk", article, durable=True, idempotency_key=brief.topic)
        return f"{len(findings)} findings on {brief.topic} queued for the editor"


class Editor(Actor):
    durable = True
    idempotent = True  # the same brief twice is edited once

    @handler
    async def edit(self, article: Article) -> None:
        print(f"editing {article.topic!r}: {len(article.body.splitlines())} findings", flush=True)
