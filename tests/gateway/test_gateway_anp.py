"""The gateway's ANP edge: agent description, did:wba documents, the DIDWba
header (resolved against a caller's did.json on a local server), JSON-RPC calls
and errors, and the `anp` package's own client against it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest
from _gateway import GatewayUnderTest, wait_agents
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from actorbus.security.did import did_document, parse_did
from actorbus.security.didwba import build_auth_header
from actorbus.security.keys import load_key
from actorbus.security.multibase import multikey
from actorbus.services.anp_e2ee import AnpE2eeAgent
from actorbus.services.gateway import GatewayService
from actorbus.services.gateway.edges.anp import KEY_SUFFIX
from actorbus.services.gateway.store import TaskQuery

AGENTS = ("gw-echo", "gw-streamer")


GATEWAY = GatewayUnderTest(agents=AGENTS, edges=("anp",))


class Caller:
    """An ANP caller: a did:wba identity whose did.json a local server serves."""

    def __init__(self) -> None:
        self.docs: dict[str, Any] = {}  # path -> DID document
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.key = ed25519.Ed25519PrivateKey.generate()
        self.did = ""

    async def start(self) -> None:
        async def serve(request: web.Request) -> web.Response:
            doc = self.docs.get(request.path)
            if doc is None:
                return web.Response(status=404)
            return web.json_response(doc)

        app = web.Application()
        app.router.add_get("/{tail:.*}", serve)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        self.did = self.add(["user", "alice"], self.key)

    def add(self, path: list[str], key: ed25519.Ed25519PrivateKey, host: str = "127.0.0.1") -> str:
        did = ":".join(["did:wba", f"{host}%3A{self.port}", *path])
        self.serve(did, did_document(did, key.public_key()))
        return did

    def serve(self, did: str, doc: dict[str, Any]) -> None:
        self.docs["/" + "/".join(parse_did(did).path) + "/did.json"] = doc

    def header(self, **kw: Any) -> dict[str, str]:
        kw.setdefault("now", datetime.now(UTC))
        key = kw.pop("key", self.key)
        did = kw.pop("did", self.did)
        aud = kw.pop("aud", "127.0.0.1")
        return {"Authorization": build_auth_header(did, key, aud, **kw)}


@pytest.fixture
async def caller() -> AsyncIterator[Caller]:
    c = Caller()
    await c.start()
    yield c
    assert c.runner is not None
    await c.runner.cleanup()


def rpc_url(gw: GatewayService, agent: str = "gw-echo") -> str:
    return f"{gw.http_url}/anp/{agent}/rpc"


def call(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def post(
    http: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str], status: int = 200
) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=raw, headers=headers) as resp:  # no Content-Type
        text = await resp.text()
        assert resp.status == status, text
        assert resp.content_type == "application/json"
        out: dict[str, Any] = json.loads(text)
        if status in (401, 403):
            challenge = resp.headers["WWW-Authenticate"]
            assert challenge.startswith('DIDWba realm="127.0.0.1"'), challenge
            out["challenge"] = challenge
        return out


# -- documents ---------------------------------------------------------------------------


async def test_description_and_did_document(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    assert gw.http_url is not None
    port = gw.http_url.rsplit(":", 1)[1]
    did = f"did:wba:127.0.0.1%3A{port}:anp:gw-echo"
    async with http.get(f"{gw.http_url}/anp/gw-echo/ad.json") as resp:
        assert resp.status == 200
        ad = await resp.json()
    assert ad["protocolType"] == "ANP"
    assert ad["did"] == did
    assert ad["name"] == "gw-echo"
    assert ad["description"].startswith("Echoes text")
    assert ad["securityDefinitions"]["didwba_sc"]["scheme"] == "didwba"
    (interface,) = ad["interfaces"]
    assert interface["protocol"] == "openrpc"
    openrpc = interface["content"]
    assert openrpc["servers"][0]["url"] == rpc_url(gw)
    assert {m["name"] for m in openrpc["methods"]} == {"text", "dict"}
    text = next(m for m in openrpc["methods"] if m["name"] == "text")
    assert text["params"][0]["name"] == "text"

    async with http.get(f"{gw.http_url}/anp/gw-echo/did.json") as resp:
        assert resp.status == 200
        doc = await resp.json()
    assert doc["id"] == did
    assert doc["authentication"] == [f"{did}#key-1"]
    assert doc["verificationMethod"][0]["publicKeyMultibase"].startswith("z6Mk")
    assert doc["service"][0]["serviceEndpoint"] == f"{gw.http_url}/anp/gw-echo/ad.json"
    # a did:wba resolver finds the document where the gateway serves it
    assert parse_did(did).document_url.endswith(f":{port}/anp/gw-echo/did.json")

    async with http.get(f"{gw.http_url}/anp") as resp:
        listed = {a["name"]: a for a in (await resp.json())["agents"]}
    assert listed["gw-echo"]["did"] == did
    async with http.get(f"{gw.http_url}/anp/nobody/ad.json") as resp:
        assert resp.status == 404
        assert (await resp.json())["error"] == "not_found"

    # the gateway's key is kept next to its database, and read back on the next start
    mode, saved = _saved_key(Path(str(gw.db_path) + KEY_SUFFIX))
    assert mode == 0o600
    assert doc["verificationMethod"][0]["publicKeyMultibase"] == saved


def _saved_key(path: Path) -> tuple[int, str]:
    """The key file's mode, and the Multikey of the key read back from it."""
    return path.stat().st_mode & 0o777, multikey(load_key(path).public_key())


# -- calls ---------------------------------------------------------------------------------


async def test_calls_sessions_and_input_required(
    gw: GatewayService, http: aiohttp.ClientSession, caller: Caller
) -> None:
    url = rpc_url(gw)
    out = await post(http, url, call("text", {"text": "hi there"}), caller.header())
    assert out == {"jsonrpc": "2.0", "id": 1, "result": {"payload": "HI THERE"}}
    out = await post(http, url, call("text", ["as a list"], rid="r2"), caller.header())
    assert out["id"] == "r2"
    assert out["result"] == {"payload": "AS A LIST"}
    out = await post(http, url, call("dict", {"n": 1}), caller.header())
    assert out["result"]["echo"] == {"n": 1}

    # an actorbus-aware caller names the session in params._meta and gets _meta back
    meta = {"_meta": {"context": {"session_id": "s-anp"}}}
    out = await post(http, url, call("text", {"text": "ask me", **meta}), caller.header())
    result = out["result"]
    assert result["payload"] == "what is your name?"
    assert result["_meta"]["context"]["session_id"] == "s-anp"
    assert result["_meta"]["dst"] == caller.did
    out = await post(http, url, call("text", {"text": "bob", **meta}), caller.header())
    assert out["result"]["payload"] == "HELLO BOB"

    # the caller's DID is on the task, one conversation was recorded
    assert gw.store is not None
    found, total = await gw.store.list_tasks(TaskQuery(agent="gw-echo", context_id="s-anp"))
    assert total == 1  # the follow-up continued the task that waited for input
    first = found[0].task.history
    assert first is not None
    assert first[0].metadata is not None
    assert first[0].metadata["anp"]["did"] == caller.did

    # a streaming handler is collected into one answer
    out = await post(
        http, rpc_url(gw, "gw-streamer"), call("text", {"text": "a b c"}), caller.header()
    )
    assert out["result"] == {"payload": "ABC"}

    # a notification runs and gets no body
    async with http.post(
        url,
        data=json.dumps({"jsonrpc": "2.0", "method": "text", "params": ["x"]}),
        headers=caller.header(),
    ) as resp:
        assert resp.status == 204


async def test_errors_are_jsonrpc(
    gw: GatewayService, http: aiohttp.ClientSession, caller: Caller
) -> None:
    url = rpc_url(gw)

    async def code(body: Any, status: int = 200, agent_url: str = url) -> tuple[int, Any]:
        out = await post(http, agent_url, body, caller.header(), status)
        assert "result" not in out, out
        assert out["jsonrpc"] == "2.0"
        return out["error"]["code"], out["id"]

    assert await code(b"{not json") == (-32700, None)
    assert await code(b"") == (-32700, None)
    assert await code([call("text", ["x"])]) == (-32600, None)
    assert await code({"id": 7, "hello": "there"}) == (-32600, 7)
    assert await code({"jsonrpc": "2.0", "id": 8, "method": 5}) == (-32600, 8)
    assert await code(call("nope", {}, 9)) == (-32601, 9)
    assert await code(call("$stop", {}, 10)) == (-32601, 10)
    assert await code(call("text", {"a": 1, "b": 2})) == (-32602, 1)
    assert await code(call("text", ["x"]), 404, rpc_url(gw, "nobody")) == (-32002, 1)
    out = await post(http, url, call("text", {"text": "fail"}), caller.header())
    assert out["error"]["code"] == -32603
    assert out["error"]["data"]["code"] == "E_HANDLER"
    assert "asked to fail" in out["error"]["message"]
    out = await post(http, url, call("text", {"text": "hang"}), caller.header())
    assert out["error"]["code"] == -32010
    assert out["error"]["data"]["code"] == "E_TIMEOUT"


async def test_didwba_failures_are_401(
    gw: GatewayService, http: aiohttp.ClientSession, caller: Caller
) -> None:
    url = rpc_url(gw)
    body = call("text", {"text": "hi"}, 3)

    async def refused(headers: dict[str, str], problem: str, status: int = 401) -> None:
        out = await post(http, url, body, headers, status)
        assert f'error="{problem}"' in out["challenge"], out["challenge"]
        assert out["error"]["code"] == (-32001 if status == 403 else -32000)
        assert out["error"]["data"]["code"] == "E_AUTH"
        assert out["id"] is None  # refused before the body was read

    await refused({}, "invalid_request")
    await refused({"Authorization": "Bearer abc"}, "invalid_request")
    await refused({"Authorization": 'DIDWba did="x"'}, "invalid_request")
    other = ed25519.Ed25519PrivateKey.generate()
    await refused(caller.header(key=other), "invalid_signature")
    await refused(caller.header(aud="example.com"), "invalid_signature")
    old = datetime.now(UTC) - timedelta(minutes=10)
    await refused(caller.header(now=old), "invalid_timestamp")
    # a DID nobody serves, and a DID whose document names another DID
    ghost = f"did:wba:127.0.0.1%3A{caller.port}:user:ghost"
    await refused(caller.header(did=ghost), "invalid_did")
    liar = f"did:wba:127.0.0.1%3A{caller.port}:user:liar"
    caller.serve(liar, did_document(caller.did, caller.key.public_key()))
    await refused(caller.header(did=liar), "invalid_did")
    # https only, except for loopback hosts: an outside host is fetched over HTTPS
    remote = "did:wba:anp-test.invalid:user:x"
    await refused(caller.header(did=remote), "invalid_did")
    # a key listed, but not for authentication
    helper = f"did:wba:127.0.0.1%3A{caller.port}:user:helper"
    doc = did_document(helper, caller.key.public_key())
    doc["authentication"] = []
    caller.serve(helper, doc)
    await refused(caller.header(did=helper), "invalid_verification_method", 403)

    # a header is good once: the replay is refused
    header = caller.header()
    out = await post(http, url, body, header)
    assert out["result"] == {"payload": "HI"}
    await refused(header, "invalid_nonce")


async def test_the_caller_is_proved_before_the_body_is_read(
    gw: GatewayService, http: aiohttp.ClientSession, caller: Caller
) -> None:
    """Nobody unproved gets the gateway to read, decode or parse a body: a body over
    the size limit, one nested 10,000 deep and one that is not UTF-8 all answer 401
    without a signature, and the same deep body from a proved caller is a -32700."""
    url = rpc_url(gw)
    too_big = b"[" + b"1," * gw.settings.max_body + b"1]"
    for body in (too_big, b"[" * 10_000, b'{"a": "\xff\xfe"}'):
        out = await post(http, url, body, {}, 401)
        assert 'error="invalid_request"' in out["challenge"]
        assert out["error"]["data"]["code"] == "E_AUTH"
    async with http.post(url, data=too_big, headers=caller.header()) as resp:
        assert resp.status == 413  # proved, then measured
        assert (await resp.json())["error"]["code"] == -32600
    out = await post(http, url, b"[" * 10_000, caller.header())
    assert out["error"]["code"] == -32700
    out = await post(http, url, b"\xff\xfe{}", caller.header())
    assert out["error"]["code"] == -32700


# -- the anp package's client ------------------------------------------------------------


async def test_anp_client_with_didwba_header(
    gw: GatewayService, caller: Caller, tmp_path: Path
) -> None:
    pytest.importorskip("anp", reason="the anp package (PyPI anp 1.0.7) is not installed")
    from anp.anp_crawler.anp_client import ANPClient  # type: ignore[import-untyped]
    from anp.authentication import create_did_wba_document  # type: ignore[import-untyped]

    # 1. our did:wba identity (127.0.0.1: anp's generator refuses IP hosts), anp's header
    doc_path, key_path = tmp_path / "did.json", tmp_path / "key.pem"
    doc_path.write_text(json.dumps(caller.docs["/user/alice/did.json"]))
    key_path.write_bytes(
        caller.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    client = ANPClient(str(doc_path), str(key_path))
    assert client.auth_client is not None
    client.auth_client.auth_mode = "legacy_didwba"  # the DIDWba Authorization header
    out = await client.call_jsonrpc(rpc_url(gw), "text", {"text": "from anp"})
    assert out["success"], out
    assert out["result"] == {"payload": "FROM ANP"}

    # 2. an identity made by anp itself: key-bound e1_ DID on localhost, Ed25519 Multikey
    doc, keys = create_did_wba_document(
        "localhost", port=caller.port, path_segments=["user", "bob"], enable_e2ee=False
    )
    assert doc["id"].startswith(f"did:wba:localhost%3A{caller.port}:user:bob:e1_")
    caller.serve(doc["id"], doc)
    doc_path.write_text(json.dumps(doc))
    key_path.write_bytes(keys["key-1"][0])
    client = ANPClient(str(doc_path), str(key_path))
    assert client.auth_client is not None
    client.auth_client.auth_mode = "legacy_didwba"
    out = await client.call_jsonrpc(rpc_url(gw), "dict", {"city": "Paris"})
    assert out["success"], out
    assert out["result"]["echo"] == {"city": "Paris"}

    # an anp error answer reaches the client as a JSON-RPC error
    out = await client.call_jsonrpc(rpc_url(gw), "nope", {})
    assert not out["success"]
    assert out["error"]["code"] == -32601


async def test_anp_client_with_http_signatures(
    gw: GatewayService, http: aiohttp.ClientSession, caller: Caller, tmp_path: Path
) -> None:
    """anp 1.x's default: RFC 9421 HTTP message signatures instead of the header."""
    pytest.importorskip("anp", reason="the anp package (PyPI anp 1.0.7) is not installed")
    from anp.anp_crawler.anp_client import ANPClient
    from anp.authentication import DIDWbaAuthHeader, create_did_wba_document

    doc, keys = create_did_wba_document(
        "localhost", port=caller.port, path_segments=["user", "eve"], enable_e2ee=False
    )
    caller.serve(doc["id"], doc)
    doc_path, key_path = tmp_path / "did.json", tmp_path / "key.pem"
    doc_path.write_text(json.dumps(doc))
    key_path.write_bytes(keys["key-1"][0])
    client = ANPClient(str(doc_path), str(key_path))  # auth_mode "http_signatures"
    out = await client.call_jsonrpc(rpc_url(gw), "text", {"text": "signed"})
    assert out["success"], out
    assert out["result"] == {"payload": "SIGNED"}

    # the signature binds the body and the target: a changed body or URL is refused
    signer = DIDWbaAuthHeader(str(doc_path), str(key_path))
    body = json.dumps(call("text", {"text": "x"})).encode()
    signed = signer.get_auth_header(rpc_url(gw), method="POST", body=body)
    out = await post(http, rpc_url(gw), body.replace(b'"x"', b'"y"'), signed, 401)
    assert 'error="invalid_signature"' in out["challenge"]
    other = rpc_url(gw, "gw-streamer")
    out = await post(http, other, body, signed, 401)
    assert 'error="invalid_signature"' in out["challenge"]
    out = await post(http, rpc_url(gw), body, signed)
    assert out["result"] == {"payload": "X"}
    out = await post(http, rpc_url(gw), body, signed, 401)  # once only
    assert 'error="invalid_nonce"' in out["challenge"]


# -- end to end, with the anp SDK's HPKE sessions ------------------------------------------


class Confidant(AnpE2eeAgent):
    """Answers in the clear only inside an end-to-end session."""

    type_name = "confidant"
    heard: ClassVar[list[str]] = []

    async def on_e2ee(self, kind: str, text: str) -> str:
        Confidant.heard.append(text)
        return f"{kind}: {text.upper()}"


async def test_an_anp_sdk_client_and_an_actor_talk_end_to_end(
    gw: GatewayService,
    http: aiohttp.ClientSession,
    caller: Caller,
    make_system: Any,
    ns: str,
) -> None:
    """The SDK opens an HPKE session with the actor's key from the agent's DID
    document; the gateway, its task store and NATS see only ciphertext, both ways."""
    hpke = pytest.importorskip("anp.e2e_encryption_hpke")
    from anp.authentication import create_did_wba_document

    host = await make_system()
    await host.spawn(Confidant, "1")
    await wait_agents(gw, "confidant")
    doc, keys = create_did_wba_document(
        "localhost", port=caller.port, path_segments=["user", "carol"], enable_e2ee=True
    )
    caller.serve(doc["id"], doc)
    did = doc["id"]
    ed_key = serialization.load_pem_private_key(keys["key-1"][0], password=None)
    sign_key = serialization.load_pem_private_key(keys["key-2"][0], password=None)
    agree_key = serialization.load_pem_private_key(keys["key-3"][0], password=None)
    base = f"{gw.http_url}/anp/confidant"
    async with http.get(f"{base}/did.json") as resp:
        agent_doc = await resp.json()
    peer_key, peer_key_id = hpke.extract_x25519_public_key_from_did_document(agent_doc)
    session = hpke.E2eeHpkeSession(
        local_did=did,
        peer_did=agent_doc["id"],
        local_x25519_private_key=agree_key,
        local_x25519_key_id=f"{did}#key-3",
        signing_private_key=sign_key,
        signing_verification_method=f"{did}#key-2",
    )
    secret = "the launch code is 4111-1111"
    _, init = session.initiate_session(peer_key, peer_key_id)

    async def rpc(method: str, params: Any) -> dict[str, Any]:
        header = caller.header(did=did, key=ed_key)
        out = await post(http, f"{base}/rpc", call(method, params), header)
        assert "result" in out, out
        result: dict[str, Any] = out["result"]
        return result

    ack = await rpc("e2ee_init", init)
    assert ack.get("session_id") == session.session_id
    _, sealed = session.encrypt_message("text", secret)
    answer = await rpc("e2ee_msg", sealed)
    assert session.decrypt_message(answer) == ("text", f"text: {secret.upper()}")
    assert Confidant.heard == [secret]
    # the gateway relayed ciphertext: its task store never held the secret
    found, _ = await gw.store.list_tasks(TaskQuery(agent="confidant"))
    assert found
    assert all(secret not in repr(t.task) and secret.upper() not in repr(t.task) for t in found)
    # a message of a session the actor never opened is refused
    stranger = hpke.E2eeHpkeSession(
        local_did=did,
        peer_did=agent_doc["id"],
        local_x25519_private_key=agree_key,
        local_x25519_key_id=f"{did}#key-3",
        signing_private_key=sign_key,
        signing_verification_method=f"{did}#key-2",
    )
    stranger.initiate_session(peer_key, peer_key_id)
    _, unknown = stranger.encrypt_message("text", "hello?")
    header = caller.header(did=did, key=ed_key)
    out = await post(http, f"{base}/rpc", call("e2ee_msg", unknown), header)
    assert "error" in out
