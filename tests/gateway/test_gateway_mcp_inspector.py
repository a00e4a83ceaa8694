"""The MCP inspector's CLI (``@modelcontextprotocol/inspector --cli``, from npm) lists
and calls the gateway's tools over streamable HTTP, reads its resources, and finds
its tool schemas portable (``--strict``). Also: answers as SSE for a client that
reads only event streams."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from _gateway import GatewayUnderTest
from _js import JS, needs_js, run_node
from test_gateway_mcp import AGENTS, host_mcp_agents

from actorbus.services.gateway import GatewayService

pytestmark = needs_js("@modelcontextprotocol/inspector")

GATEWAY = GatewayUnderTest(agents=AGENTS, edges=("a2a", "mcp"), host=host_mcp_agents)


async def inspect(gw: GatewayService, *args: str, exit: int = 0) -> Any:
    """One inspector CLI run against the gateway's MCP endpoint, ending with the exit
    code ``exit`` (5: a tool result with isError, 1: an error); its JSON output."""
    inspector = str(JS / "node_modules" / ".bin" / "mcp-inspector")
    code, out, err = await run_node(inspector, "--cli", f"{gw.http_url}/mcp", *args)
    assert code == exit, f"inspector {args}: exit {code}\n{out[-2000:]}\n{err[-2000:]}"
    return json.loads(out if out.strip() else err.strip().splitlines()[-1])


async def test_the_inspector_lists_and_calls_tools(gw: GatewayService) -> None:
    listed = await inspect(gw, "--method", "tools/list", "--strict")  # strict: exit 6 if not
    tools = {t["name"]: t for t in listed["tools"]}
    assert {"gw-echo.text", "gw-echo.dict", "gw-streamer", "mcp-calc", "mcp-asker"} <= set(tools)
    assert tools["mcp-calc"]["outputSchema"]["properties"]["total"]["type"] == "integer"
    assert tools["mcp-asker"]["description"] == "Asks for a name, then greets. Skills: text"

    added = await inspect(
        gw, "--method", "tools/call", "--tool-name", "mcp-calc", "--tool-arg", "a=2", "b=3"
    )
    assert added["isError"] is False
    assert added["structuredContent"] == {"total": 5}
    shout = await inspect(
        gw, "--method", "tools/call", "--tool-name", "gw-echo.text", "--tool-arg", "text=hi"
    )
    assert shout["content"] == [{"type": "text", "text": "HI"}]

    # a question from the actor is an answer whose _meta names the task to continue
    asked = await inspect(
        gw, "--method", "tools/call", "--tool-name", "mcp-asker", "--tool-arg", "text=hi"
    )
    assert asked["_meta"]["io.actorbus/task"]["state"] == "input-required"
    assert asked["content"] == [{"type": "text", "text": "who are you?"}]

    # an actor's failure is a tool result with isError; bad arguments a protocol error
    failed = await inspect(
        gw,
        "--method",
        "tools/call",
        "--tool-name",
        "mcp-calc",
        "--tool-arg",
        "a=-1",
        "b=1",
        exit=5,
    )
    assert failed["isError"] is True
    assert "negative numbers" in failed["content"][0]["text"]
    bad = await inspect(
        gw,
        "--method",
        "tools/call",
        "--tool-name",
        "mcp-calc",
        "--tool-arg",
        "a=x",
        "b=3",
        exit=5,  # a result with isError (SEP-1303), as the inspector reports a tool's error
    )
    assert bad["isError"] is True
    assert "Invalid arguments for tool mcp-calc: arguments.a" in bad["content"][0]["text"]


async def test_the_inspector_reads_agents_as_resources(gw: GatewayService) -> None:
    listed = await inspect(gw, "--method", "resources/list")
    uris = [r["uri"] for r in listed["resources"]]
    assert "actorbus://agents/mcp-calc" in uris
    read = await inspect(gw, "--method", "resources/read", "--uri", "actorbus://agents/mcp-calc")
    info = json.loads(read["contents"][0]["text"])
    assert info["tools"] == ["mcp-calc"]


async def test_answers_come_as_sse_to_a_client_that_reads_only_streams(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    url = f"{gw.http_url}/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    }

    async def post(body: Any, accept: str, sid: str | None = None) -> aiohttp.ClientResponse:
        headers = {"Accept": accept, **({"Mcp-Session-Id": sid} if sid else {})}
        resp = await http.post(url, json=body, headers=headers)
        await resp.read()
        return resp

    streamed = await post(init, "text/event-stream")
    assert streamed.content_type == "text/event-stream"
    sid = streamed.headers["Mcp-Session-Id"]  # the session header rides the stream
    text = (await streamed.read()).decode()
    assert text.startswith("event: message\ndata: ")
    assert text.endswith("\n\n")
    answer = json.loads(text.split("data: ", 1)[1])
    assert answer["result"]["protocolVersion"] == "2025-11-25"

    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "mcp-calc", "arguments": {"a": 1, "b": 1}},
    }
    both = await post(call, "application/json, text/event-stream", sid)
    assert both.content_type == "application/json"  # a client that takes both: JSON
    assert (await both.json())["result"]["structuredContent"] == {"total": 2}
    errored = await post({**call, "id": 3, "method": "nope"}, "text/event-stream", sid)
    assert errored.content_type == "text/event-stream"  # a JSON-RPC error is an answer too
    assert json.loads((await errored.read()).decode().split("data: ", 1)[1])["error"]["code"] == (
        -32601
    )
    missing = await post(call, "text/event-stream")  # no session: HTTP 400, as JSON
    assert missing.status == 400
    assert missing.content_type == "application/json"
