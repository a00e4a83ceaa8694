"""The gateway's Agora edge: messages, multiround conversations, protocol hashes
(hex and base64, data: and http sources), both error shapes, and the
`agora-protocol` SDK's sender (run from its own venv, .venv-agora) against it."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import GatewayUnderTest
from _util import child_env
from aiohttp import web

from actorbus.codecs.agora import data_uri, decode_reply, protocol_document, protocol_hash
from actorbus.codecs.common import INTENT_ERROR
from actorbus.services.gateway import GatewayService

AGENTS = ("gw-echo", "gw-streamer")
SDK_PYTHON = Path(__file__).resolve().parents[2] / ".venv-agora" / "bin" / "python"
DOC = protocol_document("shout", "Say a word; hear it in capitals", "Send one word.")


GATEWAY = GatewayUnderTest(agents=AGENTS, edges=("agora",))


def url(gw: GatewayService, agent: str = "gw-echo") -> str:
    return f"{gw.http_url}/agora/{agent}"


def request(
    body: str, *, digest: str | None = None, sources: list[str] | None = None, multi: bool = False
) -> dict[str, Any]:
    return {
        "body": body,
        "protocolHash": digest,
        "protocolSources": sources or [],
        "multiround": multi,
    }


async def post(
    http: aiohttp.ClientSession, target: str, body: Any, status: int = 200
) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(target, data=raw) as resp:  # no Content-Type, as some senders do
        text = await resp.text()
        assert resp.status == status, text
        assert resp.content_type == "application/json"
        out: dict[str, Any] = json.loads(text)
        return out


def failure(reply: dict[str, Any], code: str) -> str:
    """The error text of either error shape; the codec reads it back as ``code``."""
    assert reply["status"] in ("failure", "error"), reply
    assert "body" in reply  # the SDK's sender reads it whatever the status
    env = decode_reply(reply)
    assert env.intent == INTENT_ERROR
    assert env.content["code"] == code, env.content
    text: str = reply.get("error") or reply["message"]
    assert text.startswith(code + ": ")
    return text


async def test_single_round(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    reply = await post(http, url(gw), request("hello agora"))
    assert reply == {"status": "success", "body": "HELLO AGORA"}
    # a streaming handler's items are one body
    reply = await post(http, url(gw, "gw-streamer"), request("a b c"))
    assert reply == {"status": "success", "body": "ABC"}
    async with http.get(f"{gw.http_url}/agora") as resp:
        names = [a["name"] for a in (await resp.json())["agents"]]
    assert set(AGENTS) <= set(names)


async def test_multiround_conversation(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    reply = await post(http, url(gw), request("ask me", multi=True))
    assert reply["status"] == "success"
    assert reply["body"] == "what is your name?"
    cid = reply["conversationId"]
    assert reply["conversationExpires"].endswith("Z")
    follow = f"{url(gw)}/conversations/{cid}"
    reply = await post(http, follow, request("bob"))
    assert reply == {
        "status": "success",
        "body": "HELLO BOB",
        "conversationId": cid,
        "conversationExpires": reply["conversationExpires"],
    }
    # one session: the follow-up answered the actor's question in the same task
    assert gw.store is not None
    conv = await gw.store.get_conversation(cid, "gw-echo")
    assert conv is not None
    assert conv.turns == 2
    # another agent does not know this conversation
    failure(
        await post(http, f"{url(gw, 'gw-streamer')}/conversations/{cid}", request("x")),
        "E_NOT_FOUND",
    )
    async with http.delete(follow) as resp:
        assert resp.status == 200
        assert await resp.json() == {"status": "success"}
    failure(await post(http, follow, request("again")), "E_NOT_FOUND")
    async with http.delete(f"{url(gw)}/conversations/never") as resp:  # as the SDK: success
        assert resp.status == 200
    failure(await post(http, f"{url(gw)}/conversations/never", request("x")), "E_NOT_FOUND")


async def test_protocol_hashes(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    hex_hash, b64_hash = protocol_hash(DOC), protocol_hash(DOC, style="base64")
    sdk_source = "data:text/plain;charset=utf-8;base64," + base64.b64encode(DOC.encode()).decode()
    for digest, source in ((hex_hash, data_uri(DOC)), (b64_hash, sdk_source)):
        reply = await post(http, url(gw), request("word", digest=digest, sources=[source]))
        assert reply == {"status": "success", "body": "WORD"}

    # a protocol document served over http
    async def serve(request: web.Request) -> web.Response:
        return web.Response(text=DOC)

    app = web.Application()
    app.router.add_get("/protocol.md", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        other = protocol_document("other", "another protocol", "Say anything.")
        source = f"http://127.0.0.1:{runner.addresses[0][1]}/protocol.md"
        # the first source does not match, the second does
        sources = [data_uri(other), source]
        reply = await post(http, url(gw), request("web", digest=hex_hash.upper(), sources=sources))
        assert reply["body"] == "WEB"
    finally:
        await runner.cleanup()

    # a hash no source matches: the spec's failure (hex) or the SDK's error (base64)
    wrong = protocol_hash("something else")
    reply = await post(http, url(gw), request("x", digest=wrong, sources=[data_uri(DOC)]))
    assert reply["status"] == "failure"
    assert "does not hash to protocolHash" in failure(reply, "E_VALIDATION")
    wrong64 = protocol_hash("something else", style="base64")
    reply = await post(http, url(gw), request("x", digest=wrong64))
    assert reply["status"] == "error"
    failure(reply, "E_VALIDATION")
    reply = await post(http, url(gw), request("x", digest="not-a-hash"))
    failure(reply, "E_DECODE")
    reply = await post(http, url(gw), request("x", digest=wrong, sources=["ftp://x/y"]))
    failure(reply, "E_VALIDATION")


async def test_malformed_and_failing(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    failure(await post(http, url(gw), b"{nope"), "E_DECODE")
    failure(await post(http, url(gw), b""), "E_DECODE")
    failure(await post(http, url(gw), ["body"]), "E_DECODE")
    failure(await post(http, url(gw), {"protocolHash": None}), "E_DECODE")
    failure(await post(http, url(gw), {"body": 5}), "E_DECODE")
    failure(await post(http, url(gw, "nobody"), request("x"), 404), "E_NOT_FOUND")
    text = failure(await post(http, url(gw), request("fail")), "E_HANDLER")
    assert "asked to fail" in text
    failure(await post(http, url(gw), request("hang")), "E_TIMEOUT")


# -- the agora-protocol SDK's sender --------------------------------------------------

SDK_SCRIPT = r"""
import json, sys
from agora.sender.components.transporter import SimpleSenderTransporter
from agora.utils import compute_hash, encode_as_data_uri

target, doc = sys.argv[1], sys.argv[2]
t = SimpleSenderTransporter()
out = {}
plain = t.new_conversation(target, False, None, [])
out["plain"] = plain("hello sdk")
conv = t.new_conversation(target, True, compute_hash(doc), [encode_as_data_uri(doc)])
out["first"] = conv("ask me")
out["second"] = conv("carol")
out["conversation"] = conv._conversation_id
conv.close()
bad = t.new_conversation(target, False, compute_hash("other"), [encode_as_data_uri(doc)])
out["bad"] = bad("x")
print(json.dumps(out))
"""


async def test_agora_sdk_sender(gw: GatewayService) -> None:
    if not SDK_PYTHON.exists():
        pytest.skip(f"agora-protocol is installed in its own venv, {SDK_PYTHON} is missing")
    proc = await asyncio.create_subprocess_exec(
        str(SDK_PYTHON),
        "-W",
        "ignore",
        "-c",
        SDK_SCRIPT,
        url(gw),
        DOC,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()[-2000:]
    got = json.loads(out)
    assert got["plain"] == {"status": "success", "body": "HELLO SDK"}
    assert got["first"] == {"status": "success", "body": "what is your name?"}
    assert got["second"] == {"status": "success", "body": "HELLO CAROL"}
    assert got["conversation"]
    assert got["bad"]["status"] == "error"  # the SDK's own error shape for an SDK sender
    assert got["bad"]["body"] is None
