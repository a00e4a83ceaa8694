"""The header block of a plain request is written by a shortcut: the very bytes
the general encoder writes, and the general encoder's cleaning whenever a value
needs it."""

from __future__ import annotations

import pytest

from actorbus.actors.actor import Incoming, current_incoming
from actorbus.actors.pipeline import encode_request
from actorbus.bus.client import encode_headers
from actorbus.codecs.inbound import Inbound, InboundContext
from actorbus.codecs.wire import DEFAULT_LIMITS, Encoding
from actorbus.security.identity import Identity
from actorbus.security.sessions import OutboundSession, now_ms


def _request(dst: str = "echo/1", intent: str | None = None, **kw: object) -> tuple[bytes, str]:
    out = encode_request(
        dst,
        {"text": "hi"},
        client_address="client/abc",
        encoding=Encoding.MSGPACK,
        limits=DEFAULT_LIMITS,
        intent=intent,
        **kw,  # type: ignore[arg-type]
    )
    return bytes(out.headers), out.id


def _as_the_general_encoder_writes(block: bytes, msg_id: str, session: str = "") -> bytes:
    """The block encode_headers writes for ``_request(intent="question")`` (its
    trace id read from ``block``), with a session line when given one."""
    trace = block.split(b"Ab-Trace: ")[1].split(b"\r\n")[0].decode()
    headers = {
        "Ab-Id": msg_id,
        "Ab-Src": "client/abc",
        "Ab-Dst": "echo/1",
        "Ab-Intent": "question",
        "Ab-Trace": trace,
    }
    if session:
        headers["Ab-Session"] = session
    return encode_headers(headers)


def _parent(trace_id: str) -> Incoming:
    env = Inbound(
        id="p-1", ts=1, dst="echo/1", intent="ask", context=InboundContext(trace_id=trace_id)
    )
    return Incoming(env, "echo/1")


def test_a_plain_request_has_the_bytes_the_general_encoder_writes() -> None:
    for _ in range(2):  # the first builds the route's lines, the second reuses them
        block, msg_id = _request(intent="question")
        assert block == _as_the_general_encoder_writes(block, msg_id)


def test_inside_a_handler_the_parent_is_written_after_the_trace() -> None:
    token = current_incoming.set(_parent("t" * 32))
    try:
        block, msg_id = _request(intent="question")
    finally:
        current_incoming.reset(token)
    assert block == encode_headers(
        {
            "Ab-Id": msg_id,
            "Ab-Src": "echo/1",
            "Ab-Dst": "echo/1",
            "Ab-Intent": "question",
            "Ab-Trace": "t" * 32,
            "Ab-Parent": "p-1",
        }
    )


@pytest.mark.parametrize("trace", ["t1\r\nAb-Src: forged", " t1 ", "t1\n"])
def test_a_trace_that_arrived_with_a_line_break_is_cleaned_as_before(trace: str) -> None:
    token = current_incoming.set(_parent(trace))
    try:
        block, _ = _request()
    finally:
        current_incoming.reset(token)
    assert block.count(b"\r\n") == 8  # the version line, six headers, the blank line
    assert b"Ab-Src: forged" not in block.split(b"Ab-Trace")[0]
    line = block.split(b"Ab-Trace: ")[1].split(b"\r\n")[0]
    assert line == trace.replace("\r", " ").replace("\n", " ").strip().encode()


def test_an_intent_with_a_line_break_cannot_add_a_header() -> None:
    block, _ = _request(intent="ask\r\nAb-Src: someone-else")
    assert block.count(b"\r\nAb-Src:") == 1  # the words are inside the intent line
    assert b"Ab-Intent: ask  Ab-Src: someone-else\r\n" in block


def test_a_request_sealed_on_a_session_has_the_bytes_the_general_encoder_writes() -> None:
    session = OutboundSession(Identity.generate(), Identity.generate().public, now_ms())
    for _ in range(2):
        block, msg_id = _request(intent="question", session=session, seal=True)
        assert block == _as_the_general_encoder_writes(block, msg_id, session.header)
    assert session.sent == 2
    # authenticated but not sealed: its tag comes after the session line, as before
    lines = _request(session=session)[0].split(b"\r\n")
    assert lines[-4].startswith(b"Ab-Session: ")
    assert lines[-3].startswith(b"Ab-Auth: ")
    assert session.sent == 3
