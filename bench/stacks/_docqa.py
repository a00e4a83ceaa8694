"""GAIA-like hierarchical document QA on any stack: a planner, ``--readers``
readers, an aggregator and a judge, each a process of its own, over the fixed
corpus of ``bench/data/docqa.json`` (made by the project). The tools are
deterministic: a reader scores its documents' sentences by the question's
keywords, the aggregator keeps the best sentence, the judge checks that it holds
the manifest's answer.

A task is one question: the caller asks the planner, which asks every reader at
once, then the aggregator, then the judge. Agents are the indexed services of a
stack's ``serve_shard``/``shard_client`` (0 the planner, 1..R the readers, R+1 the
aggregator, R+2 the judge). Reported per stack: success against the manifest,
end-to-end latency one task at a time, tasks/s with several in flight, and the
messages and payload bytes a task takes.

Only the standard library here: this file runs under both interpreters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from _storm import Handle, ShardCall, running

CORPUS = Path(__file__).resolve().parents[1] / "data" / "docqa.json"
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "there",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "with",
    ]
)
SUFFIXES = ("ing", "es", "ed", "s")
TOPIC_WEIGHT = 0.2  # a word of the document's own name says little about which sentence
CALL_TIMEOUT = 30.0


def corpus() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data


def stem(word: str) -> str:
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def keywords(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9][a-z0-9.\-]*[a-z0-9]|[a-z0-9]", text.lower())
    return sorted({stem(w) for w in words if w not in STOPWORDS})


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=\.)\s+", text) if s.strip()]


def roles(readers: int) -> dict[str, int]:
    return {"planner": 0, "aggregator": readers + 1, "judge": readers + 2}


def handler(index: int, readers: int, call: ShardCall) -> Handle:
    """Agent ``index``'s logic, the same on every stack."""
    data = corpus()
    where = roles(readers)
    if index == where["planner"]:
        return _planner(readers, call)
    if index == where["aggregator"]:
        return _aggregator()
    if index == where["judge"]:
        answers = {q["id"]: q["answer"] for q in data["questions"]}
        return _judge(answers)
    mine = [d for i, d in enumerate(data["documents"]) if i % readers == index - 1]
    return _reader(mine)


def _rank(hit: dict[str, Any]) -> tuple[float, float, str, str]:
    return (-hit["doc_score"], -hit["score"], hit["doc"], hit["sentence"])


def _reader(documents: list[dict[str, str]]) -> Handle:
    """Two levels, as a hierarchical reader does: the documents that match most of
    the question first, then the sentences within them that match it most."""
    indexed = []
    for d in documents:
        topic = {stem(part) for part in d["id"].split("-")}
        whole = set(keywords(d["text"]))
        for s in sentences(d["text"]):
            indexed.append((d["id"], s, whole, set(keywords(s)), topic))

    async def handle(text: str) -> str:
        wanted = set(json.loads(text)["keywords"])
        hits = [
            {
                "doc": doc,
                "sentence": sentence,
                "doc_score": len(wanted & whole),
                "score": sum(TOPIC_WEIGHT if w in topic else 1.0 for w in wanted & words),
            }
            for doc, sentence, whole, words, topic in indexed
            if wanted & words
        ]
        hits.sort(key=_rank)
        return json.dumps({"hits": hits[:3]})

    return handle


def _aggregator() -> Handle:
    async def handle(text: str) -> str:
        hits = json.loads(text)["hits"]
        hits.sort(key=_rank)
        best = hits[0] if hits else {"sentence": "", "doc": None}
        return json.dumps({"answer": best["sentence"], "sources": [best["doc"]]})

    return handle


def _judge(answers: dict[str, str]) -> Handle:
    async def handle(text: str) -> str:
        verdict = json.loads(text)
        expected = answers.get(verdict["task"], "\0")
        return json.dumps({"correct": expected.lower() in verdict["answer"].lower()})

    return handle


def _planner(readers: int, call: ShardCall) -> Handle:
    where = roles(readers)

    async def handle(text: str) -> str:
        task = json.loads(text)
        traffic = [0, 0]  # messages, payload bytes (requests and replies)

        async def ask(index: int, body: dict[str, Any]) -> dict[str, Any]:
            request = json.dumps(body)
            reply = await call(index, request, CALL_TIMEOUT)
            traffic[0] += 2
            traffic[1] += len(request.encode()) + len(reply.encode())
            answer: dict[str, Any] = json.loads(reply)
            return answer

        search = {"keywords": keywords(task["question"])}
        found = await asyncio.gather(*(ask(r, search) for r in range(1, readers + 1)))
        hits = [h for f in found for h in f["hits"]]
        final = await ask(where["aggregator"], {"question": task["question"], "hits": hits})
        verdict = await ask(where["judge"], {"task": task["id"], "answer": final["answer"]})
        return json.dumps(
            {
                "answer": final["answer"],
                "sources": final["sources"],
                "correct": verdict["correct"],
                "messages": traffic[0],
                "bytes": traffic[1],
            }
        )

    return handle


async def docqa_run(stack: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    """Start the agents, run every question ``--repeat`` times one at a time, then
    with ``--inflight`` at once; the result line's figures."""
    args.shards = args.readers + 3  # the indexed services: planner, readers, aggregator, judge
    questions = corpus()["questions"] * args.repeat
    async with running(stack, args, ["--role", "docqa", "--readers", str(args.readers)]) as (
        _,
        call,
    ):
        results: list[dict[str, Any]] = []
        latencies: list[float] = []

        async def one(q: dict[str, str]) -> None:
            request = json.dumps(q)
            start = time.perf_counter()
            reply = await call(0, request, CALL_TIMEOUT)
            latencies.append((time.perf_counter() - start) * 1000)
            result: dict[str, Any] = json.loads(reply)
            result["messages"] += 2  # the caller's request and the planner's reply
            result["bytes"] += len(request.encode()) + len(reply.encode())
            results.append(result)

        await one(questions[0])  # warm: each agent's first call
        results.clear()
        latencies.clear()
        for q in questions:
            await one(q)
        sequential = list(latencies)
        pending = list(questions)
        start = time.perf_counter()

        async def worker() -> None:
            while pending:
                await one(pending.pop())

        await asyncio.gather(*(worker() for _ in range(min(args.inflight, len(questions)))))
        elapsed = time.perf_counter() - start
        return {
            "tasks": len(results),
            "correct": sum(r["correct"] for r in results),
            "latencies_ms": [round(x, 3) for x in sequential],
            "throughput": len(questions) / elapsed,
            "messages_per_task": sum(r["messages"] for r in results) / len(results),
            "bytes_per_task": sum(r["bytes"] for r in results) / len(results),
        }
