"""The gateway's ACP edge over raw HTTP: agents, runs in sync/async/stream mode,
await/resume, cancellation reaching the actor, sessions, errors in ACP's shape,
SSE framing, and runs surviving a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _gateway import RUN_STREAM_EVENTS, GatewayUnderTest, Probe, running_gateway
from _util import WAIT

from actorbus.bus.server import EmbeddedServer
from actorbus.codecs.errors import (
    ActorNotFoundError,
    AskTimeoutError,
    ProtocolError,
    RemoteError,
    UnsupportedError,
)
from actorbus.services.gateway import GatewayService
from actorbus.services.gateway.egress_acp import AcpEgress, acp_session

AGENTS = ("gw-echo", "gw-streamer")
EDGES = ("a2a", "acp")


GATEWAY = GatewayUnderTest(agents=AGENTS, edges=EDGES)


def acp(gw: GatewayService) -> str:
    return f"{gw.http_url}/acp"


def run_request(agent: str, text: str, mode: str = "sync", **extra: Any) -> dict[str, Any]:
    return {
        "agent_name": agent,
        "input": [{"role": "user", "parts": [{"content_type": "text/plain", "content": text}]}],
        "mode": mode,
        **extra,
    }


def resume_request(text: str, mode: str = "sync") -> dict[str, Any]:
    parts = [{"content_type": "text/plain", "content": text}]
    return {"await_resume": {"type": "message", "message": {"parts": parts}}, "mode": mode}


async def post(
    http: aiohttp.ClientSession, url: str, body: Any, status: int = 200
) -> tuple[dict[str, Any], Any]:
    """POST JSON *without* a Content-Type (as the acp-sdk client does)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=raw, skip_auto_headers=["Content-Type"]) as resp:
        assert resp.status == status, await resp.text()
        assert resp.content_type == "application/json"
        data: dict[str, Any] = await resp.json()
        return data, resp.headers


async def get(http: aiohttp.ClientSession, url: str, status: int = 200) -> dict[str, Any]:
    async with http.get(url) as resp:
        assert resp.status == status, await resp.text()
        data: dict[str, Any] = await resp.json()
        return data


async def sse(
    http: aiohttp.ClientSession, url: str, body: Any, on_event: Any = None
) -> tuple[list[dict[str, Any]], Any]:
    events: list[dict[str, Any]] = []
    async with http.post(url, data=json.dumps(body).encode()) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "text/event-stream"
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                frame, buf = buf.split(b"\n\n", 1)
                assert frame.startswith(b"data: "), frame
                events.append(json.loads(frame[len(b"data: ") :]))
                if on_event is not None:
                    await on_event(events[-1])
        assert buf == b"", f"a frame did not end with a blank line: {buf!r}"
        return events, resp.headers


def texts(run: dict[str, Any]) -> list[str]:
    return [p["content"] for m in run["output"] for p in m["parts"]]


async def settled(gw: GatewayService, run_id: str) -> None:
    live = gw.core.live(uuid.UUID(run_id).hex)
    if live is not None:
        await asyncio.wait_for(gw.core.wait_settled(live), WAIT)


async def initialized(egress: AcpEgress) -> None:
    """``initialize()``, then ``cleanup()`` whatever happened."""
    try:
        await egress.initialize()
    finally:
        await egress.cleanup()


# -- agents ------------------------------------------------------------------------------


async def test_ping_agents_and_manifests(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    assert await get(http, f"{acp(gw)}/ping") == {}
    listed = await get(http, f"{acp(gw)}/agents")
    names = [a["name"] for a in listed["agents"]]
    assert set(AGENTS) <= set(names)
    echo = await get(http, f"{acp(gw)}/agents/gw-echo")
    assert echo["name"] == "gw-echo"
    assert echo["metadata"]["capabilities"][0]["name"] == "echo"
    assert echo["metadata"]["tags"] == ["test"]
    assert "text/plain" in echo["input_content_types"]
    missing = await get(http, f"{acp(gw)}/agents/nobody", status=404)
    assert missing["code"] == "not_found"
    assert "nobody" in missing["message"]


# -- runs --------------------------------------------------------------------------------


async def test_sync_run_without_content_type(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    run, headers = await post(http, f"{acp(gw)}/runs", run_request("gw-echo", "hello"))
    assert run["status"] == "completed"
    assert headers["Run-ID"] == run["run_id"]
    assert uuid.UUID(run["run_id"])
    assert uuid.UUID(run["session_id"])
    assert run["agent_name"] == "gw-echo"
    assert run["output"][0]["role"] == "agent/gw-echo"
    assert texts(run) == ["HELLO"]
    assert run["created_at"]
    assert run["finished_at"]
    again = await get(http, f"{acp(gw)}/runs/{run['run_id']}")
    assert again == run
    events = (await get(http, f"{acp(gw)}/runs/{run['run_id']}/events"))["events"]
    assert [e["type"] for e in events] == [
        "run.created",
        "run.in-progress",
        "message.created",
        "message.part",
        "message.completed",
        "run.completed",
    ]
    # JSON content goes in as a JSON part and comes back as one
    data_req = {
        "agent_name": "gw-echo",
        "input": [{"parts": [{"content_type": "application/json", "content": '{"a": 1}'}]}],
        "session_id": run["session_id"],
    }
    data_run, _ = await post(http, f"{acp(gw)}/runs", data_req)
    part = data_run["output"][0]["parts"][0]
    assert part["content_type"] == "application/json"
    assert json.loads(part["content"]) == {"echo": {"a": 1}, "session": run["session_id"]}
    # the session: both runs' messages, each readable at its URL
    session = await get(http, f"{acp(gw)}/sessions/{run['session_id']}")
    assert session["id"] == run["session_id"]
    assert len(session["history"]) == 4
    first = await get(http, session["history"][0])
    assert first == {"role": "user", "parts": [{"content_type": "text/plain", "content": "hello"}]}
    last = await get(http, session["history"][3])
    assert last["role"] == "agent/gw-echo"
    missing = await get(http, f"{acp(gw)}/sessions/{uuid.uuid4()}", status=404)
    assert missing["code"] == "not_found"


async def test_async_run_answers_202_then_completes(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    run, headers = await post(
        http, f"{acp(gw)}/runs", run_request("gw-echo", "later", "async"), status=202
    )
    assert run["status"] in ("created", "in-progress")
    assert headers["Run-ID"] == run["run_id"]
    await settled(gw, run["run_id"])
    done = await get(http, f"{acp(gw)}/runs/{run['run_id']}")
    assert done["status"] == "completed"
    assert texts(done) == ["LATER"]


async def test_stream_run_events_and_framing(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    events, headers = await sse(
        http, f"{acp(gw)}/runs", run_request("gw-streamer", "a b c", "stream")
    )
    kinds = [e["type"] for e in events]
    assert kinds == RUN_STREAM_EVENTS
    assert headers["Run-ID"] == events[0]["run"]["run_id"]
    assert [e["part"]["content"] for e in events if e["type"] == "message.part"] == ["A", "B", "C"]
    # the completed message and the run: the text items as one text
    assert [p["content"] for p in events[-2]["message"]["parts"]] == ["ABC"]
    assert texts(events[-1]["run"]) == ["ABC"]
    stored = await get(http, f"{acp(gw)}/runs/{events[0]['run']['run_id']}")
    assert stored["status"] == "completed"
    assert texts(stored) == ["ABC"]


async def test_await_and_resume_sync_and_stream(
    gw: GatewayService, http: aiohttp.ClientSession
) -> None:
    run, _ = await post(http, f"{acp(gw)}/runs", run_request("gw-echo", "ask me"))
    assert run["status"] == "awaiting"
    question = run["await_request"]["message"]
    assert question["parts"][0]["content"] == "what is your name?"
    rid = run["run_id"]
    # the body leaves run_id out: the URL names the run
    done, headers = await post(http, f"{acp(gw)}/runs/{rid}", resume_request("bob"))
    assert done["status"] == "completed", done
    assert headers["Run-ID"] == rid
    assert texts(done)[-1] == "HELLO BOB"
    assert done["session_id"] == run["session_id"]
    again, _ = await post(http, f"{acp(gw)}/runs/{rid}", resume_request("bob"), status=409)
    assert again["code"] == "invalid_input"
    # awaiting, then resumed in stream mode
    events, _ = await sse(http, f"{acp(gw)}/runs", run_request("gw-echo", "ask me", "stream"))
    assert events[-1]["type"] == "run.awaiting"
    rid2 = events[-1]["run"]["run_id"]
    assert events[-1]["run"]["await_request"]["message"]["parts"][0]["content"] == (
        "what is your name?"
    )
    resumed, _ = await sse(http, f"{acp(gw)}/runs/{rid2}", resume_request("ann", "stream"))
    assert resumed[0]["type"] == "run.in-progress"
    assert resumed[-1]["type"] == "run.completed"
    assert texts(resumed[-1]["run"])[-1] == "HELLO ANN"


async def test_cancel_reaches_the_actor(
    gw: GatewayService, http: aiohttp.ClientSession, probe: Probe
) -> None:
    cancelled: dict[str, Any] = {}

    async def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "message.part" and not cancelled:
            rid = await first_run_id
            body, _ = await post(http, f"{acp(gw)}/runs/{rid}/cancel", b"", status=202)
            cancelled.update(body)

    first_run_id: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def record(event: dict[str, Any]) -> None:
        if event["type"] == "run.created":
            first_run_id.set_result(event["run"]["run_id"])
        await on_event(event)

    events, _ = await sse(
        http, f"{acp(gw)}/runs", run_request("gw-streamer", "forever", "stream"), record
    )
    assert cancelled["status"] == "cancelled"
    assert events[-1]["type"] == "run.cancelled"
    await asyncio.wait_for(probe.cancelled.wait(), WAIT)  # the actor's generator saw it
    rid = first_run_id.result()
    assert (await get(http, f"{acp(gw)}/runs/{rid}"))["status"] == "cancelled"
    late, _ = await post(http, f"{acp(gw)}/runs/{rid}/cancel", b"", status=409)
    assert late["code"] == "invalid_input"


# -- errors ------------------------------------------------------------------------------


async def test_errors_in_acp_shape(gw: GatewayService, http: aiohttp.ClientSession) -> None:
    runs = f"{acp(gw)}/runs"
    for body, status, code in [
        (b"{not json", 422, "invalid_input"),
        ([1, 2], 422, "invalid_input"),
        ({"input": []}, 422, "invalid_input"),
        ({"agent_name": "gw-echo", "input": "x"}, 422, "invalid_input"),
        (run_request("gw-echo", "x", mode="sometimes"), 422, "invalid_input"),
        ({"agent_name": "gw-echo", "input": [{"parts": []}]}, 422, "invalid_input"),
        (run_request("nobody", "x"), 404, "not_found"),
    ]:
        err, _ = await post(http, runs, body, status=status)
        assert err["code"] == code, (body, err)
        assert isinstance(err["message"], str)
        assert "Traceback" not in err["message"]
    for path in (f"/runs/{uuid.uuid4()}", "/runs/not-a-uuid", "/runs/x/events", "/nowhere"):
        err = await get(http, acp(gw) + path, status=404)
        assert err["code"] == "not_found"
    err, _ = await post(http, f"{runs}/{uuid.uuid4()}", resume_request("x"), status=404)
    assert err["code"] == "not_found"
    err, _ = await post(http, f"{runs}/{uuid.uuid4()}", {"await_resume": 1}, status=422)
    assert err["code"] == "invalid_input"
    # actor failures are failed runs, with the error in the run
    failed, _ = await post(http, runs, run_request("gw-echo", "fail"))
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "server_error"
    assert "asked to fail" in failed["error"]["message"]
    timed_out, _ = await post(http, runs, run_request("gw-echo", "hang"))
    assert timed_out["status"] == "failed"
    assert timed_out["error"]["data"]["code"] == "E_TIMEOUT"


async def test_body_too_large(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path, probe: Probe
) -> None:
    async with (
        running_gateway(
            nats_server.url, ns, tmp_path / "big.db", *AGENTS, edges=EDGES, max_body=1024
        ) as gw,
        aiohttp.ClientSession() as http,
    ):
        err, _ = await post(http, f"{acp(gw)}/runs", run_request("gw-echo", "x" * 4096), status=413)
        assert err["code"] == "invalid_input"


# -- persistence -------------------------------------------------------------------------


async def test_runs_survive_a_restart(
    nats_server: EmbeddedServer, ns: str, tmp_path: Path, probe: Probe
) -> None:
    db = tmp_path / "restart.db"
    async with aiohttp.ClientSession() as http:
        async with running_gateway(nats_server.url, ns, db, *AGENTS, edges=EDGES) as gw1:
            done, _ = await post(http, f"{acp(gw1)}/runs", run_request("gw-echo", "keep me"))
            waiting, _ = await post(http, f"{acp(gw1)}/runs", run_request("gw-echo", "ask me"))
            # in flight when the gateway stops (a stream that never ends, on another
            # actor: a hung gw-echo would hold the resume below behind it)
            pending, _ = await post(
                http,
                f"{acp(gw1)}/runs",
                run_request("gw-streamer", "forever", "async"),
                status=202,
            )
            await asyncio.wait_for(probe.started.wait(), WAIT)
        async with running_gateway(nats_server.url, ns, db, *AGENTS, edges=EDGES) as gw2:
            got = await get(http, f"{acp(gw2)}/runs/{done['run_id']}")
            assert got["status"] == "completed"
            assert texts(got) == ["KEEP ME"]
            assert got["session_id"] == done["session_id"]
            old = await get(http, f"{acp(gw2)}/runs/{pending['run_id']}")
            assert old["status"] == "failed"  # its actor call died with gateway 1
            assert "restarted" in old["error"]["message"]
            # an awaiting run is kept, and answered after the restart
            assert (await get(http, f"{acp(gw2)}/runs/{waiting['run_id']}"))["status"] == (
                "awaiting"
            )
            resumed, _ = await post(
                http, f"{acp(gw2)}/runs/{waiting['run_id']}", resume_request("eve")
            )
            assert resumed["status"] == "completed"
            assert texts(resumed)[-1] == "HELLO EVE"


# -- egress against the gateway's own ACP edge ---------------------------------------------


async def test_egress_against_the_gateway_edge(gw: GatewayService, probe: Probe) -> None:
    async with AcpEgress(f"{acp(gw)}/agents/gw-echo", timeout=WAIT) as egress:
        assert egress.manifest is not None
        assert egress.manifest["name"] == "gw-echo"
        assert await egress.health_check()
        assert await egress.send("hi") == "HI"
        assert await egress.send({"a": 1}, session_id="abc") == {
            "echo": {"a": 1},
            "session": acp_session("abc"),
        }
        with pytest.raises(UnsupportedError, match="what is your name"):
            await egress.send("ask me")
        waiting = await egress.run("ask me")
        assert waiting["status"] == "awaiting"
        done = await egress.resume(waiting["run_id"], "zed")
        assert done["output"][-1]["parts"][0]["content"] == "HELLO ZED"
        with pytest.raises(RemoteError, match="asked to fail"):
            await egress.send("fail")
        with pytest.raises(AskTimeoutError):  # the gateway's ask gave up: E_TIMEOUT comes back
            await egress.send("hang")
        with pytest.raises(ActorNotFoundError):
            await egress.get_run(str(uuid.uuid4()))
    async with AcpEgress(acp(gw), agent="gw-streamer", timeout=WAIT) as streamer:
        assert [i async for i in streamer.stream("x y")] == ["X", "Y"]
        async with contextlib.aclosing(streamer.stream("forever")) as ticks:  # type: ignore[type-var]
            assert await anext(ticks) == "tick 0"
        # leaving early cancelled the run, and the cancel reached the actor
        await asyncio.wait_for(probe.cancelled.wait(), WAIT)
        assert streamer.last_run_id is not None
        assert (await streamer.get_run(streamer.last_run_id))["status"] == "cancelled"
    with pytest.raises(ActorNotFoundError):
        await initialized(AcpEgress(acp(gw), agent="nobody"))
    with pytest.raises(UnsupportedError, match="name one"):  # several agents: which one?
        await initialized(AcpEgress(acp(gw)))
    not_acp = AcpEgress(gw.http_url or "", agent="gw-echo")  # the root is no ACP server
    try:
        with pytest.raises(ProtocolError):
            await not_acp.initialize()
    finally:
        await not_acp.cleanup()
