"""A small research team of agents, deterministic end to end (no LLM, no network).

It exists so that ``actorbus demo`` shows every way actors talk in one short run:

- ``Planner`` fans a :class:`Question` out to three ``Reader`` actors at once
  (``self.ask`` under ``asyncio.gather``), then asks the ``Aggregator`` to merge
  what they found (request/reply);
- each ``Reader`` publishes a ``reading.done`` event that the ``Monitor`` counts
  through a ``@handler(topic="reading.*")`` subscription (pub/sub);
- the ``Narrator`` streams the final answer token by token from an async-generator
  handler, consumed with ``system.stream`` (streaming).

The "documents" and the keyword scoring are built in and deterministic, so the
answer to a given question is always the same and tests can assert on it.
Only the timings vary from run to run.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, Field
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from actorbus.actors import Actor, ActorSystem, handler

DEFAULT_QUESTION = "How do actors communicate and recover from failures?"
READING_TOPIC = "reading.done"

PLANNER = "planner/0"
READERS = ("reader/0", "reader/1", "reader/2")
AGGREGATOR = "aggregator/0"
NARRATOR = "narrator/0"
MONITOR = "monitor/0"


# -- messages ---------------------------------------------------------------
# Explicit intents: the intent travels on the wire and identifies the model in
# every process, so a generic class name ("Question") must not collide with an
# unrelated model of the same name elsewhere.


class Question(BaseModel):
    __intent__: ClassVar[str] = "demo.question"
    text: str
    top_k: int = Field(default=3, ge=1, le=20)


class Step(BaseModel):
    """One thing one agent did, timed where it happened (wall clock, epoch ms)."""

    __intent__: ClassVar[str] = "demo.step"
    agent: str
    action: str
    started_ms: float
    duration_ms: float


class Match(BaseModel):
    __intent__: ClassVar[str] = "demo.match"
    sentence: str
    score: float
    source: str
    position: int


class ReaderAnswer(BaseModel):
    __intent__: ClassVar[str] = "demo.reader-answer"
    reader: str
    title: str
    matches: list[Match]
    step: Step


class Findings(BaseModel):
    __intent__: ClassVar[str] = "demo.findings"
    question: Question
    answers: list[ReaderAnswer]


class RankedSentence(BaseModel):
    __intent__: ClassVar[str] = "demo.ranked-sentence"
    text: str
    score: float
    sources: list[str]


class FinalAnswer(BaseModel):
    __intent__: ClassVar[str] = "demo.final-answer"
    question: str
    text: str
    sentences: list[RankedSentence]
    step: Step


class PlanResult(BaseModel):
    __intent__: ClassVar[str] = "demo.plan-result"
    answer: FinalAnswer
    steps: list[Step]


class Token(BaseModel):
    __intent__: ClassVar[str] = "demo.token"
    index: int
    text: str


class ReadingDone(BaseModel):
    __intent__: ClassVar[str] = "demo.reading-done"
    reader: str
    matches: int


class ReadingsQuery(BaseModel):
    __intent__: ClassVar[str] = "demo.readings-query"
    session: str
    expected: int
    wait_s: float = 2.0


class ReadingsSeen(BaseModel):
    __intent__: ClassVar[str] = "demo.readings-seen"
    session: str
    readers: list[str]


class Document(BaseModel):
    title: str
    sentences: list[str]


# -- the built-in library ---------------------------------------------------

DOCUMENTS: dict[str, Document] = {
    "0": Document(
        title="The actor model",
        sentences=[
            "An actor owns its state and handles one message at a time.",
            "Actors communicate only by sending messages, never by sharing memory.",
            "A supervisor restarts an actor that crashes, so failures stay local.",
            "Addresses name actors, so a sender does not care where an actor runs.",
        ],
    ),
    "1": Document(
        title="NATS in one page",
        sentences=[
            "NATS is a lightweight message broker built around subjects.",
            "Request and reply over NATS lets actors communicate across processes.",
            "Queue groups spread messages over replicas of a service.",
            # Also in "The actor model": the aggregator must merge it, not repeat it.
            "Actors communicate only by sending messages, never by sharing memory.",
        ],
    ),
    "2": Document(
        title="Agents at work",
        sentences=[
            "An AI agent plans, calls tools and asks other agents for help.",
            "A planner fans a question out to readers and merges their answers.",
            "Agents built as actors recover from failures because a supervisor restarts them.",
            "Streaming replies let an agent show partial results as they arrive.",
        ],
    ),
}

_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for",
        "from", "how", "i", "in", "is", "it", "of", "on", "or", "so", "that", "the",
        "their", "them", "they", "this", "to", "what", "when", "where", "which", "who",
        "why", "with",
    }
)  # fmt: skip
_WORD = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ing", "ed", "es", "s", "e")


def _stem(word: str) -> str:
    """Crude suffix stripping, so "failures" matches "failure" without a dependency."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def keywords(text: str) -> list[str]:
    """The distinct stems of the non-stopwords of ``text``, in order of appearance."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if word not in _STOPWORDS:
            seen.setdefault(_stem(word), None)
    return list(seen)


def _now_ms() -> float:
    return time.time() * 1000


def _step(agent: str, action: str, started_ms: float) -> Step:
    return Step(
        agent=agent,
        action=action,
        started_ms=started_ms,
        duration_ms=round(_now_ms() - started_ms, 2),
    )


# -- the agents -------------------------------------------------------------


class Reader(Actor):
    """Answers a question from the one document it was given."""

    def __init__(self, document: Document, delay_s: float = 0.05) -> None:
        self.document = document
        # Stands in for the latency of a real model call, so the fan-out's
        # concurrency is visible in the timeline.
        self.delay_s = delay_s

    @handler
    async def read(self, question: Question) -> ReaderAnswer:
        started = _now_ms()
        await asyncio.sleep(self.delay_s)
        wanted = set(keywords(question.text))
        matches = []
        for position, sentence in enumerate(self.document.sentences):
            hits = wanted & set(keywords(sentence))
            if hits:
                score = round(len(hits) / len(wanted), 2)
                matches.append(
                    Match(sentence=sentence, score=score, source=self.address, position=position)
                )
        matches.sort(key=lambda m: (-m.score, m.position))
        # Fire and forget: whoever watches the topic learns about it; the reader
        # neither knows nor waits for them.
        await self.publish(READING_TOPIC, ReadingDone(reader=self.address, matches=len(matches)))
        action = (
            f"read {self.document.title!r}: {len(matches)} of "
            f"{len(self.document.sentences)} sentences match"
        )
        return ReaderAnswer(
            reader=self.address,
            title=self.document.title,
            matches=matches,
            step=_step(self.address, action, started),
        )


class Aggregator(Actor):
    """Merges the readers' findings: dedup by sentence, rank by score, keep the top."""

    @handler
    async def combine(self, findings: Findings) -> FinalAnswer:
        started = _now_ms()
        merged: dict[str, RankedSentence] = {}
        order: dict[str, tuple[int, int]] = {}  # first (reader index, position) seen
        total = 0
        for index, answer in enumerate(findings.answers):
            for match in answer.matches:
                total += 1
                key = " ".join(match.sentence.lower().split())
                known = merged.get(key)
                if known is None:
                    merged[key] = RankedSentence(
                        text=match.sentence, score=match.score, sources=[match.source]
                    )
                    order[key] = (index, match.position)
                else:
                    known.score = max(known.score, match.score)
                    known.sources.append(match.source)
        # Ties go to the earlier reader and sentence, so the answer is deterministic.
        ranked = sorted(merged, key=lambda k: (-merged[k].score, order[k]))
        top = [merged[k] for k in ranked[: findings.question.top_k]]
        text = " ".join(s.text for s in top) or "None of the readers found anything about that."
        action = (
            f"ranked {total} matches, merged {total - len(merged)} duplicate(s), "
            f"kept top {len(top)}"
        )
        return FinalAnswer(
            question=findings.question.text,
            text=text,
            sentences=top,
            step=_step(self.address, action, started),
        )


class Planner(Actor):
    """Splits the work: every reader at once, then one aggregation."""

    def __init__(self, readers: Iterable[str] = READERS, aggregator: str = AGGREGATOR) -> None:
        self.readers = list(readers)
        self.aggregator = aggregator

    @handler
    async def plan(self, question: Question) -> PlanResult:
        started = _now_ms()
        # Concurrent asks: the fan-out takes as long as the slowest reader, not the sum.
        answers: list[ReaderAnswer] = await asyncio.gather(
            *(self.ask(r, question, returns=ReaderAnswer) for r in self.readers)
        )
        fan_out = _step(self.address, f"asked {len(answers)} readers at once", started)
        found = sum(len(a.matches) for a in answers)
        handed_over = _now_ms()
        final: FinalAnswer = await self.ask(
            self.aggregator,
            Findings(question=question, answers=answers),
            returns=FinalAnswer,
        )
        hand_over = _step(self.address, f"sent {found} matches to {self.aggregator}", handed_over)
        steps = [fan_out, *(a.step for a in answers), hand_over, final.step]
        return PlanResult(answer=final, steps=steps)


class Narrator(Actor):
    """Streams an answer token by token, the way an LLM front end would."""

    def __init__(self, token_delay_s: float = 0.01) -> None:
        self.token_delay_s = token_delay_s

    @handler
    async def narrate(self, answer: FinalAnswer) -> AsyncIterator[Token]:
        # Each token keeps its trailing whitespace: joined, they are the text exactly.
        for index, piece in enumerate(re.findall(r"\S+\s*", answer.text)):
            await asyncio.sleep(self.token_delay_s)
            yield Token(index=index, text=piece)


class Monitor(Actor):
    """Watches ``reading.*`` events, grouped by the session they belong to.

    The session id is never passed to the readers explicitly: the runner sets it
    on its ask, and actorbus carries it through the planner's asks into the
    readers' publishes.
    """

    # A ``seen`` query waits for events; they must be handled meanwhile.
    concurrency = 8

    def __init__(self) -> None:
        self.seen_by_session: dict[str, list[str]] = {}
        self.changed = asyncio.Condition()

    @handler(topic="reading.*")
    async def on_reading(self, event: ReadingDone) -> None:
        session = self.envelope.context.session_id or ""
        async with self.changed:
            self.seen_by_session.setdefault(session, []).append(event.reader)
            self.changed.notify_all()

    @handler
    async def seen(self, query: ReadingsQuery) -> ReadingsSeen:
        """Wait (bounded) until ``expected`` events arrived: publishes are not
        ordered with respect to the replies the runner already has."""

        def enough() -> bool:
            return len(self.seen_by_session.get(query.session, [])) >= query.expected

        async with self.changed:
            try:
                async with asyncio.timeout(query.wait_s):
                    await self.changed.wait_for(enough)
            except TimeoutError:
                pass
            readers = sorted(self.seen_by_session.get(query.session, []))
        return ReadingsSeen(session=query.session, readers=readers)


# -- running it -------------------------------------------------------------


class TimelineEntry(BaseModel):
    agent: str
    action: str
    start_ms: float  # since the run started
    duration_ms: float


class DemoResult(BaseModel):
    """What a run produced, in a form tests and ``--json`` consumers can rely on."""

    question: str
    answer: str
    sentences: list[RankedSentence]
    streamed: str
    tokens: int
    events: list[str]
    timeline: list[TimelineEntry]
    total_ms: float


async def spawn_demo_agents(system: ActorSystem) -> list[str]:
    """Spawn whichever team members ``system`` does not host yet (so ``run_demo`` can
    be called repeatedly); returns the team's addresses."""
    team: list[tuple[str, type[Actor], dict[str, Any]]] = [
        # The subscriber first, so no event published during a run can be missed.
        (MONITOR, Monitor, {}),
        *((r, Reader, {"document": DOCUMENTS[r.split("/", 1)[1]]}) for r in READERS),
        (AGGREGATOR, Aggregator, {}),
        (NARRATOR, Narrator, {}),
        (PLANNER, Planner, {}),
    ]
    local = system.local_actors()
    for address, cls, kwargs in team:
        if address not in local:
            await system.spawn(cls, key=address.split("/", 1)[1], **kwargs)
    return [address for address, _, _ in team]


async def run_demo(
    system: ActorSystem, question: str = DEFAULT_QUESTION, console: Console | None = None
) -> DemoResult:
    """Run one question through the team, narrating to ``console`` as it goes."""
    console = console or Console(quiet=True)
    agents = await spawn_demo_agents(system)
    console.print(Panel(Text(question), title="[bold]actorbus demo[/]", subtitle="question"))
    console.print("[dim]agents:[/] " + ", ".join(f"[cyan]{a}[/]" for a in agents))

    session = uuid.uuid4().hex
    run_started = _now_ms()
    clock = time.perf_counter()
    console.print(f"[bold]{PLANNER}[/] ← question (fan-out to {len(READERS)} readers)")
    plan: PlanResult = await system.ask(
        PLANNER, Question(text=question), returns=PlanResult, session_id=session
    )
    answer = plan.answer
    console.print(
        f"[bold]{PLANNER}[/] → answer with {len(answer.sentences)} sentence(s) "
        f"in {(time.perf_counter() - clock) * 1000:.1f} ms"
    )

    console.print(f"[bold]{NARRATOR}[/] streaming: ", end="")
    narrated = _now_ms()
    pieces: list[str] = []
    async for token in system.stream(NARRATOR, answer, returns=Token):
        pieces.append(token.text)
        console.print(Text(token.text, style="green"), end="")
    console.print()
    narration = _step(NARRATOR, f"streamed {len(pieces)} tokens", narrated)

    watched = _now_ms()
    seen: ReadingsSeen = await system.ask(
        MONITOR, ReadingsQuery(session=session, expected=len(READERS)), returns=ReadingsSeen
    )
    monitoring = _step(MONITOR, f"counted {len(seen.readers)} {READING_TOPIC!r} event(s)", watched)
    total_ms = round((time.perf_counter() - clock) * 1000, 2)

    timeline = [
        TimelineEntry(
            agent=s.agent,
            action=s.action,
            start_ms=round(s.started_ms - run_started, 2),
            duration_ms=s.duration_ms,
        )
        for s in [*plan.steps, narration, monitoring]
    ]
    result = DemoResult(
        question=question,
        answer=answer.text,
        sentences=answer.sentences,
        streamed="".join(pieces),
        tokens=len(pieces),
        events=seen.readers,
        timeline=timeline,
        total_ms=total_ms,
    )
    _print_summary(console, result)
    return result


def _print_summary(console: Console, result: DemoResult) -> None:
    steps = Table(title="What happened", title_justify="left")
    steps.add_column("#", justify="right", style="dim")
    steps.add_column("agent", style="cyan", no_wrap=True)
    steps.add_column("action")
    steps.add_column("start ms", justify="right")
    steps.add_column("took ms", justify="right")
    for n, entry in enumerate(result.timeline, 1):
        steps.add_row(
            str(n),
            entry.agent,
            Text(entry.action),
            f"{entry.start_ms:.1f}",
            f"{entry.duration_ms:.1f}",
        )
    console.print(steps)

    ranked = Table(title="Answer, ranked", title_justify="left")
    ranked.add_column("score", justify="right", style="magenta")
    ranked.add_column("sentence")
    ranked.add_column("from", style="cyan")
    for s in result.sentences:
        ranked.add_row(f"{s.score:.2f}", Text(s.text), ", ".join(s.sources))
    console.print(ranked)
    console.print(
        f"[bold green]done[/] in {result.total_ms:.1f} ms; "
        f"{len(result.events)} {READING_TOPIC!r} events seen by {MONITOR}"
    )
