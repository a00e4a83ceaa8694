"""A model server scripted per test: real HTTP, the providers' real wire formats.

Agents are tested without the internet and without a stand-in for the SDKs: the
official ``openai`` and ``anthropic`` clients talk to this server as they would
to the provider (Chat Completions at ``/v1/chat/completions``, Messages at
``/v1/messages``, JSON or SSE streaming, tool calls, usage, error statuses with
``Retry-After``). Each request takes the next scripted :class:`Reply`; when the
script is spent, ``fallback`` answers (by default it says so, naming the last
user message, so a test that scripted too little fails readably).

PyPI's mock servers were weighed first: fakellm keeps its script in module-level
state loaded from YAML (one per process, not per test), stubllm matches
fixtures by content and runs uvicorn in a thread; neither holds a request until
a test lets it go, which the crash tests need (a host killed mid-model-call).

    async with ScriptedModel() as model:
        model.script(call("add", a=2, b=3), say("5"))
        client = OpenAIModel("scripted", base_url=model.openai_url)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class ScriptedCall:
    """A tool call the scripted model makes."""

    name: str
    arguments: dict[str, Any] | str  # a str is sent as it is (malformed JSON, say)


@dataclass
class Reply:
    """One scripted answer. ``status`` other than 200 is an error answer (with
    ``Retry-After: retry_after`` when given); ``delay`` holds it back first;
    ``hold`` holds it until the event is set (a test kills the caller meanwhile)."""

    text: str = ""
    calls: list[ScriptedCall] = field(default_factory=list)
    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0
    hold: asyncio.Event | None = None
    input_tokens: int = 11
    output_tokens: int = 7


def say(text: str, **options: Any) -> Reply:
    """The model answers ``text``."""
    return Reply(text=text, **options)


def call(name: str, /, **arguments: Any) -> Reply:
    """The model calls tool ``name`` with ``arguments``."""
    return Reply(calls=[ScriptedCall(name, arguments)])


def calls(*made: tuple[str, dict[str, Any]]) -> Reply:
    """The model calls several tools at once (parallel tool calls)."""
    return Reply(calls=[ScriptedCall(name, args) for name, args in made])


def fail(status: int, retry_after: float | None = None) -> Reply:
    """The provider answers an error (429 rate limit, 503 overloaded ...)."""
    return Reply(status=status, retry_after=retry_after)


@dataclass(frozen=True)
class Received:
    """A request the server took: which API, its JSON body, when."""

    api: str  # "openai" | "anthropic"
    body: dict[str, Any]
    at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def tool_names(self) -> list[str]:
        names = []
        for t in self.body.get("tools", []):
            names.append(t["function"]["name"] if "function" in t else t["name"])
        return names


def _last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return str(m["content"])
    return ""


def _exhausted(received: Received) -> Reply:
    return say(f"(scripted model: no reply left for {_last_user_text(received.body)!r})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ScriptedModel:
    """The server; ``async with`` starts it on a free loopback port."""

    def __init__(self, fallback: Callable[[Received], Reply] = _exhausted) -> None:
        self.fallback = fallback
        self.requests: list[Received] = []
        self._script: list[Reply] = []
        self._arrived = asyncio.Condition()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """``base_url`` for ``openai.AsyncOpenAI`` (and ``OPENAI_BASE_URL``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        """``base_url`` for ``anthropic.AsyncAnthropic`` (it adds ``/v1`` itself)."""
        return self.url

    def script(self, *replies: Reply | str) -> None:
        """Queue answers, taken one per request in order (a str is :func:`say`)."""
        self._script += [say(r) if isinstance(r, str) else r for r in replies]

    @property
    def pending(self) -> int:
        """Scripted answers not taken yet."""
        return len(self._script)

    async def wait_requests(self, n: int, timeout: float = 10.0) -> list[Received]:
        """Until ``n`` requests arrived in all; TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= n)
        return self.requests

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Serve on ``host``:``port`` (a free loopback port by default)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = port or _free_port()
        await web.TCPSite(self._runner, host, self.port).start()

    async def close(self) -> None:
        for reply in self._script:
            if reply.hold is not None:
                reply.hold.set()
        if self._runner is not None:
            await asyncio.wait_for(self._runner.cleanup(), 5.0)
            self._runner = None

    async def __aenter__(self) -> ScriptedModel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the two APIs ------------------------------------------------------------
    async def _take(self, api: str, request: web.Request) -> tuple[Received, Reply]:
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(text="the body is not JSON") from None
        received = Received(api, body, time.monotonic())
        async with self._arrived:
            self.requests.append(received)
            self._arrived.notify_all()
        reply = self._script.pop(0) if self._script else self.fallback(received)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.hold is not None:
            await reply.hold.wait()
        return received, reply

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        received, reply = await self._take("openai", request)
        if reply.status != 200:
            return _error(reply, {"error": {"message": "scripted error", "type": "scripted"}})
        body = received.body
        model = str(body.get("model", "scripted"))
        cid = f"chatcmpl-{next(self._ids)}"
        tool_calls: list[dict[str, Any]] = [
            {
                "id": f"call_{next(self._ids)}",
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c)},
            }
            for c in reply.calls
        ]
        finish = "tool_calls" if tool_calls else "stop"
        usage = {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            return web.json_response(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }

        def events() -> Iterable[dict[str, Any]]:
            yield chunk({"role": "assistant", "content": ""})
            for word in _WORDS.findall(reply.text):
                yield chunk({"content": word})
            for i, tc in enumerate(tool_calls):
                head = {"index": i, "id": tc["id"], "type": "function"}
                yield chunk(
                    {"tool_calls": [{**head, "function": {"name": tc["function"]["name"]}}]}
                )
                args = tc["function"]["arguments"]
                for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                    yield chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
            yield chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                yield {**chunk({}), "choices": [], "usage": usage}

        return await _sse(request, ((None, e) for e in events()), done="[DONE]")

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        received, reply = await self._take("anthropic", request)
        if reply.status != 200:
            return _error(
                reply,
                {"type": "error", "error": {"type": "scripted_error", "message": "scripted"}},
            )
        body = received.body
        model = str(body.get("model", "scripted"))
        mid = f"msg_{next(self._ids)}"
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        blocks += [
            {
                "type": "tool_use",
                "id": f"toolu_{next(self._ids)}",
                "name": c.name,
                "input": c.arguments if isinstance(c.arguments, dict) else {},
            }
            for c in reply.calls
        ]
        stop = "tool_use" if reply.calls else "end_turn"
        usage = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.json_response(message)

        def events() -> Iterable[tuple[str, dict[str, Any]]]:
            start = {**message, "content": [], "stop_reason": None}
            start["usage"] = {**usage, "output_tokens": 1}
            yield "message_start", {"type": "message_start", "message": start}
            for i, block in enumerate(blocks):
                empty = {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
                yield (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": empty,
                    },
                )
                if block["type"] == "text":
                    deltas = [
                        {"type": "text_delta", "text": w} for w in _WORDS.findall(block["text"])
                    ]
                else:
                    deltas = [
                        {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                    ]
                for delta in deltas:
                    yield (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": delta,
                        },
                    )
                yield "content_block_stop", {"type": "content_block_stop", "index": i}
            yield (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": reply.output_tokens},
                },
            )
            yield "message_stop", {"type": "message_stop"}

        return await _sse(request, events())


def _arguments(c: ScriptedCall) -> str:
    return c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)


def _error(reply: Reply, body: dict[str, Any]) -> web.Response:
    headers = {} if reply.retry_after is None else {"Retry-After": f"{reply.retry_after:g}"}
    return web.json_response(body, status=reply.status, headers=headers)


async def _sse(
    request: web.Request,
    events: Iterable[tuple[str | None, dict[str, Any]]],
    done: str | None = None,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        await resp.write(f"{head}data: {json.dumps(data)}\n\n".encode())
    if done is not None:
        await resp.write(f"data: {done}\n\n".encode())
    await resp.write_eof()
    return resp


def stand_in(received: Received) -> Reply:
    """A fallback to try an agent out with no model at all (``python -m
    actorbus.testing.scripted_model``): a user message ``/tool {"arg": 1}`` calls
    that tool, a tool's result is reported, anything else is echoed."""
    messages = received.messages
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" or (
        last.get("role") == "user" and isinstance(last.get("content"), list)
    ):
        return say(f"(scripted) the tool said: {_tool_result_text(last)}")
    text = _last_user_text(received.body)
    if text.startswith("/") and text[1:].split(" ", 1)[0] in received.tool_names:
        name, _, arguments = text[1:].partition(" ")
        return Reply(calls=[ScriptedCall(name, arguments.strip() or "{}")])
    return say(f"(scripted) you said: {text}")


def _tool_result_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # Anthropic: tool_result blocks in a user turn
        return " ".join(str(b.get("content", "")) for b in content if isinstance(b, dict))
    return str(content)


async def _serve(port: int, host: str) -> None:
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    model = ScriptedModel(fallback=stand_in)
    await model.start(port, host)
    try:
        print(
            f"scripted model on {model.url}; point agents at it with:\n"
            f"  export OPENAI_BASE_URL={model.url}/v1 OPENAI_MODEL=scripted\n"
            f"  (Anthropic's format: ANTHROPIC_BASE_URL={model.url} ANTHROPIC_API_KEY=any "
            "ANTHROPIC_MODEL=scripted)",
            flush=True,
        )
        await stop.wait()
    finally:
        await model.close()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m actorbus.testing.scripted_model",
        description="A stand-in model server (OpenAI and Anthropic wire formats): a "
        'message /tool {"arg": 1} calls that tool, anything else is echoed.',
    )
    parser.add_argument("--port", type=int, default=8089, help="port (default 8089)")
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.host))


if __name__ == "__main__":
    main()
