"""The gateway's MCP edge over raw HTTP: both protocol revisions (2025-11-25 with its
initialize handshake and sessions, 2026-07-28 stateless with per-request ``_meta``),
tools from the registry, calls, errors and their HTTP statuses.

Results of 2026-07-28 are checked against the official ``mcp`` package's wire
types when it is installed (``mcp_types.methods.validate_server_result``)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import jsonschema
from _gateway import GatewayUnderTest, Probe, host_agents
from _util import WAIT
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.services.gateway import GatewayService, InputRequired

validate_server_result: Callable[..., None] | None
try:
    from mcp_types.methods import validate_server_result
except ImportError:  # pragma: no cover - without the SDK the shapes are checked by hand only
    validate_server_result = None

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
AGENTS = ("gw-echo", "gw-streamer", "mcp-calc", "mcp-asker", "mcp-bytes")


class Add(BaseModel):
    """Two numbers to add."""

    a: int
    b: int


class Sum(BaseModel):
    total: int


class McpCalc(Actor):
    """Adds two integers."""

    type_name = "mcp-calc"
    skills = ("arithmetic",)
    prompts = {"sum": "Add {a} and {b}, then explain the result to {audience}."}

    @handler
    async def add(self, req: Add) -> Sum:
        if req.a < 0:
            raise ValueError("negative numbers are not my thing")
        return Sum(total=req.a + req.b)


class McpAsker(Actor):
    """Asks for a name, then greets."""

    type_name = "mcp-asker"

    def __init__(self) -> None:
        self.waiting: set[str | None] = set()

    @handler
    async def greet(self, text: str) -> str | InputRequired:
        session = self.envelope.context.session_id
        if session in self.waiting:
            self.waiting.discard(session)
            return f"hello {text} ({session})"
        self.waiting.add(session)
        return InputRequired(message="who are you?")


class McpBytes(Actor):
    """Counts bytes."""

    type_name = "mcp-bytes"

    @handler
    async def count(self, data: bytes) -> dict[str, int]:
        return {"bytes": len(data)}


async def host_mcp_agents(system: ActorSystem, probe: Probe | None = None) -> None:
    await host_agents(system, probe)
    await system.spawn(McpCalc, "1")
    await system.spawn(McpAsker, "1")
    await system.spawn(McpBytes, "1")


GATEWAY = GatewayUnderTest(agents=AGENTS, edges=("mcp",), host=host_mcp_agents)


def endpoint(gw: GatewayService) -> str:
    return f"{gw.http_url}/mcp"


CLIENT_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
}


async def post(
    http: aiohttp.ClientSession,
    url: str,
    body: Any,
    headers: dict[str, str] | None = None,
    *,
    status: int = 200,
    raw: bool = False,
) -> tuple[dict[str, Any], aiohttp.ClientResponse]:
    """POST ``body`` (JSON, or bytes as they are, with no Content-Type) and read JSON back."""
    hdrs = {"Accept": "application/json, text/event-stream", **(headers or {})}
    if raw:
        ctx = http.post(url, data=body, headers=hdrs, skip_auto_headers=["Content-Type"])
    else:
        ctx = http.post(url, json=body, headers=hdrs)
    async with ctx as resp:
        text = await resp.text()
        assert resp.status == status, text
        assert resp.content_type == "application/json", text
        assert "Traceback" not in text
        data: dict[str, Any] = json.loads(text)
        return data, resp


class Legacy:
    """A 2025-11-25 client: initialize, then requests with the session header."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url
        self.session: str | None = None
        self.next_id = 0

    async def initialize(self, version: str = LEGACY) -> dict[str, Any]:
        params = {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"},
        }
        data, resp = await post(
            self.http,
            self.url,
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
        )
        self.session = resp.headers["Mcp-Session-Id"]
        async with self.http.post(
            self.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=self.headers(),
        ) as r:
            assert r.status == 202
        result: dict[str, Any] = data["result"]
        return result

    def headers(self) -> dict[str, str]:
        assert self.session is not None
        return {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": LEGACY}

    async def rpc(self, method: str, params: Any = None, *, status: int = 200) -> dict[str, Any]:
        self.next_id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            body["params"] = params
        data, _ = await post(self.http, self.url, body, self.headers(), status=status)
        assert data["id"] == self.next_id
        return data


async def modern(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2026-07-28 request: ``_meta`` envelope and the routing headers."""
    body_params = dict(params or {})
    body_params["_meta"] = {**CLIENT_META, **(meta or {})}
    hdrs = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        hdrs["Mcp-Name"] = str(body_params.get("name"))
    if method == "resources/read":
        hdrs["Mcp-Name"] = str(body_params.get("uri"))
    hdrs.update(headers or {})
    body = {"jsonrpc": "2.0", "id": "m1", "method": method, "params": body_params}
    data, resp = await post(http, url, body, hdrs, status=status)
    assert "Mcp-Session-Id" not in resp.headers
    if "result" in data:
        assert data["result"]["resultType"] == "complete"
        assert data["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
        if validate_server_result is not None:
            validate_server_result(method, MODERN, data["result"])
    return data


def text_of(result: dict[str, Any]) -> str:
    return "".join(c["text"] for c in result["content"] if c["type"] == "text")


# -- 2025-11-25 ----------------------------------------------------------------------


async def test_legacy_handshake_list_and_call(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    client = Legacy(http, endpoint(gw))
    init = await client.initialize()
    assert init["protocolVersion"] == LEGACY
    assert init["capabilities"]["tools"] == {"listChanged": False}
    assert init["serverInfo"]["name"] == "actorbus-gateway"
    assert (await client.rpc("ping"))["result"] == {}

    listed = (await client.rpc("tools/list"))["result"]
    tools = {t["name"]: t for t in listed["tools"]}
    assert "nextCursor" not in listed
    assert {"gw-echo.text", "gw-echo.dict", "gw-streamer", "mcp-calc", "mcp-asker"} <= set(tools)
    calc = tools["mcp-calc"]
    assert calc["title"] == "mcp-calc"
    assert calc["description"].startswith("Adds two integers")
    assert "arithmetic" in calc["description"]
    # of an actor with several handlers, each tool says what its handler does
    data = tools["gw-echo.dict"]["description"]
    assert ": Return the object as it came, with the session it came in. Skills" in data
    assert "second paragraph" not in data
    assert "Return the object" not in tools["gw-echo.text"]["description"]
    schema = calc["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"
    text_schema = tools["gw-streamer"]["inputSchema"]
    assert text_schema["properties"]["text"]["type"] == "string"
    assert text_schema["required"] == ["text"]
    assert tools["gw-echo.dict"]["inputSchema"] == {"type": "object"}
    assert tools["mcp-bytes"]["inputSchema"]["properties"]["data"]["contentEncoding"] == "base64"
    # a handler that declares a model reply promises its shape; a text reply does not
    assert calc["outputSchema"]["type"] == "object"
    assert calc["outputSchema"]["properties"]["total"]["type"] == "integer"
    assert calc["outputSchema"]["required"] == ["total"]
    assert "outputSchema" not in tools["gw-echo.text"]
    assert "outputSchema" not in tools["gw-streamer"]
    if validate_server_result is not None:
        validate_server_result("tools/list", LEGACY, listed)

    # a model handler: structured content
    added = (await client.rpc("tools/call", {"name": "mcp-calc", "arguments": {"a": 2, "b": 3}}))[
        "result"
    ]
    assert added["isError"] is False
    assert added["structuredContent"] == {"total": 5}
    jsonschema.validate(added["structuredContent"], calc["outputSchema"])
    assert json.loads(added["content"][0]["text"]) == {"total": 5}
    task = added["_meta"]["io.actorbus/task"]
    assert task["state"] == "completed"
    assert task["contextId"] == client.session  # one MCP session, one conversation
    if validate_server_result is not None:
        validate_server_result("tools/call", LEGACY, added)

    # a text handler
    shout = (await client.rpc("tools/call", {"name": "gw-echo.text", "arguments": {"text": "hi"}}))[
        "result"
    ]
    assert shout["content"] == [{"type": "text", "text": "HI"}]
    assert "structuredContent" not in shout
    # a dict handler sees the session too
    echoed = (await client.rpc("tools/call", {"name": "gw-echo.dict", "arguments": {"n": 1}}))[
        "result"
    ]
    assert echoed["structuredContent"] == {"echo": {"n": 1}, "session": client.session}
    # a streaming handler: its text items, as one text
    words = (
        await client.rpc("tools/call", {"name": "gw-streamer", "arguments": {"text": "a b c"}})
    )["result"]
    assert [c["text"] for c in words["content"]] == ["ABC"]
    # bytes, base64 on the wire
    data = base64.b64encode(b"12345").decode()
    counted = (await client.rpc("tools/call", {"name": "mcp-bytes", "arguments": {"data": data}}))[
        "result"
    ]
    assert counted["structuredContent"] == {"bytes": 5}

    # the calls are gateway tasks, kept in the store
    assert gw.store is not None
    stored = await gw.store.get_task(task["id"])
    assert stored is not None
    assert stored.protocol == "mcp"
    assert stored.agent == "mcp-calc"


async def test_legacy_errors_and_failures(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    client = Legacy(http, endpoint(gw))
    await client.initialize()
    # an actor failure is a result with isError, not a JSON-RPC error
    failed = (await client.rpc("tools/call", {"name": "mcp-calc", "arguments": {"a": -1, "b": 1}}))[
        "result"
    ]
    assert failed["isError"] is True
    assert "negative numbers" in text_of(failed)
    assert failed["_meta"]["io.actorbus/task"]["state"] == "failed"
    assert failed["_meta"]["io.actorbus/task"]["error"]["type"] == "ValueError"
    timed_out = (
        await client.rpc("tools/call", {"name": "gw-echo.text", "arguments": {"text": "hang"}})
    )["result"]
    assert timed_out["isError"] is True
    assert text_of(timed_out).startswith("E_TIMEOUT")

    # bad arguments: a result with isError naming what is wrong, which the model
    # reads and can correct (SEP-1303), not a JSON-RPC error
    for name, args, where in (
        ("mcp-calc", {"a": "x", "b": 1}, "arguments.a"),
        ("mcp-calc", {"a": 1}, "'b' is a required property"),
        ("mcp-calc", [1, 2], "must be a JSON object"),
        ("gw-echo.text", {"text": "x", "more": 1}, "more"),
        ("mcp-bytes", {"data": "***"}, "data"),
    ):
        bad = (await client.rpc("tools/call", {"name": name, "arguments": args}))["result"]
        assert bad["isError"] is True, bad
        assert text_of(bad).startswith(f"Invalid arguments for tool {name}:")
        assert where in text_of(bad)
    unknown = await client.rpc("tools/call", {"name": "nobody", "arguments": {}})
    assert unknown["error"]["code"] == -32602
    assert "Unknown tool: nobody" in unknown["error"]["message"]
    no_name = await client.rpc("tools/call", {"arguments": {}})
    assert no_name["error"]["code"] == -32602
    assert (await client.rpc("completion/complete"))["error"]["code"] == -32601
    assert (await client.rpc("server/discover"))["error"]["code"] == -32601
    cursor = await client.rpc("tools/list", {"cursor": "nonsense"})
    assert cursor["error"]["code"] == -32602
    assert (await client.rpc("tools/call", "not an object"))["error"]["code"] == -32602


async def test_legacy_input_required_continues(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    client = Legacy(http, endpoint(gw))
    await client.initialize()
    asked = (await client.rpc("tools/call", {"name": "mcp-asker", "arguments": {"text": "hi"}}))[
        "result"
    ]
    assert asked["isError"] is False
    assert text_of(asked) == "who are you?"
    task = asked["_meta"]["io.actorbus/task"]
    assert task["state"] == "input-required"
    answer = await client.rpc(
        "tools/call",
        {
            "name": "mcp-asker",
            "arguments": {"text": "ada"},
            "_meta": {"io.actorbus/taskId": task["id"]},
        },
    )
    done = answer["result"]
    assert text_of(done) == f"hello ada ({client.session})"
    assert done["_meta"]["io.actorbus/task"] == {
        "id": task["id"],
        "contextId": client.session,
        "state": "completed",
    }
    again = await client.rpc(
        "tools/call",
        {
            "name": "mcp-asker",
            "arguments": {"text": "ada"},
            "_meta": {"io.actorbus/taskId": task["id"]},
        },
    )
    assert again["error"]["code"] == -32602  # the task no longer waits for input


async def test_legacy_sessions(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    url = endpoint(gw)
    # an older handshake revision is kept; an unknown one is answered with the latest
    old = Legacy(http, url)
    assert (await old.initialize("2025-06-18"))["protocolVersion"] == "2025-06-18"
    future = Legacy(http, url)
    assert (await future.initialize("2099-01-01"))["protocolVersion"] == LEGACY
    assert old.session != future.session

    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    missing, _ = await post(http, url, listing, status=400)
    assert missing["error"]["code"] == -32600
    assert "Mcp-Session-Id" in missing["error"]["message"]
    unknown, _ = await post(http, url, listing, {"Mcp-Session-Id": "nope"}, status=404)
    assert unknown["id"] == 1
    # DELETE ends a session
    assert old.session is not None
    async with http.delete(url, headers={"Mcp-Session-Id": old.session}) as resp:
        assert resp.status == 204
    gone, _ = await post(http, url, listing, {"Mcp-Session-Id": old.session}, status=404)
    assert gone["error"]["code"] == -32600
    async with http.delete(url, headers={"Mcp-Session-Id": old.session}) as resp:
        assert resp.status == 404
    async with http.delete(url) as resp:
        assert resp.status == 400
    # no server-initiated stream
    async with http.get(url, headers={"Accept": "text/event-stream"}) as resp:
        assert resp.status == 405
        assert "POST" in resp.headers["Allow"]
    bad_init, _ = await post(
        http, url, {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}}
    )
    assert bad_init["error"]["code"] == -32602


async def test_malformed_bodies(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    url = endpoint(gw)
    client = Legacy(http, url)
    await client.initialize()
    for headers in (client.headers(), {"MCP-Protocol-Version": MODERN}):
        parse, _ = await post(http, url, b"{not json", headers, raw=True, status=400)
        assert parse == {"jsonrpc": "2.0", "id": None, "error": parse["error"]}
        assert parse["error"]["code"] == -32700
        for body in (b"[]", b"[1, 2]", b"42", b'"x"', b"null"):
            bad, _ = await post(http, url, body, headers, raw=True, status=400)
            assert bad["error"]["code"] == -32600, body
            assert bad["id"] is None
        for req in (
            {},
            {"id": 1},
            {"jsonrpc": "2.0", "params": {}},
            {"jsonrpc": "1.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": None, "method": "ping"},
            {"jsonrpc": "2.0", "id": True, "method": "ping"},
            {"jsonrpc": "2.0", "id": 1, "method": 7},
        ):
            bad, _ = await post(http, url, req, headers, status=400)
            assert bad["error"]["code"] == -32600, req
    # JSON without any Content-Type is read as JSON
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}).encode()
    pong, _ = await post(http, url, body, client.headers(), raw=True)
    assert pong == {"jsonrpc": "2.0", "id": 9, "result": {}}
    # a posted JSON-RPC response (we send no requests) is accepted and dropped
    async with http.post(
        url, json={"jsonrpc": "2.0", "id": 5, "result": {}}, headers=client.headers()
    ) as resp:
        assert resp.status == 202
    # oversized
    big = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "' + b"a" * 3_000_000 + b'"}'
    huge, _ = await post(http, url, big, client.headers(), raw=True, status=413)
    assert huge["error"]["code"] == -32600


# -- 2026-07-28 ----------------------------------------------------------------------


async def test_modern_discover_list_and_call(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    url = endpoint(gw)
    found = (await modern(http, url, "server/discover"))["result"]
    assert found["supportedVersions"] == [MODERN]
    assert found["capabilities"]["tools"] == {"listChanged": False}
    assert found["cacheScope"] == "public"
    assert found["ttlMs"] == 0

    listed = (await modern(http, url, "tools/list"))["result"]
    names = [t["name"] for t in listed["tools"]]
    assert names == sorted(names)
    assert "mcp-calc" in names
    assert listed["ttlMs"] == 0

    added = (
        await modern(http, url, "tools/call", {"name": "mcp-calc", "arguments": {"a": 4, "b": 5}})
    )["result"]
    assert added["structuredContent"] == {"total": 9}
    assert added["isError"] is False
    failed = (
        await modern(http, url, "tools/call", {"name": "mcp-calc", "arguments": {"a": -4, "b": 5}})
    )["result"]
    assert failed["isError"] is True
    # stateless: a new conversation per call, unless _meta names one
    first = (
        await modern(http, url, "tools/call", {"name": "gw-echo.dict", "arguments": {"n": 1}})
    )["result"]
    ctx = first["_meta"]["io.actorbus/task"]["contextId"]
    assert first["structuredContent"] == {"echo": {"n": 1}, "session": ctx}
    second = (
        await modern(
            http,
            url,
            "tools/call",
            {"name": "gw-echo.dict", "arguments": {"n": 2}},
            meta={"io.actorbus/contextId": ctx},
        )
    )["result"]
    assert second["structuredContent"] == {"echo": {"n": 2}, "session": ctx}
    # Mcp-Name may come base64-wrapped
    wrapped = "=?base64?" + base64.b64encode(b"gw-echo.text").decode() + "?="
    shout = (
        await modern(
            http,
            url,
            "tools/call",
            {"name": "gw-echo.text", "arguments": {"text": "yo"}},
            headers={"Mcp-Name": wrapped},
        )
    )["result"]
    assert text_of(shout) == "YO"


async def test_modern_errors(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    url = endpoint(gw)
    bad = await modern(http, url, "tools/call", {"name": "mcp-calc", "arguments": {"a": "x"}})
    assert bad["result"]["isError"] is True  # the model reads it (SEP-1303)
    assert bad["id"] == "m1"
    unknown = await modern(http, url, "tools/call", {"name": "nobody"}, status=400)
    assert "Unknown tool" in unknown["error"]["message"]
    for method in ("initialize", "ping", "logging/setLevel"):
        missing = await modern(http, url, method, status=404)
        assert missing["error"]["code"] == -32601

    def req(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}

    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    # no _meta envelope
    no_meta, _ = await post(http, url, req("tools/list", {}), headers, status=400)
    assert no_meta["error"]["code"] == -32602
    assert no_meta["id"] == 7
    half = {"io.modelcontextprotocol/protocolVersion": MODERN}
    partial, _ = await post(http, url, req("tools/list", {"_meta": half}), headers, status=400)
    assert "clientCapabilities" in partial["error"]["message"]
    # headers that disagree with the body
    for wrong in (
        {"Mcp-Method": "tools/call"},
        {"Mcp-Method": ""},
    ):
        mismatch, _ = await post(
            http, url, req("tools/list", {"_meta": CLIENT_META}), {**headers, **wrong}, status=400
        )
        assert mismatch["error"]["code"] == -32020, wrong
    named = req("tools/call", {"_meta": CLIENT_META, "name": "mcp-calc", "arguments": {}})
    call_headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}
    for extra in ({}, {"Mcp-Name": "gw-echo.text"}):
        mismatch, _ = await post(http, url, named, {**call_headers, **extra}, status=400)
        assert mismatch["error"]["code"] == -32020
    other_version = {**CLIENT_META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}
    mismatch, _ = await post(
        http, url, req("tools/list", {"_meta": other_version}), headers, status=400
    )
    assert mismatch["error"]["code"] == -32020
    # an unknown version: -32022 with what is supported
    future = {**CLIENT_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    unsupported, _ = await post(
        http,
        url,
        req("tools/list", {"_meta": future}),
        {**headers, "MCP-Protocol-Version": "2099-01-01"},
        status=400,
    )
    assert unsupported["error"]["code"] == -32022
    assert MODERN in unsupported["error"]["data"]["supported"]
    assert LEGACY in unsupported["error"]["data"]["supported"]
    assert unsupported["error"]["data"]["requested"] == "2099-01-01"
    # notifications are acknowledged and dropped
    async with http.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        headers={"MCP-Protocol-Version": MODERN},
    ) as resp:
        assert resp.status == 202
    async with http.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/cancelled"},
        headers={"MCP-Protocol-Version": "2099-01-01"},
    ) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32022


async def test_tools_follow_the_registry(
    gw: GatewayService, http: aiohttp.ClientSession, make_system: Any
) -> None:
    """A new actor type is a new tool at once: tools are read from the registry mirror."""

    class McpLate(Actor):
        """Arrived later."""

        type_name = "mcp-late"

        @handler
        async def go(self, text: str) -> str:
            return text[::-1]

    from _gateway import wait_agents

    system: ActorSystem = await make_system()
    await system.spawn(McpLate, "1")
    await wait_agents(gw, "mcp-late")
    listed = (await modern(http, endpoint(gw), "tools/list"))["result"]
    assert "mcp-late" in [t["name"] for t in listed["tools"]]
    late = (
        await modern(
            http, endpoint(gw), "tools/call", {"name": "mcp-late", "arguments": {"text": "abc"}}
        )
    )["result"]
    assert text_of(late) == "cba"


async def test_tools_paging(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    from actorbus.services.gateway.edges import mcp

    url = endpoint(gw)
    everything = (await modern(http, url, "tools/list"))["result"]["tools"]
    edge = next(e for e in gw._edges if isinstance(e, mcp.McpEdge))
    edge.page_size = 2
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"cursor": cursor} if cursor is not None else {}
        page = (await modern(http, url, "tools/list", params))["result"]
        assert len(page["tools"]) <= 2
        seen += [t["name"] for t in page["tools"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert seen == [t["name"] for t in everything]


async def test_agents_as_resources(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    """The UAP mapping's agent information: one resource per agent, in both revisions."""
    url = endpoint(gw)
    client = Legacy(http, url)
    init = await client.initialize()
    assert init["capabilities"]["resources"] == {"subscribe": False, "listChanged": False}
    listed = (await client.rpc("resources/list"))["result"]
    uris = {r["uri"]: r for r in listed["resources"]}
    calc = uris["actorbus://agents/mcp-calc"]
    assert calc["name"] == "mcp-calc"
    assert calc["mimeType"] == "application/json"
    assert calc["description"].startswith("Adds two integers")
    if validate_server_result is not None:
        validate_server_result("resources/list", LEGACY, listed)
    read = (await client.rpc("resources/read", {"uri": "actorbus://agents/mcp-calc"}))["result"]
    if validate_server_result is not None:
        validate_server_result("resources/read", LEGACY, read)
    info = json.loads(read["contents"][0]["text"])
    assert info["name"] == "mcp-calc"
    assert info["tools"] == ["mcp-calc"]
    assert info["skills"][0]["id"] == "arithmetic"
    assert set(info["intents"]["Add"]["required"]) == {"a", "b"}
    echo = json.loads(
        (await client.rpc("resources/read", {"uri": "actorbus://agents/gw-echo"}))["result"][
            "contents"
        ][0]["text"]
    )
    assert echo["tools"] == ["gw-echo.dict", "gw-echo.text"]
    missing = await client.rpc("resources/read", {"uri": "actorbus://agents/nobody"})
    assert missing["error"]["code"] == -32602
    assert missing["error"]["data"] == {"uri": "actorbus://agents/nobody"}

    found = (await modern(http, url, "server/discover"))["result"]
    assert found["capabilities"]["resources"] == {"subscribe": False, "listChanged": False}
    listed = (await modern(http, url, "resources/list"))["result"]
    assert "actorbus://agents/mcp-calc" in [r["uri"] for r in listed["resources"]]
    read = (await modern(http, url, "resources/read", {"uri": "actorbus://agents/mcp-calc"}))[
        "result"
    ]
    assert json.loads(read["contents"][0]["text"])["name"] == "mcp-calc"


async def test_legacy_cancel_notification_cancels_the_task(
    gw: GatewayService, http: aiohttp.ClientSession, probe: Probe
) -> None:
    """``notifications/cancelled`` for a call in flight cancels its task; the actor's
    stream sees the cancel and the call answers with the canceled task."""
    client = Legacy(http, endpoint(gw))
    await client.initialize()
    call = asyncio.create_task(
        client.rpc("tools/call", {"name": "gw-streamer", "arguments": {"text": "forever"}})
    )
    await asyncio.wait_for(probe.started.wait(), WAIT)
    async with http.post(
        endpoint(gw),
        json={
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": client.next_id, "reason": "enough"},
        },
        headers=client.headers(),
    ) as resp:
        assert resp.status == 202
    answer = (await asyncio.wait_for(call, WAIT))["result"]
    assert answer["isError"] is True
    assert answer["_meta"]["io.actorbus/task"]["state"] == "canceled"
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)


async def test_a_request_id_is_used_once_per_session(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    """MCP: "the request ID MUST NOT have been previously used ... within the same
    session": a captured request sent again is refused, not run twice."""
    client = Legacy(http, f"{gw.http_url}/mcp")
    await client.initialize()
    body = {
        "jsonrpc": "2.0",
        "id": 77,
        "method": "tools/call",
        "params": {"name": "gw-echo.text", "arguments": {"text": "once"}},
    }
    first, _ = await post(http, client.url, body, client.headers())
    assert "result" in first
    again, _ = await post(http, client.url, body, client.headers(), status=400)
    assert "a replay" in again["error"]["message"]
